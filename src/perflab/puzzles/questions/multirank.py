"""Multi-GPU analyses (catalog 70-73): answers from the per-rank traces of a recording and its sweep.

Per-rank and collective numbers come from analysis.multigpu.collectives.multirank_summary over every rank
of `<variant>.ranks/` (the doctor's `analyses.multigpu`); the batch sweep at 1 and N ranks from
`sweep.json` (puzzles/evidence/multirank.py). Registered into questions.ANALYSES on import, like every
analysis.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis

COLLECTIVE_FIELDS = ("bytes", "algbw_gbps", "busbw_gbps", "per_step", "time_us", "count")
RANK_FIELDS = ("step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "wait_ms", "exposed_wait_ms",
               "exposed_transfer_ms", "comm_overlap_pct", "collectives_per_step")
SWEEP_FIELDS = ("batch", "latency_ms", "forward_ms", "throughput")


def _source(variant: str) -> str:
    return f"the recorded per-rank traces of {variant} (analysis.multigpu.collectives over every rank)"


def multirank(ev: Any, variant: str = "slow") -> dict[str, Any]:
    """multirank_summary over every rank of the variant's recording (cached on the evidence)."""
    cache = ev.__dict__.setdefault("_multirank", {})
    if variant not in cache:
        from perflab.analysis.multigpu.collectives import multirank_summary

        traces = ev.ranks(variant)
        if len(traces) < 2:
            raise PerflabError(f"the recorded {variant} trace has one rank; this question needs a multi-GPU recording")
        cache[variant] = multirank_summary(traces)
    return cache[variant]


def _rank(summary: dict[str, Any], rank: int) -> dict[str, Any]:
    ranks = [r["rank"] for r in summary["per_rank"]]
    if rank < 0:  # -1: the last rank
        rank = ranks[rank]
    for r in summary["per_rank"]:
        if r["rank"] == rank:
            return r
    raise PerflabError(f"no rank {rank} in the recording (ranks: {', '.join(map(str, ranks))})")


@analysis
def rank_doctor_top_id(ev: Any, variant: str = "slow", rank: int = -1) -> Computed:
    """The doctor's top finding on one rank's trace (every rank loaded; rank -1: the last rank)."""
    ranks = [t.rank for t in ev.ranks(variant)]
    rank = ranks[rank] if rank < 0 else rank
    if rank not in ranks:
        raise PerflabError(f"no rank {rank} in the recording (ranks: {', '.join(map(str, ranks))})")
    report = ev.report(variant, rank=rank)
    if not report.findings:
        raise PerflabError(f"the doctor found nothing on rank {rank} of the recorded {variant} trace")
    top = report.findings[0]
    evidence: dict[str, Any] = {"rank": rank, "top finding": top.id, "severity": top.severity,
                                "estimated gain %": round(float(top.gain_pct), 1)}
    evidence.update({k: v for k, v in top.evidence.items() if isinstance(v, (int, float, str))})
    return Computed(top.id, evidence, f"perflab doctor --rank {rank} on {_source(variant)}")


@analysis
def straggler_rank(ev: Any, variant: str = "slow") -> Computed:
    """The rank that arrives last at the collectives most often (the others wait for it)."""
    s = multirank(ev, variant)
    if s["straggler"] is None:
        raise PerflabError(f"no rank waits for another in the recorded {variant} traces")
    return Computed(s["straggler"], {"straggler": s["straggler"],
                                     "last to arrive (collectives)": s["last_to_arrive_counts"],
                                     "wait ms per step": {r: round(w, 3) for r, w in s["wait_ms_per_step"].items()}},
                    _source(variant))


@analysis
def rank_metric(ev: Any, field: str, variant: str = "slow", rank: int | None = None) -> Computed:
    """A per-rank number (ms per step unless a %), of `rank`, or the largest over ranks when rank is None."""
    if field not in RANK_FIELDS:
        raise PerflabError(f"rank field {field!r} must be one of {', '.join(RANK_FIELDS)}")
    s = multirank(ev, variant)
    values = {r["rank"]: r[field] for r in s["per_rank"] if r.get(field) is not None}
    if not values:
        raise PerflabError(f"no rank has {field} in the recorded {variant} traces")
    if rank is None:
        rank = max(values, key=values.get)
    row = _rank(s, rank)
    if row.get(field) is None:
        raise PerflabError(f"rank {row['rank']} has no {field} in the recorded {variant} traces")
    return Computed(float(row[field]), {"rank": row["rank"], field: round(float(row[field]), 4),
                                        "every rank": {r: round(float(v), 4) for r, v in values.items()},
                                        "steps": row["steps"]}, _source(variant))


def _kinds(ev: Any, variant: str) -> dict[str, dict[str, Any]]:
    kinds = multirank(ev, variant)["collectives"]["by_kind"]
    if not kinds:
        raise PerflabError(f"no collectives in the recorded {variant} traces")
    return kinds


@analysis
def dominant_collective(ev: Any, variant: str = "slow") -> Computed:
    """The collective type with the most transfer time (all_reduce, all_gather, reduce_scatter, ...)."""
    kinds = _kinds(ev, variant)
    top = max(kinds, key=lambda k: kinds[k]["time_us"])
    return Computed(top, {k: f"{d['count']} calls, {d['time_us']:.0f} µs" for k, d in kinds.items()},
                    _source(variant), alternatives=tuple(k for k in kinds if k != top))


@analysis
def collective_metric(ev: Any, field: str, variant: str = "slow", kind: str = "") -> Computed:
    """A number of one collective type on rank 0 (default: the dominant type): bytes (per call), algbw_gbps,
    busbw_gbps (nccl-tests formulas, from the transfer time: the last rank's kernel), per_step (calls),
    time_us (transfer µs per call), count."""
    if field not in COLLECTIVE_FIELDS:
        raise PerflabError(f"collective field {field!r} must be one of {', '.join(COLLECTIVE_FIELDS)}")
    kinds = _kinds(ev, variant)
    kind = kind or max(kinds, key=lambda k: kinds[k]["time_us"])
    if kind not in kinds:
        raise PerflabError(f"no {kind} in the recorded {variant} traces (types: {', '.join(kinds)})")
    d = kinds[kind]
    steps = max(_rank(multirank(ev, variant), 0)["steps"], 1)
    values = {"bytes": d["bytes"] / d["sized"] if d["sized"] else None, "algbw_gbps": d["algbw_gbps"],
              "busbw_gbps": d["busbw_gbps"], "per_step": d["count"] / steps,
              "time_us": d["time_us"] / d["count"] if d["count"] else None, "count": d["count"]}
    if values[field] is None:
        raise PerflabError(f"the recorded {variant} traces do not give the {field} of {kind} (no sizes recorded)")
    evidence = {"collective": kind, "group size": d["group_size"], "calls": d["count"], "steps": steps,
                **{k: round(float(v), 3) for k, v in values.items() if v is not None}}
    return Computed(float(values[field]), evidence, _source(variant))


# -- the batch sweep at 1 and N ranks (sweep.json) --------------------------------------------------------
def _sweep(ev: Any) -> dict[str, Any]:
    return ev.require_json("sweep.json", "gpus", "multi-GPU batch sweep")


def _sweep_points(doc: dict[str, Any], gpus: int) -> list[dict[str, Any]]:
    counts = sorted(int(k) for k in doc["gpus"])
    gpus = counts[-1] if gpus < 1 else gpus
    if str(gpus) not in doc["gpus"]:
        raise PerflabError(f"the sweep has no {gpus}-GPU points (GPU counts: {', '.join(map(str, counts))})")
    return doc["gpus"][str(gpus)]


@analysis
def rank_sweep_point(ev: Any, batch: int = 1, gpus: int = 0, field: str = "latency_ms") -> Computed:
    """A field of the sweep at one batch size and GPU count (gpus 0: the largest count)."""
    from perflab.toolkit import batch_sweep

    if field not in SWEEP_FIELDS:
        raise PerflabError(f"sweep field {field!r} must be one of {', '.join(SWEEP_FIELDS)}")
    p = batch_sweep.point(_sweep_points(_sweep(ev), gpus), int(batch))
    return Computed(p[field], {k: round(v, 4) if isinstance(v, float) else v for k, v in p.items()},
                    "the recorded batch sweep at 1 and N GPUs (sweep.json)")


@analysis
def rank_sweep_knee(ev: Any, gpus: int = 0, field: str = "batch") -> Computed:
    """The knee of one GPU count's curve: the smallest batch reaching knee_fraction of its best throughput."""
    from perflab.toolkit import batch_sweep

    if field not in SWEEP_FIELDS:
        raise PerflabError(f"sweep field {field!r} must be one of {', '.join(SWEEP_FIELDS)}")
    doc = _sweep(ev)
    pts = _sweep_points(doc, gpus)
    frac = float(doc.get("knee_fraction", batch_sweep.KNEE_FRACTION))
    k = batch_sweep.knee(pts, frac)
    best = max(pts, key=lambda p: p["throughput"])
    return Computed(k[field], {"knee batch": k["batch"], "knee throughput /s": round(k["throughput"]),
                               "knee latency ms": round(k["latency_ms"], 4), "best throughput /s": round(best["throughput"]),
                               "best at batch": best["batch"], "knee rule": f"first batch >= {frac:.0%} of best"},
                    "the recorded batch sweep at 1 and N GPUs (sweep.json)")


@analysis
def rank_sweep_speedup(ev: Any, batch: int = 1, field: str = "latency_ms") -> Computed:
    """How many times faster the largest GPU count runs one call of `batch` than 1 GPU (1-GPU / N-GPU time)."""
    from perflab.puzzles.evidence.multirank import sweep_speedup
    from perflab.toolkit import batch_sweep

    if field not in ("latency_ms", "forward_ms"):
        raise PerflabError("the sweep speed-up compares latency_ms or forward_ms")
    doc = _sweep(ev)
    counts = sorted(int(k) for k in doc["gpus"])
    if len(counts) < 2:
        raise PerflabError("the sweep has one GPU count: nothing to compare")
    value = sweep_speedup(doc, int(batch), counts[-1], field)
    one = batch_sweep.point(doc["gpus"][str(counts[0])], int(batch))
    many = batch_sweep.point(doc["gpus"][str(counts[-1])], int(batch))
    return Computed(value, {"batch": batch, f"{counts[0]} GPU {field}": round(one[field], 4),
                            f"{counts[-1]} GPUs {field}": round(many[field], 4), "speed-up": round(value, 3),
                            "ideal": counts[-1] / counts[0]},
                    "the recorded batch sweep at 1 and N GPUs (sweep.json)")
