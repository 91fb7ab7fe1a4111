"""Kernel-level diff: two Nsight Compute reports of the same kernel(s) under two configurations.

`compare_ncu(before, after)` is a pure function of two loaded profiles (trace/ncu.py) and the doctor's
reports on them (doctor/ncu.py); it returns an `NcuDiff`: kernels matched across the reports (by name and
launch order; a single kernel left on each side is paired even if its name changed, e.g. another cuBLAS
tile), and per matched pair the key metrics before and after (duration, grid, waves per SM, occupancy,
DRAM / SM / memory throughput, L1 / L2 hit rates, registers, shared memory, ...) sorted by relative change,
plus the doctor's findings on that kernel that appeared or disappeared. `perflab diff A.ncu-rep B.ncu-rep`
renders it (report/diff.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from perflab.analysis.reports.compare import Delta, FindingChange, finding_changes
from perflab.errors import PerflabError
from perflab.trace.ncu import KernelProfile, NcuProfile

SCHEMA = "perflab.ncu-diff/1"

# (key, label, unit, lower_is_better, scale, metric names: the first the report has wins)
KEY_METRICS: tuple[tuple[str, str, str, bool, float, tuple[str, ...]], ...] = (
    ("duration_us", "duration", "µs", True, 1e6, ("gpu__time_duration.sum",)),
    ("grid_size", "grid size (blocks)", "", False, 1.0, ("launch__grid_size",)),
    ("block_size", "block size (threads)", "", False, 1.0, ("launch__block_size",)),
    ("waves_per_sm", "waves per SM", "", False, 1.0, ("launch__waves_per_multiprocessor",)),
    ("registers", "registers / thread", "", True, 1.0, ("launch__registers_per_thread",)),
    ("shared_mem_kb", "shared memory / block", "KiB", True, 1 / 1024, ("launch__shared_mem_per_block",)),
    ("theoretical_occupancy_pct", "theoretical occupancy", "%", False, 1.0,
     ("sm__maximum_warps_per_active_cycle_pct",)),
    ("achieved_occupancy_pct", "achieved occupancy", "%", False, 1.0,
     ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
    ("sm_throughput_pct", "SM throughput", "%", False, 1.0, ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
    ("memory_throughput_pct", "memory throughput", "%", False, 1.0,
     ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)),
    ("dram_throughput_pct", "DRAM throughput", "%", False, 1.0,
     ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed")),
    ("dram_read_mb", "DRAM bytes read", "MB", True, 1e-6, ("dram__bytes_read.sum",)),
    ("l2_hit_pct", "L2 hit rate", "%", False, 1.0, ("lts__t_sector_hit_rate.pct",)),
    ("l1_hit_pct", "L1 hit rate", "%", False, 1.0, ("l1tex__t_sector_hit_rate.pct",)),
    ("tensor_pipe_pct", "tensor pipe active", "%", False, 1.0,
     ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",)),
    ("instructions_m", "warp instructions executed", "M", True, 1e-6, ("smsp__inst_executed.sum",)),
)
LABELS = {k: label for k, label, *_ in KEY_METRICS}


@dataclass
class KernelPair:
    before_name: str
    after_name: str
    before_index: int                 # the launch's index in its report
    after_index: int
    paired_by: str                    # "name" | "position" (one kernel left on each side, names differ)
    metrics: list[Delta]              # sorted by relative change, largest first
    findings: list[FindingChange]
    readings: list[str] = field(default_factory=list)   # what the moved metrics mean together (readings())

    @property
    def name(self) -> str:
        return self.before_name if self.before_name == self.after_name else f"{self.before_name} -> {self.after_name}"

    def metric(self, key: str) -> Delta | None:
        return next((m for m in self.metrics if m.name == key), None)

    @property
    def speedup(self) -> float | None:
        d = self.metric("duration_us")
        return d.before / d.after if d and d.after else None

    def by_status(self, status: str) -> list[str]:
        return [f.id for f in self.findings if f.status == status]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "before_name": self.before_name, "after_name": self.after_name,
                "before_index": self.before_index, "after_index": self.after_index, "paired_by": self.paired_by,
                "speedup": self.speedup,
                "metrics": [{**m.to_dict(), "label": LABELS.get(m.name, m.name), "rel_change": rel_change(m)}
                            for m in self.metrics],
                "findings": [asdict(f) for f in self.findings], "readings": list(self.readings)}


@dataclass
class NcuDiff:
    before_label: str
    after_label: str
    before_device: str | None
    after_device: str | None
    pairs: list[KernelPair]
    only_before: list[str]            # kernels of the before report with no match
    only_after: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if not self.pairs:
            return "No kernel of one report matches a kernel of the other."
        parts = []
        for p in self.pairs[:3]:
            d = p.metric("duration_us")
            head = f"{p.name}: "
            if d is None:
                head += "no duration in one of the reports"
            else:
                sp = p.speedup
                word = (f"{sp:.2f}x faster" if sp and sp >= 1.02 else f"{1 / sp:.2f}x slower" if sp and sp <= 1 / 1.02
                        else "unchanged within 2 %")
                head += f"{word} ({d.before:.4g} -> {d.after:.4g} µs)"
            moved = [m for m in p.metrics if m.name != "duration_us" and rel_change(m) >= 0.1][:3]
            if moved:
                head += "; most moved: " + ", ".join(f"{LABELS.get(m.name, m.name)} {_num(m.before)} -> {_num(m.after)}"
                                                     for m in moved)
            gone, new = p.by_status("disappeared"), p.by_status("appeared")
            if gone:
                head += f"; gone: {', '.join(gone)}"
            if new:
                head += f"; new: {', '.join(new)}"
            parts.append(head + ".")
        if len(self.pairs) > 3:
            parts.append(f"(+{len(self.pairs) - 3} more matched kernels)")
        return " ".join(parts)

    def pair(self, name: str) -> KernelPair:
        for p in self.pairs:
            if name in (p.before_name, p.after_name, p.name):
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "verdict": self.verdict,
                "before": {"label": self.before_label, "device": self.before_device},
                "after": {"label": self.after_label, "device": self.after_device},
                "kernels": [p.to_dict() for p in self.pairs], "only_before": list(self.only_before),
                "only_after": list(self.only_after), "notes": list(self.notes)}


def _num(v: float) -> str:
    return f"{v:.4g}"


def rel_change(d: Delta) -> float:
    """How far a metric moved, symmetric in before/after: |log(after / before)| (inf from or to zero)."""
    if d.before == d.after:
        return 0.0
    if d.before <= 0 or d.after <= 0:
        return math.inf
    return abs(math.log(d.after / d.before))


def key_metrics(k: KernelProfile) -> dict[str, float]:
    out = {}
    for key, _label, _unit, _lower, scale, names in KEY_METRICS:
        v = k.first(*names)
        if key == "shared_mem_kb" and v is None and k.shared_mem_bytes is not None:
            v = float(k.shared_mem_bytes)
        if v is not None:
            out[key] = v * scale
    return out


def _metric_deltas(a: KernelProfile, b: KernelProfile) -> list[Delta]:
    ma, mb = key_metrics(a), key_metrics(b)
    spec = {key: (unit, lower) for key, _l, unit, lower, _s, _n in KEY_METRICS}
    deltas = [Delta(key, ma[key], mb[key], spec[key][0], lower_is_better=spec[key][1])
              for key in spec if key in ma and key in mb]
    order = list(spec)
    return sorted(deltas, key=lambda d: (-rel_change(d), order.index(d.name)))


def readings(metrics: list[Delta]) -> list[str]:
    """Plain statements that follow from the numbers alone (no guess about the code): where the time went."""
    m = {d.name: d for d in metrics}
    out = []
    dur, grid, waves = m.get("duration_us"), m.get("grid_size"), m.get("waves_per_sm")
    if waves and min(waves.before, waves.after) < 1 <= max(waves.before, waves.after) or \
            waves and waves.before < 1 and waves.after > waves.before * 1.5:
        low = "before" if waves.before < waves.after else "after"
        w = waves.before if low == "before" else waves.after
        g = (grid.before if low == "before" else grid.after) if grid else None
        out.append(f"{low}: {f'{g:.0f} blocks, ' if g is not None else ''}{w:.2f} waves per SM: less than one "
                   "full wave, so part of the SMs have no block for the whole launch (tail / too small a grid)")
    regs, theo = m.get("registers"), m.get("theoretical_occupancy_pct")
    if regs and theo and regs.change and theo.change and (regs.change < 0) == (theo.change > 0):
        out.append(f"registers per thread {regs.before:.0f} -> {regs.after:.0f} move the theoretical occupancy "
                   f"{theo.before:.1f} -> {theo.after:.1f} %")
    dram, thr = m.get("dram_read_mb"), m.get("dram_throughput_pct")
    if dur and dram and dram.before and abs(dram.change) / dram.before < 0.05 and dur.after and \
            rel_change(dur) >= math.log(1.1):
        faster = dur.before > dur.after
        out.append(f"the same DRAM bytes ({dram.after:.4g} MB) in {max(dur.ratio or 1, 1 / (dur.ratio or 1)):.2f}x "
                   f"{'less' if faster else 'more'} time" + (f": DRAM throughput {thr.before:.1f} -> {thr.after:.1f} % "
                                                             "of peak" if thr else ""))
    elif dram and dram.before and rel_change(dram) >= math.log(1.1):
        out.append(f"DRAM bytes read {dram.before:.4g} -> {dram.after:.4g} MB: the traffic itself changed")
    inst = m.get("instructions_m")
    if inst and rel_change(inst) >= math.log(1.1):
        out.append(f"warp instructions {inst.before:.4g} -> {inst.after:.4g} M: the amount of work changed")
    l2 = m.get("l2_hit_pct")
    if l2 and abs(l2.change) >= 10:
        out.append(f"L2 hit rate {l2.before:.1f} -> {l2.after:.1f} %: {'more' if l2.change > 0 else 'less'} "
                   "of the traffic served from L2")
    return out


def _kernel_findings(report: Any, index: int, name: str) -> dict[str, Any]:
    """The doctor's findings on one launch: ids from its per-kernel list, details from the ranked findings."""
    kernels = (report.analyses or {}).get("kernels") or []
    ids = kernels[index]["findings"] if index < len(kernels) else []
    out = {}
    for f in report.findings:
        if f.id in ids and f.evidence.get("kernel", name) == name and f.id not in out:
            out[f.id] = f
    return out


def _select(profile: NcuProfile, pattern: re.Pattern | None) -> list[KernelProfile]:
    return [k for k in profile.kernels if pattern is None or pattern.search(k.name) or pattern.search(k.full_name)]


def match(before: list[KernelProfile], after: list[KernelProfile]) -> tuple[list[tuple[KernelProfile, KernelProfile, str]],
                                                                           list[KernelProfile], list[KernelProfile]]:
    """Pairs by name, in launch order (the i-th launch of a name with the i-th); then, if exactly one kernel
    is left on each side, those two (the same kernel renamed by its configuration, e.g. a cuBLAS tile)."""
    pairs = []
    left_after = list(after)
    left_before = []
    for k in before:
        j = next((i for i, o in enumerate(left_after) if o.name == k.name), None)
        if j is None:
            left_before.append(k)
        else:
            pairs.append((k, left_after.pop(j), "name"))
    if len(left_before) == 1 and len(left_after) == 1:
        pairs.append((left_before.pop(), left_after.pop(), "position"))
    return pairs, left_before, left_after


def compare_ncu(before: NcuProfile, after: NcuProfile, before_report: Any, after_report: Any, *,
                kernel: str = "", before_label: str = "", after_label: str = "") -> NcuDiff:
    """The kernel-level diff of two Nsight Compute profiles (with the doctor's reports on them)."""
    pattern = None
    if kernel:
        try:
            pattern = re.compile(kernel)
        except re.error as exc:
            raise PerflabError(f"--kernel {kernel!r}: not a regular expression ({exc})") from None
    kb, ka = _select(before, pattern), _select(after, pattern)
    for side, ks, prof in (("before", kb, before), ("after", ka, after)):
        if not ks:
            names = ", ".join(sorted({k.name for k in prof.kernels}))[:200]
            raise PerflabError(f"{prof.path}: no kernel matches --kernel {kernel!r} (its kernels: {names})")
    matched, only_b, only_a = match(kb, ka)
    pairs = []
    for b, a, how in matched:
        fb = _kernel_findings(before_report, b.index, b.name)
        fa = _kernel_findings(after_report, a.index, a.name)
        deltas = _metric_deltas(b, a)
        pairs.append(KernelPair(before_name=b.name, after_name=a.name, before_index=b.index, after_index=a.index,
                                paired_by=how, metrics=deltas, findings=finding_changes(fb, fa),
                                readings=readings(deltas)))
    # the biggest movers first: the pair whose duration changed most leads
    pairs.sort(key=lambda p: -rel_change(p.metric("duration_us")) if p.metric("duration_us") else 0.0)
    notes = []
    if before.device and after.device and before.device != after.device:
        notes.append(f"different GPUs: {before.device} vs {after.device}")
    for p in pairs:
        if p.paired_by == "position":
            notes.append(f"paired by position (names differ): {p.before_name} / {p.after_name}")
    for label, report in ((before_label or before.path, before_report), (after_label or after.path, after_report)):
        notes += [f"{label}: {n}" for n in (getattr(report, "source", None) or {}).get("notes") or []]
    return NcuDiff(before_label=before_label or before.path, after_label=after_label or after.path,
                   before_device=before.device, after_device=after.device, pairs=pairs,
                   only_before=[k.name for k in only_b], only_after=[k.name for k in only_a], notes=notes)
