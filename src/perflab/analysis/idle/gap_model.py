"""The result of the idle-gap analysis (analysis/idle/gaps.py): GPU idle time by host cause."""
from __future__ import annotations

from dataclasses import dataclass, field

CAUSES = ("sync", "copy", "input", "launch", "host", "queued", "other", "alloc", "wait")
SYNC, COPY, INPUT, LAUNCH, HOST, QUEUED, OTHER, ALLOC, WAIT = range(9)


@dataclass
class GapAnalysis:
    device: int
    window_us: float
    busy_us: float
    idle_us: float
    by_cause: dict[str, float]
    gap_count: dict[str, int]
    copy_idle: dict[str, float] = field(default_factory=dict)  # copy idle by direction, plus "pageable"
    sync: dict = field(default_factory=dict)
    examples: dict[str, list[dict]] = field(default_factory=dict)
    behind: dict = field(default_factory=dict)   # idle after the host had launched the next work >= 1 ms ahead
    # per cause, the whole length of the gaps that cause ends (a sync's share of the gap included): what goes
    # when the cause goes, where the host's work after a drain is the gap
    whole_gap: dict[str, float] = field(default_factory=dict)

    def pct(self, cause: str) -> float:
        return 100.0 * self.by_cause.get(cause, 0.0) / self.window_us if self.window_us else 0.0

    def to_dict(self) -> dict:
        return {"device": self.device, "window_us": self.window_us, "busy_us": self.busy_us,
                "idle_us": self.idle_us,
                "idle_pct": 100.0 * self.idle_us / self.window_us if self.window_us else 0.0,
                "by_cause_us": self.by_cause, "by_cause_pct": {c: self.pct(c) for c in CAUSES},
                "gap_count": self.gap_count, "copy_idle_us": self.copy_idle, "sync": self.sync}


def merge_parts(parts: list[GapAnalysis], per_cause: int = 5) -> GapAnalysis:
    """One analysis from analyses of consecutive slices of the windows (a large trace analysed in pieces):
    times and counts add up, the examples keep the largest of each kind."""
    first = parts[0]
    out = GapAnalysis(first.device, 0.0, 0.0, 0.0, {c: 0.0 for c in CAUSES}, {c: 0 for c in CAUSES})
    examples: dict[str, list[dict]] = {}
    for p in parts:
        out.window_us += p.window_us
        out.busy_us += p.busy_us
        out.idle_us += p.idle_us
        for c in CAUSES:
            out.by_cause[c] += p.by_cause.get(c, 0.0)
            out.gap_count[c] += p.gap_count.get(c, 0)
        for k, v in p.copy_idle.items():
            out.copy_idle[k] = out.copy_idle.get(k, 0.0) + v
        for k, v in p.whole_gap.items():
            out.whole_gap[k] = out.whole_gap.get(k, 0.0) + v
        for k, v in p.behind.items():
            out.behind[k] = max(out.behind.get(k, 0.0), v) if k.endswith("_ms") else out.behind.get(k, 0.0) + v
        for k, v in p.sync.items():
            out.sync[k] = out.sync.get(k, 0) + v
        for k, events in p.examples.items():
            examples.setdefault(k, []).extend(events)
    for k, events in examples.items():
        key = "overlap_us" if k == "host_ops" else ("gpu_idle_after_us" if k == "sync" else "dur_us")
        if k == "host_ops":  # one entry per op: the time summed, the longest call as the example
            by_name: dict[str, dict] = {}
            for e in events:
                best = by_name.get(e["name"])
                if best is None:
                    by_name[e["name"]] = dict(e)
                else:
                    best["overlap_us"] += e["overlap_us"]
                    if e["dur_us"] > best["dur_us"]:
                        best.update(ts_us=e["ts_us"], dur_us=e["dur_us"])
            events = list(by_name.values())
        out.examples[k] = sorted(events, key=lambda e: -e.get(key, 0.0))[:per_cause]
    return out
