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

from dataclasses import dataclass, field

import numpy as np

from perflab.analysis.multigpu.collective_sizes import bus_factor
from perflab.analysis.multigpu.collective_table import group_ids, in_order_sum

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


def transfer_times(table, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(judged_us, whether across ranks) of the collectives idx of a collective_table: their transfer time across
    ranks when matched (the last-arriving rank's kernel), else the fastest call of the same kind, size, group and
    process group on this rank."""
    dur, transfer = table.dur_us[idx], table.transfer_us[idx]
    if idx.size == 0:
        return dur, np.zeros(0, dtype=bool)
    group, _ = group_ids(table.kind[idx], table.bytes[idx], table.group_size[idx], table.pg[idx])
    fastest = np.full(idx.size, np.inf)
    np.minimum.at(fastest, group, dur)
    matched = transfer == transfer
    return np.where(matched, transfer, fastest[group]), matched


_BY = ("fastest call of its size on this rank", "last-arriving rank")


def judge(table, idx: np.ndarray, judged: np.ndarray, across: np.ndarray, frac: np.ndarray, roof: CommRoof) -> dict:
    """The collectives idx of a collective_table against their roof, grouped by kind and size.

    judged, across: transfer_times; frac: the share of each transfer no compute hides (exposed_fractions). A group
    is below its roof when its time at the roof is under BELOW of its time; the gap is the time the link lost.
    Separately: many latency-bound messages of one kind per step, whose bytes in one message would take far less
    time at the curve (bucketing)."""
    kind, nbytes, n = table.kind[idx], table.bytes[idx], table.group_size[idx]
    group, first = group_ids(kind, nbytes, n) if idx.size else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    labels: list = ["unsized", "no bus factor"]
    g_bw, g_label, g_factor, g_roof = [], [], [], []
    for f in first.tolist():
        k, b = table.strings[kind[f]], float(nbytes[f])
        factor = bus_factor(k, int(n[f]))
        bw, label = roof.busbw_at(k, b, factor) if b == b and b and factor is not None and factor > 0 else (None, "")
        g_bw.append(bw if bw is not None and bw > 0 else np.nan)
        g_factor.append(np.nan if factor is None else factor)
        g_label.append(labels.index(label) if label in labels else (labels.append(label) or len(labels) - 1))
        g_roof.append(label)
    g_bw, g_factor, g_label = (np.array(x, dtype=t) for x, t in ((g_bw, float), (g_factor, float), (g_label, int)))
    factor, roof_bw = g_factor[group], g_bw[group]
    sized = (nbytes == nbytes) & (nbytes != 0)
    reason = np.where(~sized, 0, np.where(~(factor > 0) | (judged == 0), 1, np.where(roof_bw == roof_bw, -1, g_label[group])))
    unjudged: dict[str, int] = {}
    for code in _first_order(reason[reason >= 0]):
        unjudged[labels[code]] = int((reason == code).sum())
    ok = np.flatnonzero(reason < 0)
    at_roof = nbytes * factor / (roof_bw * 1e3)
    gap = np.maximum(judged - at_roof, 0.0) * frac
    rows = []
    for g in _first_order(group[ok]):
        mine = ok[group[ok] == g]
        f = mine[0]
        time_us = in_order_sum(judged[mine])
        at = in_order_sum(at_roof[mine])
        bus_bytes = float(nbytes[f]) * bus_factor(table.strings[kind[f]], int(n[f])) * mine.size
        pct = 100.0 * at / time_us if time_us > 0 else None
        rows.append({"kind": table.strings[kind[f]], "bytes": float(nbytes[f]), "group_size": int(n[f]),
                     "count": int(mine.size), "time_us": time_us, "at_roof_us": at,
                     "exposed_gap_us": in_order_sum(gap[mine]), "roof_busbw_gbps": float(roof_bw[f]),
                     "roof": g_roof[group[f]],
                     "judged_by": _BY[int(across[f])],
                     "busbw_gbps": bus_bytes / (time_us * 1e3) if time_us > 0 else None, "pct_of_roof": pct,
                     "below": pct is not None and pct < 100.0 * BELOW})
    rows.sort(key=lambda g: -g["exposed_gap_us"])
    step = np.where(table.in_step[idx], table.step[idx], np.iinfo(np.int64).min)
    per_step = {}
    if ok.size:
        key, _ = group_ids(kind[ok], n[ok], table.pg[idx][ok], step[ok])
        for g in _first_order(key):
            mine = ok[key == g]
            f = mine[0]
            per_step[(table.strings[kind[f]], int(n[f]), int(table.pg[idx][f]),
                      int(step[f]) if table.in_step[idx][f] else None)] = mine
    cols = {"bytes": nbytes, "judged_us": judged, "exposed": judged * frac, "roof_bw": roof_bw}
    return {"groups": rows, "unjudged": unjudged, "small_messages": _small_messages(per_step, cols, roof)}


def _first_order(codes: np.ndarray) -> list:
    """The distinct values of codes in the order they first come."""
    values, first = np.unique(codes, return_index=True)
    return values[np.argsort(first)].tolist()


def _small_messages(per_step: dict[tuple, np.ndarray], cols: dict, roof: CommRoof) -> dict | None:
    """Many latency-bound messages of one kind in a step: their time vs one message of their bytes."""
    best = None
    by_kind: dict[str, dict] = {}
    for (kind, n, _pg, step), mine in per_step.items():
        peak = roof.peak(kind)
        small = mine[cols["roof_bw"][mine] < LATENCY_BOUND * peak] if peak else mine[:0]
        if step is None or len(small) < MANY_PER_STEP:
            continue
        factor = bus_factor(kind, n)
        total = sum(cols["bytes"][small].tolist())
        bucket_bw, label = roof.busbw_at(kind, total, factor)
        if not bucket_bw:
            continue
        bucketed = total * factor / (bucket_bw * 1e3)
        time = sum(cols["judged_us"][small].tolist())
        exposed = sum(cols["exposed"][small].tolist())
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


def exposed_fractions(table, idx: np.ndarray, judged: np.ndarray, compute: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The share of the transfer (judged, the end of its kernel, after any wait) of each collective idx of a
    collective_table during which no compute kernel runs."""
    from perflab.analysis.idle.intervals import merge

    s, e = merge(*compute)
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def covered(t: np.ndarray) -> np.ndarray:  # compute time before t
        i = np.searchsorted(s, t, side="right")
        prev_end = np.where(i > 0, e[np.maximum(i - 1, 0)], -np.inf)
        inside = np.where(i > 0, np.minimum(t, prev_end) - s[np.maximum(i - 1, 0)], 0.0)
        return cum[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(inside, 0.0)

    if idx.size == 0:
        return np.zeros(0)
    end = table.ts[idx] + table.dur_us[idx]
    judged = np.where(judged != 0, judged, table.dur_us[idx])
    start = end - judged
    hidden = covered(end) - covered(start) if s.size else np.zeros(idx.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(judged > 0, np.clip(1.0 - hidden / judged, 0.0, 1.0), 1.0)
