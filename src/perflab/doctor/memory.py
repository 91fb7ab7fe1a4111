"""The memory doctor: a memory snapshot (pickle read with a restricted unpickler, or its JSON) ->
`memory-capacity` findings, or `healthy`.

    from perflab.doctor.memory import diagnose_memory
    diagnose_memory("snapshot.json.gz").to_dict()
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.doctor.finding import Finding, Report
from perflab.doctor.finding import rank as rank_findings

RULES_MODULE = "perflab.doctor.rules.memory"


@dataclass
class MemoryContext:
    snapshot: Any
    summary: dict[str, Any]

    @property
    def device(self) -> dict[str, Any]:
        return self.summary["device"]

    @property
    def totals(self) -> dict[str, Any]:
        return self.device["totals"]

    @property
    def timeline(self) -> dict[str, Any]:
        return self.device["timeline"]


def diagnose_memory(path_or_snapshot: str | Path | Any) -> Report:
    import importlib

    from perflab.analysis.memory_history import memory_summary
    from perflab.doctor.registry import run_rules
    from perflab.trace.snapshot import Snapshot, load

    snap = path_or_snapshot if isinstance(path_or_snapshot, Snapshot) else load(path_or_snapshot)
    importlib.import_module(RULES_MODULE)
    summary = memory_summary(snap)
    ctx = MemoryContext(snap, summary)
    findings = rank_findings(run_rules(ctx, source="memory"))
    t = ctx.totals
    if not any(f.severity in ("high", "medium") for f in findings):
        base = ctx.device["baseline"]
        findings.append(Finding(
            id="healthy", severity="info", gain_pct=0.0,
            evidence={"reserved_mb": t["reserved_mb"], "allocated_mb": t["allocated_mb"],
                      "private_pools": ctx.device["private_pools"]["count"], "baseline": base["basis"],
                      "baseline_mb": base["baseline_mb"], "default_pool_reserved_mb": base["reserved_mb"]},
            fix="Nothing to fix in this snapshot." if not base["predates_history"] or base["basis"] != "history" else
                "Nothing found; to judge the cache, record the allocator history from before the first step.",
            summary=f"Memory is used as allocated: the default pool reserves {base['reserved_mb']:,.0f} MB for "
                    f"{base['text']}; {t['allocated_mb']:,.0f} MB allocated of {t['reserved_mb']:,.0f} MB reserved in "
                    f"all, {ctx.device['private_pools']['count']} private pools."))
    source = {"path": str(snap.meta.get("path", "")), "kind": "memory", "device": "",
              "devices": summary["devices"]}
    verdict = findings[0].summary if findings else "Nothing to report."
    others = [f.id for f in findings[1:] if f.severity in ("high", "medium") and f.id != findings[0].id]
    if others:
        verdict += f" Also: {', '.join(others)}."
    return Report(source=source, verdict=verdict, findings=findings, analyses={"memory": summary})
