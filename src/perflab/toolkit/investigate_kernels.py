"""Level 2 of `perflab investigate`: the kernels level 1 chose, under Nsight Compute.

One run of the program profiles them all (analysis/ncu/ncu_pass.py: one kernel filter, one launch window that holds
a launch like each chosen one), collecting what the kernel doctor reads (toolkit/ncu_metrics.py) rather than the
whole `full` set. Kernels too far apart for one window get a run per window. `runs="per-kernel"` keeps the earlier
way (one run per kernel, its own filter and skip) for side-by-side timing (benchmarks/investigate_one_pass.py).

Each chosen kernel keeps its own record (its launch plan, the report that holds it, its position there); the report
is split into the kernels' launches when it is read (doctor/investigation_kernels.py).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError
from perflab.process_group import run_bounded, tail

RUNS = ("one", "per-kernel")
# What a run under ncu is expected to cost, for the progress line (a user deciding whether to wait): the program up to
# the profiled launch (at most its level-1 run), plus, per profiled launch, the metric passes ncu replays it for. The
# passes per launch are what ncu printed for H100 kernels ("- 38 passes" for the full set); a pass costs the
# kernel's own time plus ncu's save and restore of the memory the kernel touches.
PASSES = {"full": 40, "doctor": 20}
PASS_OVERHEAD_S = 0.05
NCU_START_S = 3.0


def expected_ncu_s(program_s: float, launches: int, kernel_us: float, section_set: str) -> float:
    """Seconds one ncu run of the program is expected to take (see PASSES)."""
    passes = PASSES.get(section_set, PASSES["full"])
    return NCU_START_S + program_s + launches * passes * (kernel_us * 1e-6 + PASS_OVERHEAD_S)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60]


def passes_line(l1: Any, runs: str) -> tuple[int, int]:
    """(ncu runs, launches profiled in all) for the chosen kernels."""
    if runs == "per-kernel":
        return len(l1.chosen), sum(p.count for p in l1.plans.values())
    return len(l1.passes), sum(p.count for p in l1.passes)


def expected_level2_s(l1: Any, program_s: float, runs: str, section_set: str) -> float:
    """The whole level's expected seconds: every run of the program under ncu (see expected_ncu_s)."""
    kernel_us = {t.row: t.time_us / max(t.launches_per_step, 1e-9) for t in l1.chosen}   # one launch's time
    if runs == "per-kernel":
        return sum(expected_ncu_s(program_s, l1.plans[t.row].count, kernel_us[t.row], section_set) for t in l1.chosen)
    return sum(expected_ncu_s(program_s, p.count, max(kernel_us.get(m.target_row, 0.0) for m in p.members),
                              section_set) for p in l1.passes)


class KernelLevel:
    """Runs level 2 into the walk's folder and record (`rec`, the record's levels["2"])."""

    def __init__(self, walk: Any, rec: dict[str, Any], ncu: Path, metrics: list[str] | None,
                 save: Callable[[], None]):
        self.walk, self.rec, self.ncu, self.metrics, self.save = walk, rec, ncu, metrics, save
        self.opts, self.out, self.progress = walk.opts, walk.out, walk.progress

    def run(self, l1: Any) -> None:
        if self.opts.ncu_runs == "per-kernel":
            for i, k in enumerate(l1.chosen, 1):
                plan = l1.plans[k.row]
                self.progress(2, f"kernel {i}/{len(l1.chosen)}: {k.function} (skip {plan.skip}, count {plan.count}) "
                                 "under Nsight Compute")
                done = self.ncu_run(f"ncu-{i}-{safe_name(k.function)}", plan.regex, plan.skip, plan.count)
                self.rec["kernels"].append({**self._entry(k, l1), **done})
                self.save()
            return
        self.rec["passes"] = []
        for g, p in enumerate(l1.passes, 1):
            names = ", ".join(m.function for m in p.members)
            self.progress(2, f"run {g}/{len(l1.passes)} under Nsight Compute: {len(p.members)} kernel(s) ({names}) in "
                             f"{p.count} launch(es) (skip {p.skip})")
            done = self.ncu_run(f"ncu-{g}-{safe_name(p.members[0].function)}", p.regex, p.skip, p.count)
            self.rec["passes"].append({**done, "plan": p.to_dict()})
            by_row = {t.row: t for t in l1.chosen}
            for m in p.members:
                self.rec["kernels"].append({**self._entry(by_row[m.target_row], l1), **done, "pass": g,
                                            "position": m.position})
            self.save()

    @staticmethod
    def _entry(k: Any, l1: Any) -> dict[str, Any]:
        return {"kernel": k.kernel, "function": k.function, "row": k.row, "plan": l1.plans[k.row].to_dict()}

    def ncu_run(self, name: str, regex: str, skip: int, count: int) -> dict[str, Any]:
        """One run of the program under ncu into NAME.ncu-rep (and its raw-page CSV): what the record keeps of it."""
        from perflab.toolkit.ncu_runner import build_command, export_csv

        base, log = self.out / name, self.out / f"{name}.log"
        entry: dict[str, Any] = {"report": None, "log": log.name}
        t = time.perf_counter()
        status, error, rc = "done", None, 0
        for extra in (self.metrics, None):  # a metric this ncu rejects must not cost the profile
            cmd = build_command(self.ncu, base, self.walk.cmd, kernel=regex, section_set=self.opts.section_set,
                                launch_count=count, launch_skip=skip, metrics=extra, kill=True)
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
                export_csv(self.ncu, report, base.with_suffix(".csv"))
            except PerflabError as exc:
                entry["csv_error"] = str(exc)
        entry["passes_per_launch"] = replay_passes(tail(log, 20_000))
        entry.update(status=status, error=error, took_s=round(time.perf_counter() - t, 2))
        return entry


def replay_passes(log_text: str) -> list[int]:
    """ncu's passes per profiled launch, from its output ('==PROF== Profiling "k" - 0: ...100% - 38 passes')."""
    return [int(n) for n in re.findall(r"==PROF== Profiling .*? - (\d+) pass", log_text)]
