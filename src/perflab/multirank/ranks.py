"""A rank as the merge sees it: its summary, in the shape the folder accounting and the multi-GPU rules read.

`RankView` stands where a Trace stood: kineto_folder.choose_job reads its `rank`, `meta`, `ts`/`end`; the
rules of doctor/rules/multigpu.py read its collectives through `cached("collectives")` (set by the merge, with
each collective's transfer and wait) and its multi-rank summary through `cached("multirank:...")`.
`SummaryContext` is the doctor Context of the report's rank built from its summary. A rule that asks for an
analysis the summary does not carry fails with the name of what to add (summary.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from perflab.analysis.steps.windows import Windows
from perflab.doctor.context import Context
from perflab.doctor.finding import EventRef
from perflab.errors import PerflabError
from perflab.multirank.summary import NUMBER_FIELDS, TEXT_FIELDS


# analyses a job rule computes from what the summaries hold (doctor/rules/interconnect.py: the report rank's
# collectives, their transfer times across ranks and the compute that covers them)
COMPUTED_FROM_SUMMARY = frozenset({"comm_roof"})


class NotInSummary(PerflabError):
    """A job rule read something of a rank that its summary does not carry."""


@dataclass
class RankView:
    summary: dict
    cache: dict = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return int(self.summary["meta"]["rank"])

    @cached_property
    def meta(self) -> dict:
        return {**self.summary["meta"]}

    @property
    def ts(self) -> np.ndarray:
        return np.array([self.summary["meta"]["ts_min"]])

    @property
    def end(self) -> np.ndarray:
        return np.array([self.summary["meta"]["end_max"]])

    @property
    def columns(self) -> dict:
        return self.summary["collectives"]

    def __len__(self) -> int:
        return len(self.columns["ts"])

    def collective_dicts(self) -> list[dict]:
        """analysis.multigpu.collectives.collectives' dicts, from the columns."""
        cols, strings = self.columns, self.columns["strings"]
        out = []
        for i in range(len(cols["ts"])):
            c = {f: cols[f][i] for f in NUMBER_FIELDS}
            c.update({f: (None if cols[f][i] is None else strings[cols[f][i]]) for f in TEXT_FIELDS})
            out.append(c)
        return out

    def cached(self, key: str, compute=None):
        if key in self.cache:
            return self.cache[key]
        name = key.split(":")[0]
        if name == "multirank" and "multirank" in self.cache:
            return self.cache["multirank"]
        if name in self.summary.get("extensions", {}):
            return self.summary["extensions"][name]
        if name in COMPUTED_FROM_SUMMARY and compute is not None:
            return self.cache.setdefault(key, compute())
        raise NotInSummary(f"the multi-rank merge has no '{key.split(':')[0]}' for rank {self.rank}: a job rule "
                           "that needs it must have it added to the rank summary (perflab/multirank/summary.py)")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotInSummary(f"the multi-rank merge has no '{name}' of rank {self.summary['meta']['rank']}'s trace, only "
                           "its summary: a job rule that needs it must have it added there (perflab/multirank/summary.py)")

    def name_of(self, row: int) -> str:
        return self._by_row(row)["name"]

    def _by_row(self, row: int) -> dict:
        rows = self.cache.setdefault("by_row", {c["row"]: c for c in self.cache.get("collectives", [])})
        if row not in rows:
            raise NotInSummary(f"the summary of rank {self.rank} holds only its collectives' events (row {row})")
        return rows[row]


def windows_of(summary: dict) -> Windows:
    w = summary["window"]
    return Windows(np.asarray(w["start"], dtype=np.float64), np.asarray(w["end"], dtype=np.float64), w["kind"],
                   tuple(w["steps"]), w["found_by"],
                   np.asarray(w["opened"], dtype=np.float64) if "opened" in w else None,
                   np.asarray(w["closed"], dtype=np.float64) if "closed" in w else None)


class SummaryContext(Context):
    """doctor.context.Context of one rank, from its summary: what the multi-GPU rules read."""

    def __init__(self, view: RankView, ranks: list[RankView]) -> None:
        super().__init__(view, windows_of(view.summary), ranks)  # type: ignore[arg-type]

    @cached_property
    def overlap(self) -> dict:
        return self.trace.summary["overlap"]

    @cached_property
    def busy(self) -> dict:
        return self.trace.summary["busy"]

    @cached_property
    def launches(self) -> dict:
        """The host's launch calls per window; a summary written before it was kept has none (0: no bound)."""
        return self.trace.summary.get("launches") or {"cpu_launch_us": 0.0}

    @cached_property
    def summary(self) -> dict:
        return {"step_time_ms": self.step_ms}

    @cached_property
    def step_ms(self) -> float:
        return self.trace.summary["steps"]["step_time_ms"]

    def rank_windows(self, trace) -> Windows:
        return windows_of(trace.summary)  # every summary of the job was made for the same step

    @cached_property
    def compute_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """The compute inside the rank's collectives in the windows (the complement of their uncovered
        stretches): all the summary knows of it, and all a job rule may ask, how much compute covers a part of
        a collective in the windows."""
        cols = self.trace.columns
        starts, ends = [], []
        for i in np.flatnonzero(np.asarray(cols["in_window"], dtype=bool)).tolist():
            lo, hi = cols["ts"][i], cols["ts"][i] + cols["dur_us"][i]
            gaps = np.asarray(cols["uncovered"][i], dtype=np.float64).reshape(-1, 2)
            starts.append(np.concatenate([[lo], gaps[:, 1]]))
            ends.append(np.concatenate([gaps[:, 0], [hi]]))
        if not starts:
            return np.zeros(0), np.zeros(0)
        s, e = np.concatenate(starts), np.concatenate(ends)
        keep = e > s
        return s[keep], e[keep]

    def event(self, row: int) -> EventRef:
        c = self.trace._by_row(row)
        return EventRef(c["name"], float(c["ts"] - self.trace.meta["origin"]), float(c["dur_us"]))
