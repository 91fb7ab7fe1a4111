"""Names for the rows of an Nsight Systems export, and what NVTX ranges stand for.

Each table's rows carry a code (a StringIds id, or a copy/memset/sync kind); `resolve` turns the
codes into the trace's name table, written as Kineto writes them (runtime calls without CUPTI's
`_v7000` suffix, copies as "Memcpy HtoD (Pageable -> Device)"), so every analysis reads both formats.

NVTX ranges become user annotations. Ranges that PyTorch emits for its operators (emit_nvtx:
"aten::mm, seq = 12, ...") become CPU ops named like Kineto's ("aten::mm"). Steps: the ranges whose
name matches the step pattern (`step_pattern`) are renamed ProfilerStep#N, which every analysis reads
as a step; the default (`auto`) takes ProfilerStep#N, else ranges named like "step 3"/"iteration 3"/
"batch 3" (the first of these families present), else none: the GPU span is then analysed as one window.
"""
from __future__ import annotations

import re
import sqlite3

import numpy as np

from perflab.errors import PerflabError
from perflab.trace.model import CPU_OP, STEP_RE, USER_ANNOTATION
from perflab.trace.nsight_systems.nsys_db import Schema, clean, strings
from perflab.trace.nsight_systems.nsys_tables import CAT, api_name, copy_name, memset_name, sync_name

# PyTorch's operator namespaces; any other "a::b" range is a user's own (nvFuser's "GpuLower::Lower", ...)
_OP_NAME = re.compile(r"^(?:aten|prim|c10d|_c10d_functional|quantized|torchvision|inductor|cuda|profiler)::\w")
_OP_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids|stream)\s*=.*$", re.S)
AUTO = "auto"
STEP_FAMILIES = (
    ("ProfilerStep#N", re.compile(r"ProfilerStep\s*#\s*(\d+)")),
    ("step N", re.compile(r"(?i)(?:train[_ ]?|eval[_ ]?)?step[\s_#:=-]*(\d+)")),
    ("iteration N", re.compile(r"(?i)iter(?:ation)?[\s_#:=-]*(\d+)")),
    ("batch N", re.compile(r"(?i)batch[\s_#:=-]*(\d+)")),
)


class NameTable:
    def __init__(self) -> None:
        self.table: list[str] = []
        self.index: dict[str, int] = {}

    def intern(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.table)
            self.table.append(name)
        return i


def _op_name(text: str) -> str | None:
    """The operator of a PyTorch emit_nvtx range ("aten::addmm, seq = 3, ..." -> "aten::addmm"), else None."""
    base = _OP_SUFFIX.sub("", text).strip()
    return base if _OP_NAME.match(base) or (base != text.strip() and "::" in base) else None


def resolve(conn: sqlite3.Connection, schema: Schema, parts: dict[str, list[dict]], nvtx_texts: dict[str, int],
            names: NameTable) -> None:
    """Replace each part's `code` with `name` (int32 ids into `names`); NVTX operator ranges become CPU ops."""
    def codes(source: str) -> np.ndarray:
        got = [np.unique(p["code"]) for p in parts.get(source, [])]
        return np.unique(np.concatenate(got)) if got else np.zeros(0, np.int64)

    by_source = {s: codes(s) for s in parts}
    sid = np.concatenate([by_source.get(s, np.zeros(0, np.int64)) for s in ("kernel", "api", "osrt", "nvtx")])
    text = strings(conn, schema, sid)
    inline = [clean(t) for t in sorted(nvtx_texts, key=nvtx_texts.__getitem__)]

    def kernel(c: int) -> str:
        return text.get(c, f"<kernel name id {c}>")

    def nvtx(c: int) -> str:
        if c >= 0:
            return text.get(c, f"<NVTX string id {c}>")
        return inline[-2 - c] if c <= -2 else "<unnamed NVTX range>"

    naming = {"kernel": kernel, "api": lambda c: api_name(text.get(c, f"<API name id {c}>")),
              "osrt": lambda c: text.get(c, f"<OS call name id {c}>"), "memcpy": copy_name, "memset": memset_name,
              "nvtx": nvtx, "graph": lambda c: f"Graph Exec {c}"}
    for source, u in by_source.items():
        if source == "sync":
            continue
        raw = [naming[source](int(c)) for c in u.tolist()]
        is_op = np.zeros(len(raw), dtype=bool)
        if source == "nvtx":
            ops = [_op_name(r) for r in raw]
            is_op = np.array([o is not None for o in ops], dtype=bool)
            raw = [o if o is not None else r for o, r in zip(ops, raw)]
        ids = np.fromiter((names.intern(r) for r in raw), np.int32, len(raw))
        for p in parts[source]:
            at = np.searchsorted(u, p.pop("code"))
            p["name"] = ids[at]
            if is_op.any():
                op = is_op[at]
                p["kind"] = np.where(op, CPU_OP, p["kind"]).astype(np.int8)
                p["cat"] = np.where(op, CAT["cpu_op"], p["cat"]).astype(np.int16)
    _sync_names(parts, names)


def _sync_names(parts: dict[str, list[dict]], names: NameTable) -> None:
    """A synchronization record is named for the API call that waited (its correlation id): the syncType
    numbers changed meaning between nsys versions (2021-2022: 1 context, 2 event, 3 stream; 2024 on: 1 event,
    2 stream, 4 context), whatever ENUM_CUPTI_SYNC_TYPE says."""
    api = parts.get("api", [])
    corr = api[0]["correlation"] if api else np.zeros(0, np.int64)
    order = np.argsort(corr, kind="stable")
    corr, api_name_ids = corr[order], (api[0]["name"][order] if api else np.zeros(0, np.int32))
    table: dict[int, int] = {}
    for p in parts.get("sync", []):
        code = p.pop("code")
        at = np.clip(np.searchsorted(corr, p["correlation"]), 0, max(corr.size - 1, 0))
        found = (corr.size > 0) & (p["correlation"] >= 0)
        found = found & (corr[at] == p["correlation"]) if corr.size else np.zeros(code.size, dtype=bool)
        key = np.where(found, api_name_ids[at] if corr.size else -1, -2 - code)
        out = np.empty(code.size, np.int32)
        for k in np.unique(key).tolist():
            if k not in table:
                table[k] = names.intern(sync_name(names.table[k]) if k >= 0 else f"Sync (type {-2 - k})")
            out[key == k] = table[k]
        p["name"] = out


def mark_steps(name: np.ndarray, kind: np.ndarray, ts: np.ndarray, names: NameTable,
               pattern: str | None) -> dict:
    """Rename the NVTX ranges that are steps to ProfilerStep#N (in place). Returns what was done."""
    if pattern is None or pattern.lower() == "none":
        return {"pattern": None, "ranges": 0}
    rows = np.flatnonzero(kind == USER_ANNOTATION)
    if rows.size == 0:
        return {"pattern": pattern, "ranges": 0}
    present = np.unique(name[rows])
    if pattern == AUTO:
        for label, rx in STEP_FAMILIES:
            hits = {int(i): rx.fullmatch(names.table[i].strip()) for i in present.tolist()}
            hits = {i: m for i, m in hits.items() if m}
            if not hits:
                continue
            if label == "ProfilerStep#N":  # already the name every analysis reads
                return {"pattern": label, "ranges": int(np.isin(name[rows], list(hits)).sum())}
            if np.isin(name[rows], list(hits)).sum() >= 2:
                return _rename(name, rows, ts, names, hits, label)
        return {"pattern": None, "ranges": 0}
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise PerflabError(f"--nvtx-steps {pattern!r} is not a regular expression ({exc})") from None
    hits = {int(i): rx.fullmatch(names.table[i].strip()) for i in present.tolist()}
    hits = {i: m for i, m in hits.items() if m}
    if not hits:
        return {"pattern": pattern, "ranges": 0}
    return _rename(name, rows, ts, names, hits, pattern)


def _rename(name: np.ndarray, rows: np.ndarray, ts: np.ndarray, names: NameTable, hits: dict, label: str) -> dict:
    chosen = rows[np.isin(name[rows], list(hits))]
    chosen = chosen[np.argsort(ts[chosen], kind="stable")]
    numbered = all(m.lastindex for m in hits.values())
    originals = {}
    for k, r in enumerate(chosen.tolist()):
        m = hits[int(name[r])]
        n = int(m.group(1)) if numbered and m.group(1).isdigit() else k + 1
        step = f"ProfilerStep#{n}"
        originals.setdefault(step, names.table[int(name[r])])
        name[r] = names.intern(step)
    return {"pattern": label, "ranges": int(chosen.size), "original_names": originals}


def is_step_name(text: str) -> bool:
    return STEP_RE.fullmatch(text.strip()) is not None
