"""Nsight Compute's own guided analysis beside ours: which taxonomy id each of ncu's rule results points to,
and where the two diagnoses of a kernel agree or differ (per kernel, for the report's analyses)."""
from __future__ import annotations

from typing import Any

from perflab.doctor.finding import Finding

COMPARED_KINDS = ("optimization", "warning", "error")   # ncu's "ok"/"none" results are notes, not problems

# (rule identifier, words of its title or message) -> taxonomy id; first match wins; None: no id of ours
RULE_IDS: list[tuple[str, str, str | None]] = [
    ("SOLBottleneck", "small grid", "small-grid"), ("SOLBottleneck", "latency", "latency-bound"),
    ("SOLBottleneck", "high memory", "memory-bound"), ("SOLBottleneck", "high compute", "compute-bound"),
    ("LaunchConfiguration", "small grid", "small-grid"), ("LaunchConfiguration", "tail", "tail-effect"),
    ("LaunchConfiguration", "", "low-occupancy"),
    ("AchievedOccupancy", "", "low-occupancy"), ("TheoreticalOccupancy", "", "low-occupancy"),
    ("CPIStall", "not selected", "compute-bound"), ("CPIStall", "math pipe", "compute-bound"),
    ("CPIStall", "warpgroup", None), ("CPIStall", "gmma", None), ("CPIStall", "", "latency-bound"),
    ("IssueSlotUtilization", "", "latency-bound"),
    ("HighPipeUtilization", "low utilization", None), ("HighPipeUtilization", "", "compute-bound"),
    ("UncoalescedGlobalAccess", "", "uncoalesced-access"),
    ("MemoryCacheAccessPattern", "local", "register-spill"), ("MemoryCacheAccessPattern", "", "uncoalesced-access"),
    ("SharedMemoryConflicts", "", "bank-conflicts"), ("UncoalescedSharedAccess", "", "bank-conflicts"),
    ("ThreadDivergence", "", "warp-divergence"),
]
# the same physics under two names: ncu calls every kernel under 60 % on all units a latency issue, where
# we say memory-bound (too few bytes in flight) or name the cause of the stalls
AKIN = {"memory-bound": {"latency-bound"}, "atomic-contention": {"latency-bound"},
        "small-grid": {"low-occupancy", "latency-bound"}, "low-occupancy": {"latency-bound"},
        "register-spill": {"latency-bound"}, "l2-miss": {"memory-bound"}}


def taxonomy_for(rule: dict[str, Any]) -> str | None:
    rid = rule.get("rule", "")
    text = f"{rule.get('title', '')} {rule.get('name', '')} {rule.get('message', '')}".lower()
    for prefix, words, fid in RULE_IDS:
        if rid.startswith(prefix) and words in text:
            return fid
    return None


def _speedup(rule: dict) -> float:
    return rule.get("speedup_pct") or 0.0


def compare(rules: list[dict[str, Any]], ours: list[Finding]) -> dict[str, Any]:
    """ncu's rule results for one kernel against our findings for it."""
    problems = sorted((r for r in rules if r.get("kind") in COMPARED_KINDS),
                      key=lambda r: (r.get("speedup_scope") != "global", -_speedup(r)))
    listed = [{**{k: r.get(k) for k in ("rule", "title", "kind", "speedup_pct", "speedup_scope")},
               "id": taxonomy_for(r), "message": r.get("message", "")[:400]} for r in problems]
    ncu_ids = [x["id"] for x in listed if x["id"]]
    our_ids = [f.id for f in ours if f.severity != "info"]
    top = our_ids[0] if our_ids else (ours[0].id if ours else None)
    agree = top is not None and (top in ncu_ids or bool(AKIN.get(top, set()) & set(ncu_ids)) or
                                 (not ncu_ids and not our_ids))
    only_ncu = sorted({i for i in ncu_ids if i not in our_ids and i not in AKIN.get(top or "", set())})
    only_ours = [i for i in our_ids if i not in ncu_ids and not AKIN.get(i, set()) & set(ncu_ids)]
    return {"rules": listed, "ncu_ids": sorted(set(ncu_ids)), "our_ids": our_ids, "agree": agree,
            "only_ncu": only_ncu, "only_ours": only_ours, "note": _note(listed, top, agree, only_ncu, only_ours)}


def _note(listed: list[dict], top: str | None, agree: bool, only_ncu: list[str], only_ours: list[str]) -> str:
    if not listed:
        return "Nsight Compute's rules flag nothing to optimize in this kernel" + (
            "; we do" if top and top not in ("healthy",) and only_ours else "")
    first = next((x for x in listed if x["id"]), listed[0])
    est = f", est. {first['speedup_pct']:.0f} % {first['speedup_scope'] or ''}".rstrip() if first.get("speedup_pct") else ""
    lead = f"{first['rule']}{': ' + first['title'] if first['title'] else ''}{est}"
    parts = [f"agree: ncu's rules point to {top} too" if agree else
             f"differ: our top finding is {top}, ncu's first rule is {lead} ({first['id'] or 'no taxonomy id'})"]
    if agree:
        parts.append(f"(first: {lead})")
    if only_ncu:
        parts.append("ncu also flags " + ", ".join(only_ncu))
    if only_ours:
        parts.append("only we flag " + ", ".join(only_ours))
    return "; ".join(parts)
