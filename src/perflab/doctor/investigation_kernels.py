"""Level 2 of an investigation: the kernels level 1 chose, each with its Nsight Compute report, the launch ncu
profiled (checked against the launch chosen in the trace) and the kernel doctor's verdict on it."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from perflab.analysis.work.kernel_targets import KernelTarget
from perflab.analysis.ncu.ncu_plan import LaunchPlan, function_name, template_key
from perflab.doctor.investigation_files import by_hand, number, report_stem, text
from perflab.doctor.investigation_system import Level1, finding_dict
from perflab.errors import PerflabError


def _product(dims: Any) -> int | None:
    return int(math.prod(dims)) if dims else None


class Reports:
    """Nsight Compute reports loaded once each; a report that cannot be read keeps its reason."""

    def __init__(self, paths: list[Path]):
        self.paths = list(paths)
        self._loaded: dict[Path, Any] = {}

    def get(self, path: Path) -> Any:
        if path not in self._loaded:
            from perflab.trace.ncu import load

            try:
                self._loaded[path] = load(path)
            except PerflabError as exc:
                self._loaded[path] = str(exc)
        return self._loaded[path]


def _matching(profile: Any, plan: LaunchPlan, kernel: str) -> list[Any]:
    hits = [k for k in profile.kernels if plan.matches(k.full_name or k.name, _product(k.grid), _product(k.block))]
    same = [k for k in hits if template_key(k.full_name or k.name) == template_key(kernel)]
    return same or hits


def _nearest(candidates: list[Any], launches: list[Any], position: float | None) -> Any:
    """Of the candidate launches, the one at `position` in the report (launch order), else the nearest to it; the
    first without a position."""
    if position is None:
        return candidates[0]
    where = {id(k): i for i, k in enumerate(launches)}
    return min(candidates, key=lambda k: (abs(where[id(k)] - position), where[id(k)]))


def _assign(targets: list[KernelTarget], plans: dict[int, LaunchPlan], reports: Reports,
            recorded: dict[str, dict]) -> dict[int, Path]:
    """Which report belongs to which target: the one the record names, else the first whose kernels match the
    plan (function, grid, block), else the first of that function name."""
    by_name = {report_stem(p.name): p for p in reports.paths}   # a report and its CSV export are one report
    out: dict[int, Path] = {}
    used: set[Path] = set()
    for i, t in enumerate(targets):
        named = by_name.get(report_stem(text(recorded.get(t.kernel, {}).get("report"))))
        if named is not None:
            out[i] = named
            used.add(named)
    for loose in (False, True):
        for i, t in enumerate(targets):
            if i in out:
                continue
            for p in reports.paths:
                prof = reports.get(p)
                if p in used or isinstance(prof, str):
                    continue
                fits = (any(function_name(k.full_name or k.name) == t.function for k in prof.kernels) if loose
                        else bool(_matching(prof, plans[t.row], t.kernel)))
                if fits:
                    out[i] = p
                    used.add(p)
                    break
    return out


def kernel_entries(l1: Level1, reports: Reports, record_kernels: list[Any], program: list[str] | None,
                   folder: Path) -> tuple[list[dict], list[dict]]:
    """One entry per kernel level 1 chose (its plan, its report, ncu's verdict on the launch it profiled), and one
    per report that belongs to none of them."""
    from perflab.doctor.ncu import diagnose_profile

    recorded = {text(k.get("kernel")): k for k in record_kernels if isinstance(k, dict)}
    assigned = _assign(l1.chosen, l1.plans, reports, recorded)
    entries = []
    trace = l1.trace
    for i, t in enumerate(l1.chosen):
        plan = l1.plans[t.row]
        rec = recorded.get(t.kernel, {})
        e: dict[str, Any] = {
            "rank": i + 1, "kernel": t.kernel, "function": t.function, "gain_us": round(t.gain_us, 3),
            "gain_pct": round(t.gain_pct, 2), "basis": t.basis, "time_us": round(t.time_us, 3),
            "sol_us": round(t.sol_us, 3) if t.sol_us is not None else None,
            "pct_of_roof": round(t.pct_of_roof, 1) if t.pct_of_roof is not None else None,
            "launches_per_step": round(t.launches_per_step, 2), "step_us": round(l1.step_us, 3), "ops": t.ops,
            "plan": plan.to_dict(),
            "chosen_launch": {"step": plan.step, "grid": plan.grid, "block": plan.block,
                              "duration_us": round(float(trace.dur[l1.launch_rows.get(t.row, t.row)]), 3)},
            "status": text(rec.get("status")) or ("done" if i in assigned else "not-run"),
            "error": text(rec.get("error")) or None, "took_s": number(rec.get("took_s")),
            "commands": {"record": plan.perflab_command(program, out=str(by_hand(folder)), name=f"ncu-{i + 1}")},
        }
        path = assigned.get(i)
        if path is None:
            e.update(finding=None, verdict=e["error"] or "not profiled: run the command above", report=None)
            entries.append(e)
            continue
        prof = reports.get(path)
        e["report_file"] = path.name
        e["commands"]["read"] = f"perflab doctor {path}"
        if isinstance(prof, str):
            e.update(status="failed", finding=None, verdict=f"the report cannot be read: {prof}", report=None)
            entries.append(e)
            continue
        hits = _matching(prof, plan, t.kernel)
        same_fn = [k for k in prof.kernels if function_name(k.full_name or k.name) == t.function]
        position = number(rec.get("position"))   # one run for several kernels: where this one's launch should be
        picked = [_nearest(hits or same_fn or prof.kernels, prof.kernels, position)]
        k = picked[0]
        e["profiled"] = {"launches": len(prof.kernels), "index": k.index, "matches_chosen": bool(hits),
                         "grid": _product(k.grid), "block": _product(k.block),
                         "duration_us": round(k.duration_s * 1e6, 3) if k.duration_s is not None else None}
        if position is not None:
            e["profiled"]["position"] = int(position)
            at = prof.kernels[int(position)] if 0 <= position < len(prof.kernels) else None
            if hits and at is not k:
                e["profiled"]["note"] = (
                    f"the launch at the window's position {int(position)} is not this kernel's: launches the trace "
                    "does not hold moved ncu's count; the launch read is the nearest that matches the chosen one")
        if not hits:
            e["profiled"]["note"] = (
                f"none of the {len(prof.kernels)} launch(es) ncu profiled has the chosen launch's grid {plan.grid} and "
                f"block {plan.block}: launches the trace does not hold (set-up before the first step) moved ncu's "
                "count; the launch read is the nearest of that name")
        try:
            ops = [str(o.get("op", "")) for o in t.ops if isinstance(o, dict)]   # ties the kernel to matrix ops
            report = diagnose_profile(type(prof)(path=prof.path, source=prof.source, kernels=picked),
                                      ops={kk.name: ops for kk in picked})
        except Exception as exc:  # the kernel doctor is another layer: this kernel's entry says so, the rest stands
            e.update(finding=None, verdict=f"the kernel doctor failed: {type(exc).__name__}: {exc}", report=None)
            entries.append(e)
            continue
        top = report.top  # the kernel doctor's own ranking: what `perflab doctor REPORT` leads with
        if top is not None:  # ncu's estimate, as a share of the step: the share of the kernel's time times its time
            kernel_gain = top.evidence.get("kernel_gain_pct", top.gain_pct) if top.severity != "info" else 0.0
            e["ncu_gain_pct"] = round(kernel_gain * t.time_us / l1.step_us, 2) if l1.step_us else None
        e.update(finding=finding_dict(top, "% of the kernel's time"), verdict=report.verdict,
                 findings=[{"id": f.id, "severity": f.severity, "gain_pct": f.gain_pct} for f in report.findings[:5]],
                 report=report.to_dict())
        entries.append(e)
    return entries, _others(reports, set(assigned.values()), l1.targets)


def _others(reports: Reports, used: set[Path], targets: list[KernelTarget]) -> list[dict]:
    """Reports no chosen kernel claims: each with the kernel doctor's verdict, and where level 1 ranks its kernels."""
    from perflab.doctor.ncu import diagnose_profile

    rank = {t.function: i + 1 for i, t in reversed(list(enumerate(targets)))}
    out = []
    for p in reports.paths:
        if p in used:
            continue
        prof = reports.get(p)
        if isinstance(prof, str):
            out.append({"report_file": p.name, "verdict": f"cannot be read: {prof}", "finding": None})
            continue
        fns = sorted({function_name(k.full_name or k.name) for k in prof.kernels})
        try:
            report = diagnose_profile(prof)
            verdict, top = report.verdict, report.top
        except Exception as exc:
            verdict, top = f"the kernel doctor failed: {type(exc).__name__}: {exc}", None
        out.append({"report_file": p.name, "kernels": fns[:6], "level1_rank": {f: rank.get(f) for f in fns[:6]},
                    "verdict": verdict, "finding": finding_dict(top, "% of the kernel's time"),
                    "commands": {"read": f"perflab doctor {p}"}})
    return out
