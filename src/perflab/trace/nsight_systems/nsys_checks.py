"""What the Nsight Systems reader cannot use, counted per table, as the Kineto reader counts what it drops.

A table whose columns are not the ones the reader needs (no `start`, no kernel name) is unusable as a whole;
a row whose start or end is not a number (text where a time belongs), or that ends before it starts, is
dropped; a row with text where another number belongs (a stream, a device, a name id) is kept with that value
missing, and counted. No verdict may rest on zeroed values: when a table of GPU work loses most of its rows,
or the export most of its rows, the export is refused, naming the table and why.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

REFUSE_SHARE = 0.5
GPU_WORK_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                   "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
TIME_REASONS = {1: "start is not a number", 2: "end is not a number", 3: "ends before it starts"}
_NUMBER = "('integer', 'real')"


def time_check(start: str = "start", end: str = "end") -> str:
    """SQL: 0 for a row with usable times, else its TIME_REASONS code."""
    return (f'CASE WHEN typeof("{start}") NOT IN {_NUMBER} THEN 1 WHEN typeof("{end}") NOT IN {_NUMBER} THEN 2 '
            f'WHEN "{end}" < "{start}" THEN 3 ELSE 0 END')


def type_check(columns: list[str]) -> str:
    """SQL: how many of the (numeric) columns hold text or a blob in this row."""
    if not columns:
        return "0"
    return " + ".join(f"""(typeof("{c}") IN ('text', 'blob'))""" for c in columns)


class Accounts:
    """Per table: rows seen, rows dropped by reason, rows kept with a value of the wrong type."""

    def __init__(self) -> None:
        self.rows: Counter = Counter()
        self.dropped: dict[str, Counter] = {}
        self.wrong_type: Counter = Counter()

    def unusable(self, table: str, rows: int, why: str) -> None:
        """The whole table: `rows` rows the reader cannot read at all."""
        self.rows[table] += rows
        self.dropped.setdefault(table, Counter())[why] += rows

    def block(self, table: str, why: np.ndarray, wrong: np.ndarray) -> np.ndarray:
        """Count one block's rows; returns the mask of those kept."""
        keep = why == 0
        self.rows[table] += why.size
        if not keep.all():
            codes, n = np.unique(why[~keep], return_counts=True)
            reasons = self.dropped.setdefault(table, Counter())
            for code, k in zip(codes.tolist(), n.tolist()):
                reasons[TIME_REASONS.get(code, "unusable")] += k
        self.wrong_type[table] += int(np.count_nonzero(wrong[keep]))
        return keep

    def summary(self) -> dict[str, dict[str, Any]]:
        """{table: {rows, dropped, reasons, wrong_type_rows}} for the tables with something to say."""
        out = {}
        for table in sorted(set(self.dropped) | {t for t, n in self.wrong_type.items() if n}):
            reasons = dict(self.dropped.get(table, {}))
            out[table] = {"rows": int(self.rows[table]), "dropped": int(sum(reasons.values())), "reasons": reasons,
                          "wrong_type_rows": int(self.wrong_type[table])}
        return out


def refusal(summary: dict[str, dict[str, Any]], total_rows: int) -> str | None:
    """The one-line reason to refuse the export, else None."""
    for table in GPU_WORK_TABLES:
        info = summary.get(table)
        if info and info["rows"] and info["dropped"] > REFUSE_SHARE * info["rows"]:
            return f"table {table} cannot be read: {_what(info)}; not analysed (re-export it with nsys export --type sqlite)"
    dropped = sum(i["dropped"] for i in summary.values())
    if total_rows and dropped > REFUSE_SHARE * total_rows:
        worst = max(summary, key=lambda t: summary[t]["dropped"])
        return (f"{dropped:,} of its {total_rows:,} rows cannot be used (table {worst}: {_what(summary[worst])}); "
                "not analysed")
    return None


def notes(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One line per table the reader could not use whole."""
    out = []
    for table, info in summary.items():
        if info["dropped"]:
            out.append(f"table {table}: {_what(info)}; the analysis leaves them out")
        if info["wrong_type_rows"]:
            n = info["wrong_type_rows"]
            out.append(f"table {table}: {n:,} {'rows hold' if n != 1 else 'row holds'} text where a number belongs "
                       "(a stream, device or name id): read as missing")
    return out


def _what(info: dict[str, Any]) -> str:
    whole = [reason for reason in info["reasons"] if reason.startswith("no column")]
    if whole:
        return f"{whole[0]}, so none of its {info['rows']:,} rows can be read"
    why = ", ".join(f"{n:,} {reason}" for reason, n in info["reasons"].items())
    return f"{info['dropped']:,} of its {info['rows']:,} rows dropped ({why})"
