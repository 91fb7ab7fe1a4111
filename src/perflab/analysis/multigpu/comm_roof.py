"""Communication against its speed of light: each collective and P2P transfer judged like a kernel.

Its work is the bytes it moves (from the trace's collective args, analysis/multigpu/collectives.py); its rate the
bus bandwidth (nccl-tests' convention: busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter and all_to_all, 1 for broadcast, reduce and send/recv), which makes every kind comparable
with the link. The ceiling for a kind and size is the busbw `perflab bench --collectives` (or
`--allreduce`) measured on that GPU model at that size: a small message is latency-bound, and the curve at
its size, not the peak, is what it can reach. With no measured curve, the datasheet's link rate (labelled)
judges only messages long enough at that rate that NCCL's per-call latency cannot weigh.

The time judged is the transfer, not the wait: across ranks, the last-arriving rank's kernel (the others'
kernels also wait for it: load-imbalance); on one rank, the fastest of the calls of the same kind and size
(a wait varies from call to call, the transfer does not).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from perflab.analysis.multigpu.collective_sizes import bus_factor

DATASHEET_MIN_US = 100.0  # below this at the datasheet rate, per-call latency (µs to tens of µs) may dominate
BELOW = 0.5               # a size group runs below half its roof
LATENCY_BOUND = 0.25      # a message whose roof is under a quarter of the curve's peak is latency-bound
MANY_PER_STEP = 8         # that many latency-bound messages of one kind per step: bucketing would pay


@dataclass
class CommRoof:
    """The interconnect's busbw ceiling per collective kind and size."""

    curves: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # kind -> (bytes, busbw GB/s)
    labels: dict[str, str] = field(default_factory=dict)                             # kind -> where it came from
    link_gbps: float | None = None
    link_label: str = ""

    @property
    def source(self) -> str:
        parts = [f"{k}: {v}" for k, v in self.labels.items()]
        if self.link_gbps:
            parts.append(f"other kinds and sizes: {self.link_label}")
        return "; ".join(parts) or "none: no measured sweep for this GPU and no datasheet link rate"

    def _curve(self, kind: str) -> tuple[str, tuple[np.ndarray, np.ndarray]] | tuple[None, None]:
        if kind in self.curves:
            return kind, self.curves[kind]
        if "all_reduce" in self.curves:  # busbw is the link's rate whatever the kind: the nearest measured proxy
            return "all_reduce", self.curves["all_reduce"]
        return None, None

    def busbw_at(self, kind: str, nbytes: float, factor: float) -> tuple[float | None, str]:
        """(the roof's busbw in GB/s, its label) for one message; (None, why) when nothing fair can judge it."""
        used, curve = self._curve(kind)
        if curve is not None:
            size, bw = curve
            label = self.labels[used] + ("" if used == kind else f" (the {used} curve: no {kind} sweep)")
            if nbytes <= size[0]:  # below the sweep: the same per-call time as its smallest message
                return float(bw[0] * nbytes / size[0]), label
            return float(np.interp(np.log2(nbytes), np.log2(size), bw)), label
        if self.link_gbps:
            if nbytes * factor / (self.link_gbps * 1e3) >= DATASHEET_MIN_US:
                return self.link_gbps, self.link_label
            return None, f"not judged: under {DATASHEET_MIN_US:.0f} µs at the datasheet rate (latency-bound; measure it)"
        return None, "not judged: no measured sweep and no datasheet link rate for this GPU"

    def peak(self, kind: str) -> float | None:
        _, curve = self._curve(kind)
        return float(curve[1].max()) if curve is not None else self.link_gbps


def comm_roof(device: str | None, world_size: int | None, sweeps: list[dict], sheet: dict | None) -> CommRoof:
    """The roof for a job of `world_size` ranks on `device`: per kind, the saved sweep of the same GPU model
    with the nearest rank count (the latest of those); the datasheet's link rate beside them."""
    from perflab.analysis.work.ceilings import same_gpu

    roof = CommRoof()
    mine = [s for s in sweeps if same_gpu(s["gpu"], device or "")]
    for kind in sorted({s["kind"] for s in mine}):
        of_kind = [s for s in mine if s["kind"] == kind]
        best = min(of_kind, key=lambda s: (abs(s["world_size"] - (world_size or s["world_size"])),
                                          _neg_date(s["date"])))
        size = np.array([r[0] for r in best["rows"]])
        bw = np.array([r[1] for r in best["rows"]])
        roof.curves[kind] = (size, bw)
        roof.labels[kind] = (f"measured {kind} sweep on {best['world_size']} x {best['gpu']} {best['date']} "
                             f"({best['path'] or 'perflab bench'})")
    if sheet and sheet.get("link"):
        roof.link_gbps = float(sheet["link"]) / 1e9
        roof.link_label = (f"datasheet {sheet['name']} link {roof.link_gbps:.0f} GB/s per direction "
                           f"({sheet.get('link_name', '')})")
    return roof


def _neg_date(date: str) -> tuple:
    return tuple(-ord(c) for c in date)


def transfer_times(colls: list[dict]) -> None:
    """Sets `judged_us` on each collective: its transfer time across ranks when matched (the last-arriving
    rank's kernel), else the fastest call of the same kind, size and group on this rank."""
    fastest: dict[tuple, float] = {}
    for c in colls:
        key = (c["kind"], c["bytes"], c["group_size"], c.get("pg"))
        fastest[key] = min(fastest.get(key, float("inf")), c["dur_us"])
    for c in colls:
        if c.get("transfer_us") is not None:
            c["judged_us"], c["judged_by"] = c["transfer_us"], "last-arriving rank"
        else:
            c["judged_us"] = fastest[(c["kind"], c["bytes"], c["group_size"], c.get("pg"))]
            c["judged_by"] = "fastest call of its size on this rank"


def judge(colls: list[dict], roof: CommRoof) -> dict:
    """Every sized collective against its roof, grouped by kind and size.

    Each collective needs `judged_us` (transfer_times) and `exposed_frac` (the share of its transfer no
    compute hides). A group is below its roof when its time at the roof is under BELOW of its time; the gap
    is the time the link lost. Separately: many latency-bound messages of one kind per step, whose bytes in
    one message would take far less time at the curve (bucketing)."""
    groups: dict[tuple, dict] = {}
    unjudged: dict[str, int] = defaultdict(int)
    per_step: dict[tuple, list[dict]] = defaultdict(list)
    for c in colls:
        factor = bus_factor(c["kind"], c["group_size"])
        if not c.get("bytes") or factor is None or factor <= 0 or not c.get("judged_us"):
            unjudged["unsized" if not c.get("bytes") else "no bus factor"] += 1
            continue
        roof_bw, label = roof.busbw_at(c["kind"], c["bytes"], factor)
        if roof_bw is None or roof_bw <= 0:
            unjudged[label] += 1
            continue
        at_roof = c["bytes"] * factor / (roof_bw * 1e3)
        g = groups.setdefault((c["kind"], c["bytes"], c["group_size"]), {
            "kind": c["kind"], "bytes": c["bytes"], "group_size": c["group_size"], "count": 0, "time_us": 0.0,
            "at_roof_us": 0.0, "exposed_gap_us": 0.0, "roof_busbw_gbps": roof_bw, "roof": label,
            "judged_by": c["judged_by"]})
        g["count"] += 1
        g["time_us"] += c["judged_us"]
        g["at_roof_us"] += at_roof
        g["exposed_gap_us"] += max(c["judged_us"] - at_roof, 0.0) * c.get("exposed_frac", 1.0)
        per_step[(c["kind"], c["group_size"], c.get("pg"), c.get("step"))].append(c | {"roof_bw": roof_bw})
    rows = []
    for g in groups.values():
        bus_bytes = g["bytes"] * bus_factor(g["kind"], g["group_size"]) * g["count"]
        g["busbw_gbps"] = bus_bytes / (g["time_us"] * 1e3) if g["time_us"] > 0 else None
        g["pct_of_roof"] = 100.0 * g["at_roof_us"] / g["time_us"] if g["time_us"] > 0 else None
        g["below"] = g["pct_of_roof"] is not None and g["pct_of_roof"] < 100.0 * BELOW
        rows.append(g)
    rows.sort(key=lambda g: -g["exposed_gap_us"])
    return {"groups": rows, "unjudged": dict(unjudged), "small_messages": _small_messages(per_step, roof)}


def _small_messages(per_step: dict[tuple, list[dict]], roof: CommRoof) -> dict | None:
    """Many latency-bound messages of one kind in a step: their time vs one message of their bytes."""
    best = None
    by_kind: dict[str, dict] = {}
    for (kind, n, _pg, step), colls in per_step.items():
        peak = roof.peak(kind)
        small = [c for c in colls if peak and c["roof_bw"] < LATENCY_BOUND * peak]
        if step is None or len(small) < MANY_PER_STEP:
            continue
        factor = bus_factor(kind, n)
        total = sum(c["bytes"] for c in small)
        bucket_bw, label = roof.busbw_at(kind, total, factor)
        if not bucket_bw:
            continue
        bucketed = total * factor / (bucket_bw * 1e3)
        time = sum(c["judged_us"] for c in small)
        exposed = sum(c["judged_us"] * c.get("exposed_frac", 1.0) for c in small)
        d = by_kind.setdefault(kind, {"kind": kind, "steps": 0, "messages": 0, "bytes": 0.0, "time_us": 0.0,
                                      "bucketed_us": 0.0, "exposed_gap_us": 0.0, "roof": label})
        d["steps"] += 1
        d["messages"] += len(small)
        d["bytes"] += total
        d["time_us"] += time
        d["bucketed_us"] += bucketed
        d["exposed_gap_us"] += max(exposed - bucketed * (exposed / time if time else 0.0), 0.0)
    for d in by_kind.values():
        d["messages_per_step"] = d["messages"] / max(d["steps"], 1)
        d["mean_bytes"] = d["bytes"] / max(d["messages"], 1)
        if d["time_us"] > 0 and d["bucketed_us"] < BELOW * d["time_us"] and (
                best is None or d["exposed_gap_us"] > best["exposed_gap_us"]):
            best = d
    return best


def exposed_fractions(colls: list[dict], compute: tuple[np.ndarray, np.ndarray]) -> None:
    """Sets `exposed_frac` on each collective: the share of its transfer (the end of its kernel, after any
    wait) during which no compute kernel runs."""
    from perflab.analysis.idle.intervals import merge

    s, e = merge(*compute)
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def covered(t: np.ndarray) -> np.ndarray:  # compute time before t
        i = np.searchsorted(s, t, side="right")
        prev_end = np.where(i > 0, e[np.maximum(i - 1, 0)], -np.inf)
        inside = np.where(i > 0, np.minimum(t, prev_end) - s[np.maximum(i - 1, 0)], 0.0)
        return cum[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(inside, 0.0)

    if not colls:
        return
    end = np.array([c["ts"] + c["dur_us"] for c in colls])
    judged = np.array([c.get("judged_us") or c["dur_us"] for c in colls])
    start = end - judged
    hidden = covered(end) - covered(start) if s.size else np.zeros(len(colls))
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(judged > 0, np.clip(1.0 - hidden / judged, 0.0, 1.0), 1.0)
    for c, f in zip(colls, frac.tolist()):
        c["exposed_frac"] = f
