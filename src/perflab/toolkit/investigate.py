"""`perflab investigate -- CMD`: the top-down walk an expert makes, run on the user's own program.

1. the timeline: CMD under torch.profiler (steps found as `perflab profile` finds them, shapes recorded) and the
   doctor; the kernels that would save the most at their speed of light are chosen, with the ncu launch of each
   (analysis/ncu/ncu_plan.py: the kernel-name filter and the launch skip computed from the trace);
2. the kernels: CMD once per chosen kernel under Nsight Compute (`--clock-control none`, that one launch, the
   program stopped once it is profiled, a time limit), then the kernel doctor;
3. memory, when level 1 says memory is the issue (out of memory, reserved memory near the device's, allocator
   retries, CUDA graph pools): CMD with the allocator's history recorded, then the memory doctor.

Everything lands in one folder with a record (investigation.json) of how each run went; the merged report is
read back from that folder (doctor/investigation.py), the same way `perflab doctor FOLDER` reads it. A level whose
run fails or times out is recorded as such and the others still run. Each program run's output goes to a log in
the folder.
"""
from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from perflab.errors import PerflabError

RECORD_SCHEMA = "perflab.investigation-run/1"
TAIL_CHARS = 2000
Progress = Callable[[int, str], None]     # (level, what is happening now)


@dataclass
class Options:
    steps: int = 10
    warmup: int = 3
    kernels: int = 3
    min_gain_pct: float = 3.0
    memory: str = "auto"            # auto | always | never
    ncu_timeout_s: float = 300.0
    timeout_s: float | None = None  # levels 1 and 3
    marker: str | None = None
    target: str | None = None
    slice_s: float = 0.1
    section_set: str = "full"
    max_launches: int = 8
    max_entries: int = 100_000


def default_out() -> Path:
    from perflab.paths import workspace_dir

    return workspace_dir() / "investigate"


def run_bounded(cmd: Sequence[str], env: dict[str, str], *, log: Path, timeout_s: float | None) -> tuple[int, bool]:
    """Run `cmd` with its output in `log`; (exit status, timed out). The command gets its own process group, so
    at the time limit (or Ctrl-C) it is stopped whole: SIGINT (a Python program then runs its exit handlers, which
    save what was recorded), SIGTERM 10 s later, SIGKILL 5 s after that."""
    from perflab.process_group import INTERRUPT_FIRST, run_group

    with open(log, "ab") as fh:
        try:
            rc, timed_out = run_group(cmd, timeout=timeout_s, steps=INTERRUPT_FIRST, env=env, stdout=fh,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise PerflabError(f"cannot run {cmd[0]!r}: {exc.strerror or exc}") from None
    return (128 - rc if rc < 0 else rc), timed_out


def tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - chars))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


class Walk:
    """One run of the walk into `out` (a new, empty folder)."""

    def __init__(self, cmd: Sequence[str], out: Path, opts: Options, progress: Progress | None = None):
        from perflab.toolkit.profile import find_target

        if not cmd:
            raise PerflabError("give the program to investigate, e.g. `perflab investigate -- python app.py`")
        if opts.memory not in ("auto", "always", "never"):
            raise PerflabError(f"--memory must be auto, always or never (got {opts.memory!r})")
        if opts.kernels < 0 or opts.steps < 1 or opts.warmup < 0:
            raise PerflabError("need --kernels >= 0, --steps >= 1 and --warmup >= 0")
        self.cmd, self.out, self.opts = list(cmd), Path(out), opts
        self.target = find_target(self.cmd, opts.target)
        self.progress = progress or (lambda level, msg: None)
        self.record: dict[str, Any] = {
            "schema": RECORD_SCHEMA, "program": self.cmd, "target": self.target, "options": asdict(opts),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "host": {"python": platform.python_version(), "platform": platform.platform()}, "levels": {}}

    def run(self) -> Any:
        """All three levels; returns the merged report (doctor.investigation.Investigation)."""
        from perflab.doctor.investigation import build

        t0 = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        l1 = self.level1()
        self._save()
        self.level2(l1)
        self._save()
        self.level3()
        self.record["wall_s"] = round(time.perf_counter() - t0, 2)
        self._save()
        return build(self.out, level1=l1)

    def _save(self) -> None:
        import json

        from perflab.outputs import write_output

        write_output(self.out / "investigation.json", json.dumps(self.record, indent=2, default=str), force=True,
                     make_parents=True)  # the run folder: checked (check_folder) or made (new_folder) before the run

    def _runner(self, log: Path, timeout_s: float | None, into: dict) -> Callable:
        def run(cmd: Sequence[str], env: dict[str, str]) -> int:
            rc, timed_out = run_bounded(cmd, env, log=log, timeout_s=timeout_s)
            into["timed_out"] = timed_out
            return rc
        return run

    # ---- level 1 ------------------------------------------------------------------------------------------

    def level1(self) -> Any:
        from perflab.doctor.investigation_system import read_level1
        from perflab.toolkit.profile import compile_lines, profile_command

        o, rec = self.opts, {"log": "level1.log"}
        self.record["levels"]["1"] = rec
        self.progress(1, f"profiling {self._shown()} under torch.profiler ({o.warmup} warm-up + {o.steps} steps)")
        t = time.perf_counter()
        state: dict = {}
        run = profile_command(self.cmd, out=self.out, steps=o.steps, warmup=o.warmup, marker=o.marker,
                              target=self.target, slice_s=o.slice_s,
                              run=self._runner(self.out / "level1.log", o.timeout_s, state))
        first = next((p for p in run.processes if p.get("trace")), run.processes[0] if run.processes else {})
        rec.update(returncode=run.returncode, steps_by=first.get("steps_by"),
                   recorded_steps=first.get("recorded_steps"), memory=first.get("memory"),
                   compile=first.get("compile"),
                   traces=[p.name for p in run.traces], output_tail=tail(self.out / "level1.log"))
        if state.get("timed_out"):
            rec.update(status="timed-out", error=f"the program ran past the time limit ({o.timeout_s:g} s) and was "
                                                 "stopped")
        elif run.returncode != 0:
            rec.update(status="failed", error=f"the program exited with status {run.returncode} (its output: "
                                              f"{self.out / 'level1.log'})")
        elif not run.traces:
            rec.update(status="failed", error=f"no trace written: {run.explain_missing(self.target, o.warmup)}")
        else:
            rec["status"] = "done"
        for line in compile_lines(first):
            self.progress(1, line.removeprefix("perflab: "))
        self.progress(1, "reading the trace: the doctor, speed of light per op, the kernels to profile")
        l1 = read_level1(run.traces, self.out, kernels=o.kernels, min_gain_pct=o.min_gain_pct,
                         max_launches=o.max_launches, program=list(self.cmd))
        if l1.error and run.traces:
            rec["doctor_error"] = l1.error
        rec["took_s"] = round(time.perf_counter() - t, 2)
        return l1

    # ---- level 2 ------------------------------------------------------------------------------------------

    def level2(self, l1: Any) -> None:
        from perflab.toolkit.ncu_runner import EXTRA_METRICS, available_metrics, filter_metrics, find_ncu

        rec: dict[str, Any] = {"why": l1.why, "kernels": []}
        self.record["levels"]["2"] = rec
        t = time.perf_counter()
        if not l1.chosen:
            rec.update(status="not-needed", took_s=0.0)
            self.progress(2, f"no kernel to profile: {l1.why or l1.error or 'no trace'}")
            return
        try:
            ncu = find_ncu()
        except PerflabError as exc:
            rec.update(status="skipped", error=str(exc), took_s=0.0)
            self.progress(2, f"skipped: {exc}")
            return
        rec["ncu"] = str(ncu)
        self.progress(2, "asking ncu which metrics it offers")
        metrics = filter_metrics(EXTRA_METRICS, available_metrics(ncu))
        for i, k in enumerate(l1.chosen, 1):
            plan = l1.plans[k.row]
            self.progress(2, f"kernel {i}/{len(l1.chosen)}: {k.function} (skip {plan.skip}, count {plan.count}) "
                             f"under Nsight Compute")
            rec["kernels"].append(self._ncu_one(ncu, i, k, plan, metrics))
            self._save()
        ok = sum(1 for k in rec["kernels"] if k["status"] == "done")
        rec["status"] = "done" if ok == len(rec["kernels"]) else "partial" if ok else "failed"
        rec["took_s"] = round(time.perf_counter() - t, 2)

    def _ncu_one(self, ncu: Path, i: int, k: Any, plan: Any, metrics: list[str]) -> dict[str, Any]:
        from perflab.toolkit.ncu_runner import build_command, export_csv

        name = f"ncu-{i}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', k.function)[:60]}"
        base, log = self.out / name, self.out / f"{name}.log"
        entry: dict[str, Any] = {"kernel": k.kernel, "function": k.function, "row": k.row, "report": None,
                                 "log": log.name, "plan": plan.to_dict()}
        t = time.perf_counter()
        status, error = "done", None
        for extra in (metrics, None):  # an extra metric this ncu rejects must not cost the profile
            cmd = build_command(ncu, base, self.cmd, kernel=plan.regex, section_set=self.opts.section_set,
                                launch_count=plan.count, launch_skip=plan.skip, metrics=extra, kill=True)
            entry["command"] = cmd
            rc, timed_out = run_bounded(cmd, dict(os.environ), log=log, timeout_s=self.opts.ncu_timeout_s)
            if timed_out:
                status, error = "timed-out", (f"ncu ran past the time limit ({self.opts.ncu_timeout_s:g} s) and was "
                                              "stopped: raise --ncu-timeout, or profile fewer launches")
                break
            if base.with_suffix(".ncu-rep").exists() or not extra:
                break
        report = base.with_suffix(".ncu-rep")
        if status == "done" and not report.exists():
            lines = [ln for ln in tail(log).splitlines() if "==ERROR==" in ln or "==WARNING==" in ln]
            status, error = "failed", f"ncu wrote no report (exit {rc}): " + (lines[-1] if lines else "see " + log.name)
        if report.exists():
            entry["report"] = report.name
            try:
                export_csv(ncu, report, base.with_suffix(".csv"))
            except PerflabError as exc:
                entry["csv_error"] = str(exc)
        entry.update(status=status, error=error, took_s=round(time.perf_counter() - t, 2))
        return entry

    # ---- level 3 ------------------------------------------------------------------------------------------

    def level3(self) -> None:
        from perflab.doctor.investigation_memory import memory_reasons
        from perflab.toolkit.memory_record import record_command

        r1 = self.record["levels"]["1"]
        reasons = memory_reasons(r1.get("memory"), r1.get("output_tail") or "")
        rec: dict[str, Any] = {"reasons": reasons}
        self.record["levels"]["3"] = rec
        if self.opts.memory == "never" or (self.opts.memory == "auto" and not reasons):
            rec.update(status="skipped" if self.opts.memory == "never" else "not-needed", took_s=0.0)
            self.progress(3, "not needed: level 1 shows no memory problem" if not reasons else "skipped (--memory never)")
            return
        if self.opts.memory == "always" and not reasons:
            rec["reasons"] = ["asked for (--memory always)"]
        self.progress(3, f"recording the allocator's history of {self._shown()}: " + "; ".join(rec["reasons"]))
        t = time.perf_counter()
        state: dict = {}
        log = self.out / "memory.log"
        try:
            run = record_command(self.cmd, out=self.out / "memory.json.gz", target=self.target,
                                 max_entries=self.opts.max_entries, run=self._runner(log, self.opts.timeout_s, state))
        except PerflabError as exc:
            rec.update(status="failed", error=str(exc), took_s=round(time.perf_counter() - t, 2), log=log.name)
            return
        rec.update(returncode=run.returncode, log=log.name, took_s=round(time.perf_counter() - t, 2),
                   snapshot=run.snapshot.name if run.snapshot else None)
        if run.snapshot is None:
            rec.update(status="failed", error="no snapshot: " + run.explain_missing(self.target))
        else:
            rec["status"] = "done"
            if state.get("timed_out"):
                rec["error"] = "the program ran past the time limit; the snapshot holds the history up to then"

    def _shown(self) -> str:
        return " ".join(self.cmd)[:80]


def investigate(cmd: Sequence[str], out: Path, opts: Options | None = None, progress: Progress | None = None) -> Any:
    """Run the walk on `cmd` into the new folder `out`; the merged report (see the module doc)."""
    return Walk(cmd, out, opts or Options(), progress).run()
