"""`perflab investigate -- CMD`: the top-down walk an expert makes, run on the user's own program.

1. the timeline: CMD under torch.profiler (steps found as `perflab profile` finds them, shapes recorded) and the
   doctor; the kernels that would save the most at their speed of light are chosen, with the ncu launch of each
   (analysis/ncu/ncu_plan.py: the kernel-name filter and the launch skip computed from the trace);
2. the kernels: CMD once under Nsight Compute for all the chosen kernels (`--clock-control none`, one launch window
   that holds a launch like each chosen one, what the kernel doctor reads rather than the whole `full` set, the
   program stopped once they are profiled, a time limit; toolkit/investigate_kernels.py), then the kernel doctor;
3. memory, when level 1 says memory is the issue (out of memory, reserved memory near the device's, allocator
   retries, CUDA graph pools): CMD with the allocator's history recorded, then the memory doctor.

Everything lands in one folder with a record (investigation.json) of how each run went; the merged report is
read back from that folder (doctor/investigation.py), the same way `perflab doctor FOLDER` reads it. A level whose
run fails or times out is recorded as such and the others still run. Each program run's output goes to a log in
the folder.
"""
from __future__ import annotations

import datetime as dt
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from perflab.errors import PerflabError
from perflab.process_group import run_bounded, tail

RECORD_SCHEMA = "perflab.investigation-run/1"
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
    section_set: str = "doctor"     # doctor: what the kernel doctor reads (toolkit/ncu_metrics.py); or an ncu set
    ncu_runs: str = "one"           # one: every chosen kernel in one run of the program; per-kernel: a run each
    memory_run: str = "level1"      # level1: the allocator's history from level 1's run; separate: a run of its own
    max_launches: int = 8
    max_entries: int = 100_000


def default_out() -> Path:
    from perflab.paths import workspace_dir

    return workspace_dir() / "investigate"


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
        from perflab.toolkit.investigate_kernels import RUNS

        if opts.ncu_runs not in RUNS:
            raise PerflabError(f"--ncu-runs must be one of {', '.join(RUNS)} (got {opts.ncu_runs!r})")
        if opts.memory_run not in ("level1", "separate"):
            raise PerflabError(f"--memory-run must be level1 or separate (got {opts.memory_run!r})")
        self.cmd, self.out, self.opts = list(cmd), Path(out), opts
        self.history_dir: Path | None = None
        self.level1_snapshot: Path | None = None
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
        self.history_dir = Path(tempfile.mkdtemp(prefix="perflab-memory-"))   # level 1's allocator history, if kept
        try:
            l1 = self.level1()
            self._save()
            self.level2(l1)
            self._save()
            self.level3()
        finally:
            shutil.rmtree(self.history_dir, ignore_errors=True)
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
        history = None
        if o.memory != "never" and o.memory_run == "level1":   # level 3's history in this run: no run of its own
            history = {"snapshot_dir": str(self.history_dir), "max_entries": o.max_entries,
                       "keep": "always" if o.memory == "always" else "when-needed"}
        run = profile_command(self.cmd, out=self.out, steps=o.steps, warmup=o.warmup, marker=o.marker,
                              target=self.target, slice_s=o.slice_s, memory_history=history,
                              run=self._runner(self.out / "level1.log", o.timeout_s, state))
        rec["program_s"] = round(time.perf_counter() - t, 2)   # the program's run alone (the doctor's reading after)
        first = next((p for p in run.processes if p.get("trace")), run.processes[0] if run.processes else {})
        self.level1_snapshot = next((Path(p["history"]["snapshot"]) for p in run.processes
                                     if (p.get("history") or {}).get("snapshot")), None)
        if history is not None:
            h = first.get("history") or {}
            rec["history"] = {"recording": bool(h.get("recording")), "kept": self.level1_snapshot is not None,
                              "error": h.get("error"),
                              "stacks_left_out_while_profiling": bool(h.get("stacks_left_out_while_profiling"))}
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
        self.progress(1, f"{rec['status']} in {rec['took_s']:.0f} s (the program ran {rec['program_s']:.0f} s of it)")
        return l1

    # ---- level 2 ------------------------------------------------------------------------------------------

    def level2(self, l1: Any) -> None:
        from perflab.toolkit.investigate_kernels import KernelLevel, expected_level2_s, passes_line
        from perflab.toolkit.ncu_metrics import DOCTOR_SET, EXTRA_METRICS, doctor_metrics
        from perflab.toolkit.ncu_runner import available_metrics, filter_metrics, find_ncu

        rec: dict[str, Any] = {"why": l1.why, "kernels": [], "runs": self.opts.ncu_runs,
                               "section_set": self.opts.section_set}
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
        program_s = float(self.record["levels"]["1"].get("program_s") or 0.0)
        runs, launches = passes_line(l1, self.opts.ncu_runs)
        rec["expected_s"] = round(expected_level2_s(l1, program_s, self.opts.ncu_runs, self.opts.section_set), 1)
        self.progress(2, f"{len(l1.chosen)} kernel(s) in {runs} run(s) of the program under Nsight Compute, "
                         f"{launches} launch(es) replayed ({self.opts.section_set} set): "
                         f"expected ~{rec['expected_s']:.0f} s")
        self.progress(2, "asking ncu which metrics it offers")
        wanted = doctor_metrics() if self.opts.section_set == DOCTOR_SET else EXTRA_METRICS
        metrics = filter_metrics(wanted, available_metrics(ncu))
        KernelLevel(self, rec, ncu, metrics, self._save).run(l1)
        ok = sum(1 for k in rec["kernels"] if k["status"] == "done")
        rec["status"] = "done" if ok == len(rec["kernels"]) else "partial" if ok else "failed"
        rec["took_s"] = round(time.perf_counter() - t, 2)

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
        t = time.perf_counter()
        if self.level1_snapshot is not None and self.level1_snapshot.exists():
            self.progress(3, "the allocator's history recorded in level 1's run: reading it (" +
                          "; ".join(rec["reasons"]) + ")")
            self._level1_history(rec, t)
            return
        program_s = float(self.record["levels"]["1"].get("program_s") or 0.0)
        self.progress(3, f"recording the allocator's history of {self._shown()} (expected ~{program_s:.0f} s, a run "
                         "of the program): " + "; ".join(rec["reasons"]))
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

    def _level1_history(self, rec: dict[str, Any], t: float) -> None:
        from perflab.trace.snapshot import convert

        try:
            snapshot = convert(self.level1_snapshot, self.out / "memory.json.gz", force=True)
        except PerflabError as exc:
            rec.update(status="failed", error=str(exc), took_s=round(time.perf_counter() - t, 2), from_level1=True)
            return
        rec.update(status="done", snapshot=snapshot.name, from_level1=True, took_s=round(time.perf_counter() - t, 2))
        if self.record["levels"]["1"].get("status") == "timed-out":
            rec["error"] = "the program ran past the time limit; the snapshot holds the history up to then"

    def _shown(self) -> str:
        return " ".join(self.cmd)[:80]


def investigate(cmd: Sequence[str], out: Path, opts: Options | None = None, progress: Progress | None = None) -> Any:
    """Run the walk on `cmd` into the new folder `out`; the merged report (see the module doc)."""
    return Walk(cmd, out, opts or Options(), progress).run()
