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
# the same physics under two names: ncu calls a kernel under 60 % of peak on every unit a latency issue and
# reports its stalls and occupancy; we name what the warps wait on or what caps them
AKIN = {"memory-bound": {"latency-bound", "low-occupancy"}, "atomic-contention": {"latency-bound"},
        "small-grid": {"low-occupancy", "latency-bound"}, "low-occupancy": {"latency-bound"},
        "register-spill": {"latency-bound", "uncoalesced-access"}, "l2-miss": {"memory-bound", "latency-bound"},
        "latency-bound": {"low-occupancy"}}
WHY = {"memory-bound": "its warps wait on memory while DRAM moves a real share of its bandwidth: too few bytes "
                       "in flight",
       "atomic-contention": "what the warps wait on is atomics piling onto a few addresses",
       "small-grid": "the grid has too few blocks: it caps the occupancy",
       "low-occupancy": "too few warps resident to hide the latency",
       "register-spill": "the memory the warps wait on is local memory",
       "l2-miss": "the memory traffic is data re-read from DRAM",
       "latency-bound": "the stalls, not the occupancy, decide"}
BIG = 10.0   # % estimated speed-up (whole kernel) from which an ncu rule we do not share is a difference


def taxonomy_for(rule: dict[str, Any]) -> str | None:
    rid = rule.get("rule", "")
    text = f"{rule.get('title', '')} {rule.get('name', '')} {rule.get('message', '')}".lower()
    for prefix, words, fid in RULE_IDS:
        if rid.startswith(prefix) and words in text:
            return fid
    return None


def _speedup(rule: dict) -> float:
    return rule.get("speedup_pct") or 0.0


def _label(r: dict) -> str:
    est = f", est. {r['speedup_pct']:.0f} % {r.get('speedup_scope') or ''}".rstrip() if r.get("speedup_pct") else ""
    return f"{r['rule']}{': ' + r['title'] if r.get('title') else ''}{est}"


def compare(rules: list[dict[str, Any]], ours: list[Finding]) -> dict[str, Any]:
    """ncu's rule results for one kernel against our (ranked) findings for it."""
    problems = sorted((r for r in rules if r.get("kind") in COMPARED_KINDS),
                      key=lambda r: (r.get("speedup_scope") != "global", -_speedup(r)))
    listed = [{**{k: r.get(k) for k in ("rule", "title", "kind", "speedup_pct", "speedup_scope")},
               "id": taxonomy_for(r), "message": r.get("message", "")[:400]} for r in problems]
    ncu_ids = list(dict.fromkeys(x["id"] for x in listed if x["id"]))
    every = {f.id for f in ours}
    # judged per kernel: a problem that costs this kernel >= 3 % of its time, whatever its share of the report
    problems_ours = [f.id for f in ours if f.id != "healthy" and (f.evidence.get("kernel_gain_pct") or 0) >= 3]
    top = problems_ours[0] if problems_ours else None
    if top is None:
        big = [x for x in listed if x["id"] and x["speedup_scope"] == "global" and _speedup(x) >= BIG]
        status, match = ("differ", big[0]) if big else ("same", None)
    elif top in ncu_ids:
        status, match = "same", next(x for x in listed if x["id"] == top)
    elif AKIN.get(top, set()) & set(ncu_ids):
        status, match = "akin", next(x for x in listed if x["id"] in AKIN[top])
    else:
        status, match = "differ", next((x for x in listed if x["id"]), listed[0] if listed else None)
    akin = AKIN.get(top or "", set())
    only_ncu = [i for i in ncu_ids if i not in every and i not in akin]
    only_ours = [i for i in problems_ours if i not in ncu_ids and not AKIN.get(i, set()) & set(ncu_ids)]
    return {"status": status, "agree": status != "differ", "rules": listed, "ncu_ids": ncu_ids,
            "our_ids": problems_ours, "only_ncu": only_ncu, "only_ours": only_ours,
            "note": _note(status, top, match, only_ncu, only_ours)}


def _note(status: str, top: str | None, match: dict | None, only_ncu: list[str], only_ours: list[str]) -> str:
    ours = top or "nothing to fix (at its roof, or healthy)"
    if status == "same":
        parts = [f"ncu agrees: {_label(match)} points to {top} too" if match else
                 "ncu agrees: none of its rules that map to a taxonomy id estimates a large gain"]
    elif status == "akin":
        parts = [f"same cause, other names: ncu says {match['id']} ({_label(match)}); we say {top}: {WHY[top]}"]
    elif match:
        parts = [f"we differ: ours is {ours}; ncu's first rule is {_label(match)} -> {match['id'] or 'no taxonomy id'}"]
    else:
        parts = [f"ncu's rules flag nothing to optimize; ours is {ours}"]
    if only_ncu:
        parts.append("ncu also flags " + ", ".join(only_ncu))
    if only_ours:
        parts.append("only we flag " + ", ".join(only_ours))
    return "; ".join(parts)
