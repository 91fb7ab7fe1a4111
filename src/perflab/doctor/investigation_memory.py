"""Level 3 of an investigation: memory. When it is worth a snapshot (the numbers the profiled process reported at
exit, and its output), and what the memory doctor finds in one."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.analysis.gpu_memory.pressure import memory_reasons  # noqa: F401 (the walk and the report read it here)
from perflab.doctor.investigation_system import finding_dict
from perflab.errors import PerflabError

def not_needed(stats: dict[str, Any] | None) -> str:
    """Why level 3 was left out, with the numbers."""
    if not isinstance(stats, dict) or stats.get("total_mb") is None:
        return "no memory problem reported (the profiled process reported no CUDA memory numbers)"
    return (f"not needed: the allocator's reserved memory peaked at {stats.get('peak_reserved_mb', 0) / 1024:,.2f} GiB of "
            f"{stats['total_mb'] / 1024:,.1f} GiB ({100 * (stats.get('peak_reserved_mb') or 0) / stats['total_mb']:.0f} %), "
            f"{stats.get('num_ooms', 0)} out-of-memory errors, {stats.get('num_alloc_retries', 0)} allocator retries, "
            f"{stats.get('private_pools', 0)} private pools")


def memory_entry(snapshots: list[Path], stats: dict[str, Any] | None, reasons: list[str] = ()) -> dict[str, Any]:
    """The memory doctor on the (first) snapshot, with the capacity the profiled process saw beside it and who
    held the memory at its peak. When the program is short of memory (`reasons`) and the doctor finds nothing
    wasted, the top line says who holds it: the program needs that much, or keeps it."""
    from perflab.analysis.gpu_memory.memory_peak import live_at_peak
    from perflab.doctor.memory import diagnose_memory
    from perflab.trace.snapshot import load

    path = snapshots[0]
    try:
        snap = load(path)
        report = diagnose_memory(snap)
        peak = live_at_peak(snap)
    except PerflabError as exc:
        return {"finding": None, "verdict": f"the snapshot cannot be read: {exc}", "error": str(exc), "report": None,
                "file": path.name}
    top = report.top  # the memory doctor's own ranking, as `perflab doctor SNAPSHOT` prints it
    dev = (report.analyses.get("memory") or {}).get("device") or {}
    totals, timeline = dev.get("totals") or {}, dev.get("timeline") or {}
    evidence = {"reserved_mb": totals.get("reserved_mb"), "allocated_mb": totals.get("allocated_mb"),
                "peak_reserved_mb": timeline.get("peak_reserved_mb"), "peak_site": timeline.get("peak_site"),
                "private_pools": (dev.get("private_pools") or {}).get("count")}
    if isinstance(stats, dict) and stats.get("total_mb"):
        evidence["device_total_mb"] = stats["total_mb"]
        evidence["process_peak_reserved_mb"] = stats.get("peak_reserved_mb")
    evidence["peak_allocated_mb"] = peak["peak_allocated_mb"]
    evidence["held_at_peak"] = peak["by_function"][:3]
    verdict = report.verdict
    holder = peak["by_function"][0] if peak["by_function"] else None
    if reasons and holder and (top is None or top.severity == "info"):
        verdict = (f"At the allocated peak ({peak['peak_allocated_mb']:,.0f} MB) {holder['function']} holds "
                   f"{holder['mb']:,.0f} MB ({holder['pct']:.0f} %) in {holder['blocks']} blocks: the program needs or "
                   f"keeps that much, the allocator wastes little of it. {report.verdict}")
    notes = [] if len(snapshots) == 1 else [f"{len(snapshots)} snapshots in the folder: {path.name} is read"]
    unit = "% of the recorded window" if top is not None and top.id == "allocator-churn" else "% of reserved memory"
    return {"finding": finding_dict(top, unit), "verdict": verdict,
            "evidence": {k: v for k, v in evidence.items() if v is not None}, "file": path.name,
            "findings": [{"id": f.id, "severity": f.severity, "gain_pct": f.gain_pct} for f in report.findings[:6]],
            "notes": notes, "report": report.to_dict()}
