"""The merge: a job's doctor report from its ranks' summaries alone (no trace is read here).

Which files are the job's ranks (kineto_folder.choose_job, on the summaries), the k-th collective of a process
group inside a step matched across ranks (analysis/multigpu/collectives.py: the last rank to arrive has the shortest
kernel, that duration is the transfer, every other rank's extra time is waiting), each rank's waits and how
much of them no compute hid (from the uncovered stretches of its collectives), the per-rank table, the
straggler, then the job's rules (summary.JOB_RULE_MODULES) on the report's rank and its own findings (from its
report), in the order and with the numbers the single-process doctor gives (tests/multigpu/test_multirank_merge.py holds
them equal).
Memory: the summaries, which grow with the collectives, never with the events.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Callable

import numpy as np

from perflab.analysis.multigpu.collective_table import from_dicts
from perflab.analysis.multigpu.collectives import _bandwidths, job_summary, p2p_waits, rank_row, top_collectives
from perflab.analysis.idle.intervals import length
from perflab.doctor import _pick_rank, plain, verdict
from perflab.doctor.finding import EventRef, Finding, Report
from perflab.doctor.finding import rank as rank_findings
from perflab.multirank.ranks import RankView, SummaryContext
from perflab.multirank.summary import JOB_RULE_MODULES
from perflab.trace.torch_profiler.kineto_folder import FileEntry, choose_job


def merge_job(folder: str, summaries: list[dict], report_of: Callable[[RankView], dict], *,
              rank: int | None = None) -> Report:
    """The doctor's report on `rank` (default: the lowest rank read) of the job in `folder`, from every file's
    summary; `report_of(view)`: that rank's own report (multirank/tasks.py)."""
    files: dict[str, FileEntry] = {}
    views = []
    for s in summaries:
        if "meta" in s:
            views.append(RankView(s))
        else:
            entry = FileEntry(**s["file"])
            files[Path(entry.path).name] = entry
    job = choose_job(folder, views, files)
    ranks: list[RankView] = job.traces
    chosen = _pick_rank(ranks, rank)
    own = report_of(chosen)
    source = {k: v for k, v in own["source"].items() if k != "notes"}
    source["ranks"] = [r.rank for r in ranks]
    notes = ([f"rank {r.rank}: {n}" if len(ranks) > 1 else n for r in ranks if (n := r.summary.get("data_note"))]
             + chosen.summary.get("capture_notes", []))
    notes += [own["compile_work"]["summary"]] if own["compile_work"]["summary"] else []
    if notes:
        source["notes"] = notes
    if own.get("unfit"):  # the rank's window is not steady state (or holds no kernels): no rule judges it
        unfit = own["unfit"]
        return Report(source={**source, "folder": job.accounting()}, verdict=unfit["verdict"], findings=[],
                      analyses=unfit["analyses"])
    if chosen.summary.get("cpu_only"):
        report = own["cpu_report"]
        report = Report(source={**source, "folder": job.accounting()}, verdict=report["verdict"],
                        findings=[_finding(f) for f in report["findings"]], analyses=report["analyses"])
        return report
    multi = multirank(ranks, chosen)
    findings = _findings(chosen, own, ranks, multi)
    analyses = {**own["analyses"]}
    filtered = "filtered" if len({s for r in ranks for s in r.summary["hta"]["step_symbols"]}) >= 2 else "unfiltered"
    analyses["hta"] = {"temporal_breakdown": [r.summary["hta"]["temporal"][filtered] for r in ranks],
                       "idle_time_breakdown": own["hta_idle"][filtered]}
    if multi:
        analyses["multigpu"] = {**multi, "top_collectives": top_collectives(chosen)}  # type: ignore[arg-type]
    source["folder"] = job.accounting()
    text = verdict(findings)
    if (analyses.get("critical_path") or {}).get("note"):  # several streams at once: which chain sets the step
        text += " " + analyses["critical_path"]["note"]
    return Report(source=source, verdict=text, findings=findings, analyses=plain(analyses))


def _findings(chosen: RankView, own: dict, ranks: list[RankView], multi: dict) -> list[Finding]:
    """The rank's own findings and the job rules' on it, in rule order, ranked; `healthy` as the doctor adds it."""
    from perflab.doctor.registry import rules_for

    ctx = SummaryContext(chosen, ranks)
    chosen.cache["multirank"] = multi
    found = [(f["rule"], _finding(f)) for f in own["findings"]]
    for index, rule in enumerate(rules_for("kineto")):
        if rule.__module__ in JOB_RULE_MODULES:
            found += [(index, f) for f in rule(ctx)]
    found.sort(key=lambda x: x[0])
    from perflab.doctor.rules.roof import after_system_causes
    from perflab.doctor.shared_time import share_lost_time

    idle = 100.0 - chosen.summary.get("gpu_busy_pct", 100.0)  # as doctor.ranked_findings does
    findings = after_system_causes(rank_findings(share_lost_time(rank_findings([f for _, f in found]), idle)), idle)
    if not any(f.severity in ("high", "medium") for f in findings):
        findings = [_finding(f) for f in own["healthy"]] + findings
    if not any(f.id == "not-judged" for f in findings):   # beside the system verdict (doctor.beside_system_verdict)
        findings += [_finding(f) for f in own.get("not_judged", [])]
    return findings


def _finding(d: dict) -> Finding:
    d = {k: v for k, v in d.items() if k != "rule"}
    return Finding(**{**d, "events": [EventRef(**e) for e in d.get("events", [])]})


def multirank(ranks: list[RankView], chosen: RankView) -> dict:
    """analysis.multigpu.collectives.multirank_summary, from the summaries; sets the report rank's collectives (with
    their transfer and wait) for the job rules and top_collectives."""
    if not any(len(r) for r in ranks) and len(ranks) < 2:
        for r in ranks:  # the job rules still read the rank's (empty) collectives
            r.cache.setdefault("collectives", r.collective_dicts())
        return {}
    ids = _match_ids(ranks)
    n = max((int(i.max()) + 1 for i in ids if i.size), default=0)
    best, worst = np.full(n, np.inf), np.full(n, -np.inf)
    last, count = np.full(n, -1), np.zeros(n, dtype=np.int64)
    durs = [np.asarray(r.columns["dur_us"], dtype=np.float64) for r in ranks]
    for r, i, d in zip(ranks, ids, durs):
        earlier = d < best[i]  # the first rank (in rank order) with the shortest kernel, as min() picks it
        best[i[earlier]] = d[earlier]
        last[i[earlier]] = r.rank
        worst[i] = np.maximum(worst[i], d)
        count[i] += 1
    matched = count >= 2
    last_counts: dict[int, int] = defaultdict(int)
    for k in np.flatnonzero(matched & (worst - best > 0)).tolist():
        last_counts[int(last[k])] += 1
    per_rank = [_rank_line(r, np.where(matched[i], d - best[i], np.nan), matched[i]) for r, i, d in zip(ranks, ids, durs)]
    for r in {id(ranks[0]): ranks[0], id(chosen): chosen}.values():
        colls = r.collective_dicts()
        for c, k, d in zip(colls, ids[ranks.index(r)].tolist(), durs[ranks.index(r)].tolist()):
            if matched[k]:
                c["transfer_us"], c["wait_us"] = float(best[k]), d - float(best[k])
        _bandwidths(colls, "transfer_us", "transfer_")
        r.cache["collectives"] = colls
    total = sum(len(r) for r in ranks)
    sized = sum(sum(b is not None for b in r.columns["bytes"]) for r in ranks)
    return job_summary(ranks, per_rank, from_dicts(ranks[0].cache["collectives"]), total, sized, int(matched.sum()),
                       dict(last_counts))


def _match_ids(ranks: list[RankView]) -> list[np.ndarray]:
    """Per rank, the id of each collective's (process group, step, k-th in them) key, ids in first-seen order."""
    keys: dict[tuple, int] = {}
    out = []
    for r in ranks:
        cols, strings = r.columns, r.columns["strings"]
        ids = [keys.setdefault(((strings[pg] if pg is not None else None) or "default", step, seq)
                               if seq is not None else (r.rank, i), len(keys))  # (rank, i): matched to no other
               for i, (pg, step, seq) in enumerate(zip(cols["pg"], cols["step"], cols["seq"]))]
        out.append(np.array(ids, dtype=np.int64))
    return out


def _rank_line(r: RankView, wait: np.ndarray, matched: np.ndarray) -> dict:
    """analysis.multigpu.collectives.rank_summary from the summary and the waits the match gave."""
    s, cols = r.summary, r.columns
    inside = np.asarray(cols["in_window"], dtype=bool)
    waits = wait[inside & matched].tolist()
    ts = np.asarray(cols["ts"], dtype=np.float64)
    exposed = _uncovered_length(cols, inside, ts + np.where(matched, np.nan_to_num(wait), 0.0)) if waits else 0.0
    in_window = [c for c, ok in zip(r.collective_dicts(), inside.tolist()) if ok]
    p2p = np.zeros(len(ts))
    p2p[np.flatnonzero(inside)] = p2p_waits(from_dicts(in_window))  # a receive spinning for its peer: waiting, not transfer
    p2p_exposed = _uncovered_length(cols, inside, ts + p2p) if p2p.any() else 0.0
    steps = s["steps"]
    return rank_row(r.rank, len(s["window"]["steps"]), steps["window_us"], s["overlap"], steps["step_ms"],
                    int(inside.sum()), sum(waits) if waits else None, exposed, p2p_exposed)


def _uncovered_length(cols: dict, inside: np.ndarray, until: np.ndarray) -> float:
    """The part of [start, until) of each collective in the window that no compute covers (from the summary's
    uncovered stretches of each collective kernel)."""
    starts, ends = [], []
    for i in np.flatnonzero(inside).tolist():
        gaps = np.asarray(cols["uncovered"][i], dtype=np.float64).reshape(-1, 2)
        starts.append(gaps[:, 0])
        ends.append(np.minimum(gaps[:, 1], until[i]))
    if not starts:
        return 0.0
    a, b = np.concatenate(starts), np.concatenate(ends)
    return length(a[b > a], b[b > a])
