"""The memory doctor: a memory snapshot (pickle read with a restricted unpickler, or its JSON) ->
`memory-capacity` findings, or `healthy`. A snapshot of several devices is judged device by device, the
worst device first: `healthy` only when no device has a finding above low.

    from perflab.doctor.memory import diagnose_memory
    diagnose_memory("snapshot.json.gz").to_dict()
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.doctor.finding import SEVERITY_ORDER, Finding, Report
from perflab.doctor.finding import rank as rank_findings

RULES_MODULE = "perflab.doctor.rules.memory"


@dataclass
class MemoryContext:
    snapshot: Any
    summary: dict[str, Any]
    device_id: int | None = None      # the device judged (None: the summary's first)

    @property
    def device(self) -> dict[str, Any]:
        if self.device_id is None:
            return self.summary["device"]
        return self.summary["per_device"][str(self.device_id)]

    @property
    def events(self) -> list:
        """The allocator's recorded history on this device (its device trace)."""
        d = self.device_id if self.device_id is not None else (self.summary["devices"] or [0])[0]
        traces = self.snapshot.traces
        return traces[d] if 0 <= d < len(traces) else []

    @property
    def totals(self) -> dict[str, Any]:
        return self.device["totals"]

    @property
    def timeline(self) -> dict[str, Any]:
        return self.device["timeline"]


def diagnose_memory(path_or_snapshot: str | Path | Any) -> Report:
    import importlib

    from perflab.analysis.gpu_memory.memory_history import memory_summary
    from perflab.doctor.registry import run_rules
    from perflab.trace.snapshot import Snapshot, load

    snap = path_or_snapshot if isinstance(path_or_snapshot, Snapshot) else load(path_or_snapshot)
    importlib.import_module(RULES_MODULE)
    summary = memory_summary(snap)
    several = len(summary["devices"]) > 1
    findings, worst = [], []
    for d in summary["devices"]:
        found = run_rules(MemoryContext(snap, summary, d), source="memory")
        if several:
            for f in found:
                f.evidence = {"device": d, **f.evidence}
                f.summary = f"device {d}: {f.summary}"
        findings += found
        top = rank_findings(found)[:1]
        worst.append((top[0] if top else None, d))
    findings = rank_findings(findings)
    order = [d for f, d in sorted(worst, key=lambda x: (
        (SEVERITY_ORDER[x[0].severity], -x[0].gain_pct) if x[0] else (len(SEVERITY_ORDER), 0.0),
        -summary["per_device"][str(x[1])]["totals"]["reserved_mb"]))]
    summary["worst_first"] = order
    if several:
        summary["device"] = summary["per_device"][str(order[0])]   # what a renderer shows as "the device"
    if not any(f.severity in ("high", "medium") for f in findings):
        findings.append(_healthy(MemoryContext(snap, summary, order[0] if order else None), several))
    source = {"path": str(snap.meta.get("path", "")), "kind": "memory", "device": "",
              "devices": summary["devices"]}
    verdict = findings[0].summary if findings else "Nothing to report."
    others = [f.id for f in findings[1:] if f.severity in ("high", "medium") and f.id != findings[0].id]
    if others:
        verdict += f" Also: {', '.join(others)}."
    return Report(source=source, verdict=verdict, findings=findings, analyses={"memory": summary})


def _healthy(ctx: MemoryContext, several: bool) -> Finding:
    t, base = ctx.totals, ctx.device["baseline"]
    per = ctx.summary["per_device"]
    where = f" on each of its {len(per)} devices; on the worst, device {ctx.device_id}, " if several else ": "
    return Finding(
        id="healthy", severity="info", gain_pct=0.0,
        evidence={"reserved_mb": t["reserved_mb"], "allocated_mb": t["allocated_mb"],
                  "private_pools": ctx.device["private_pools"]["count"], "baseline": base["basis"],
                  "baseline_mb": base["baseline_mb"], "default_pool_reserved_mb": base["reserved_mb"],
                  **({"device": ctx.device_id, "devices": len(per)} if several else {})},
        fix="Nothing to fix in this snapshot." if not base["predates_history"] or base["basis"] != "history" else
            "Nothing found; to judge the cache, record the allocator history from before the first step.",
        summary=f"Memory is used as allocated{where}the default pool reserves {base['reserved_mb']:,.0f} MB for "
                f"{base['text']}; {t['allocated_mb']:,.0f} MB allocated of {t['reserved_mb']:,.0f} MB reserved in "
                f"all, {ctx.device['private_pools']['count']} private pools.")
