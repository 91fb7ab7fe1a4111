"""The collectives of a trace as columns: one numpy array per field, strings as ids into a small table.

Built from the communication kernels and the trace's collective records (analysis/multigpu/collectives.py says
what each field means) with array passes; a report that lists a few collectives turns just those into dicts.
Missing numbers are NaN (ids: -1); a float sum over a column adds in the collectives' order, as a loop over
them would, so the figures do not depend on which form computed them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perflab.analysis.multigpu.collective_sizes import (
    bus_factor,
    collective_kind,
    dtype_bytes,
    kernel_collective_kind,
)

_TEXT = ("kind", "pg", "dtype", "args_from")
_ALL_DICT_KEYS = ("row", "name", "kind", "stream", "ts", "dur_us", "group_size", "pg", "bytes", "dtype", "args_from",
                  "step", "algbw_gbps", "busbw_gbps")


@dataclass
class CollectiveTable:
    row: np.ndarray          # int64, the kernel's row in the trace
    name: np.ndarray         # ids into `names`
    names: list
    kind: np.ndarray         # ids into `strings` ("other" when unknown); pg, dtype, args_from: -1 for None
    pg: np.ndarray
    dtype: np.ndarray
    args_from: np.ndarray
    strings: list
    stream: np.ndarray
    ts: np.ndarray
    dur_us: np.ndarray
    group_size: np.ndarray   # int64
    bytes: np.ndarray        # NaN: not known
    step: np.ndarray         # int64, meaningful where in_step
    in_step: np.ndarray
    algbw_gbps: np.ndarray
    busbw_gbps: np.ndarray
    transfer_us: np.ndarray  # NaN until matched across ranks
    wait_us: np.ndarray
    transfer_algbw_gbps: np.ndarray | None = None   # set by transfer_bandwidths
    transfer_busbw_gbps: np.ndarray | None = None
    source: list | None = None  # the dicts it was read from (a rank summary's), which then list the examples

    def __len__(self) -> int:
        return len(self.ts)

    def is_kind(self, kind: str) -> np.ndarray:
        return self.kind == (self.strings.index(kind) if kind in self.strings else -2)

    def kind_names(self) -> list:
        return [self.strings[k] for k in self.kind.tolist()]

    def factors(self) -> np.ndarray:
        """The bus-bandwidth factor of each collective (NaN: none for its kind)."""
        return factor_column(self.kind, self.strings, self.group_size)

    def dicts(self, idx=None) -> list[dict]:
        """collectives()'s dicts of the rows `idx` (all by default)."""
        idx = np.arange(len(self)) if idx is None else np.asarray(idx, dtype=np.int64)
        if self.source is not None:
            return [self.source[i] for i in idx.tolist()]
        texts = {f: [None if v < 0 else self.strings[v] for v in getattr(self, f)[idx].tolist()] for f in _TEXT}
        cols = {"row": self.row[idx].tolist(), "name": [self.names[v] for v in self.name[idx].tolist()], **texts,
                "stream": self.stream[idx].tolist(), "ts": self.ts[idx].tolist(), "dur_us": self.dur_us[idx].tolist(),
                "group_size": self.group_size[idx].tolist(), "bytes": _none(self.bytes[idx]),
                "step": [s if ok else None for s, ok in zip(self.step[idx].tolist(), self.in_step[idx].tolist())],
                "algbw_gbps": _none(self.algbw_gbps[idx]), "busbw_gbps": _none(self.busbw_gbps[idx])}
        out = [dict(zip(_ALL_DICT_KEYS, values)) for values in zip(*(cols[k] for k in _ALL_DICT_KEYS))]
        for i, c in zip(idx.tolist(), out):
            if self.transfer_us[i] == self.transfer_us[i]:
                c["transfer_us"], c["wait_us"] = float(self.transfer_us[i]), float(self.wait_us[i])
        if self.transfer_algbw_gbps is not None:
            for c, a, b in zip(out, _none(self.transfer_algbw_gbps[idx]), _none(self.transfer_busbw_gbps[idx])):
                c["transfer_algbw_gbps"], c["transfer_busbw_gbps"] = a, b
        return out


def _none(a: np.ndarray) -> list:
    return [None if v != v else v for v in a.tolist()]


def factor_column(kind: np.ndarray, strings: list, group_size: np.ndarray) -> np.ndarray:
    out = np.full(kind.size, np.nan)
    if kind.size == 0:
        return out
    group, first = group_ids(kind, group_size)
    values = [bus_factor(strings[k], n) for k, n in zip(kind[first].tolist(), group_size[first].tolist())]
    values = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return values[group]


def group_ids(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group id of each row of the columns (NaN equal to NaN), the first row of each group in id order)."""
    code = np.zeros(columns[0].size, dtype=np.int64)
    for c in columns:
        values, inverse = np.unique(np.where(c == c, c, -np.inf), return_inverse=True)
        _, first, code = np.unique(code * values.size + inverse.reshape(-1), return_index=True, return_inverse=True)
        code = code.reshape(-1)  # renumbered after each column: the codes stay below the row count
    _, first, group = np.unique(code, return_index=True, return_inverse=True)
    return group.reshape(-1), first


def bandwidths(nbytes: np.ndarray, t: np.ndarray, factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(algbw, busbw) in GB/s of each collective from its bytes and time (NaN where either is missing or 0)."""
    ok = (nbytes == nbytes) & (t == t) & (t != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        alg = np.where(ok, nbytes / (t * 1e3), np.nan)  # bytes/ns = GB/s
    return alg, alg * factor


def in_order_sum(values: np.ndarray) -> float:
    """0.0 + v0 + v1 + ...: the sum a loop over the values makes, in their order."""
    return float(np.add.accumulate(np.concatenate([[0.0], values]))[-1])


def text_ids(values: list, strings: list) -> np.ndarray:
    """Ids into `strings` (extended) of each value, -1 for None."""
    index = {s: i for i, s in enumerate(strings)}
    out = []
    for v in values:
        if v is None:
            out.append(-1)
        else:
            if v not in index:
                index[v] = len(strings)
                strings.append(v)
            out.append(index[v])
    return np.array(out, dtype=np.int64)


def from_dicts(colls: list[dict]) -> CollectiveTable:
    """The table of collectives()'s dicts (a rank summary's): their dicts stay the examples reports list."""
    strings: list = []
    names: list = []

    def num(f):
        return np.array([np.nan if c.get(f) is None else c[f] for c in colls], dtype=np.float64)
    steps = [c["step"] for c in colls]
    table = CollectiveTable(
        row=np.array([c["row"] for c in colls], dtype=np.int64), name=text_ids([c["name"] for c in colls], names),
        names=names, kind=text_ids([c["kind"] for c in colls], strings), pg=text_ids([c["pg"] for c in colls], strings),
        dtype=text_ids([c["dtype"] for c in colls], strings), args_from=text_ids([c["args_from"] for c in colls], strings),
        strings=strings, stream=np.array([c["stream"] for c in colls], dtype=np.int64), ts=num("ts"),
        dur_us=num("dur_us"), group_size=np.array([c["group_size"] for c in colls], dtype=np.int64), bytes=num("bytes"),
        step=np.array([s if s is not None else -1 for s in steps], dtype=np.int64),
        in_step=np.array([s is not None for s in steps], dtype=bool), algbw_gbps=num("algbw_gbps"),
        busbw_gbps=num("busbw_gbps"), transfer_us=num("transfer_us"), wait_us=num("wait_us"), source=colls)
    return table


def kinds_of_names(names: list, ids: np.ndarray, strings: list, kernel: bool) -> np.ndarray:
    """Per id, the collective kind (an id into `strings`, -1 None) of names[id] (kernel or recorded names)."""
    uniq, inverse = np.unique(ids, return_inverse=True)
    find = kernel_collective_kind if kernel else collective_kind
    kinds = text_ids([find(names[u]) if u >= 0 else None for u in uniq.tolist()], strings)
    return kinds[inverse.reshape(-1)] if ids.size else np.zeros(0, dtype=np.int64)


def message_bytes_column(kind: np.ndarray, strings: list, in_n: np.ndarray, out_n: np.ndarray,
                         dtype: np.ndarray, dtype_names: list, n: np.ndarray) -> np.ndarray:
    """collective_sizes.message_bytes of each collective (in_n, out_n: NaN for None; dtype: ids, -1 None)."""
    sizes = np.array([np.nan if (b := dtype_bytes(d)) is None else b for d in dtype_names] + [np.nan], dtype=np.float64)
    size = sizes[dtype]  # -1: the NaN at the end
    gather = kind == (strings.index("all_gather") if "all_gather" in strings else -2)
    scatter = kind == (strings.index("reduce_scatter") if "reduce_scatter" in strings else -2)
    has_in, has_out = in_n == in_n, out_n == out_n
    i0, o0 = np.where(has_in, in_n, 0.0), np.where(has_out, out_n, 0.0)
    total = np.maximum(i0, o0)
    whole = gather & (i0 != 0) & ((o0 == 0) | (o0 == i0)) & (n != 0)
    total = np.where(whole, i0 * n, total)
    nelems = np.where(gather | scatter, np.where(total != 0, total, np.nan), np.where(has_in, in_n, out_n))
    return np.where((size == size) & (kind >= 0), nelems * size, np.nan)
