"""The columnar trace model every reader produces and every analysis consumes.

One row per complete ("X") event, in file order. Strings (names, categories) are stored once in
tables and referenced by integer ids; every other column is a numpy array of the same length.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# Event kinds, derived from the Kineto category.
CPU_OP, USER_ANNOTATION, PYTHON, RUNTIME, KERNEL, MEMCPY, MEMSET, GPU_ANNOTATION, SYNC, OTHER = range(10)
KIND_NAMES = ("cpu_op", "user_annotation", "python_function", "runtime", "kernel", "memcpy", "memset",
              "gpu_user_annotation", "cuda_sync", "other")
GPU_WORK_KINDS = (KERNEL, MEMCPY, MEMSET)
HOST_KINDS = (CPU_OP, USER_ANNOTATION, PYTHON, RUNTIME)

# Kineto's category spellings from 2020 to today, compared case-insensitively: torch 1.8's traces say
# "Operator", "Runtime", "Kernel", "Memcpy", "Memset"; later ones "cpu_op", "cuda_runtime", "kernel",
# "gpu_memcpy"...; ROCm, XPU and other backends name their runtime after themselves.
_KIND_BY_CAT = {
    "cpu_op": CPU_OP, "operator": CPU_OP,
    "user_annotation": USER_ANNOTATION, "python_function": PYTHON, "python": PYTHON,
    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "runtime": RUNTIME, "hip_runtime": RUNTIME,
    "hip_driver": RUNTIME, "xpu_runtime": RUNTIME, "xpu_driver": RUNTIME, "mtia_runtime": RUNTIME,
    "privateuse1_runtime": RUNTIME, "privateuse1_driver": RUNTIME,
    "kernel": KERNEL, "concurrent_kernel": KERNEL, "mtia_ccp_events": KERNEL,
    "gpu_memcpy": MEMCPY, "memcpy": MEMCPY,
    "gpu_memset": MEMSET, "memset": MEMSET,
    "gpu_user_annotation": GPU_ANNOTATION, "cuda_sync": SYNC,
}


def kind_of_category(cat: str) -> int:
    return _KIND_BY_CAT.get(cat.strip().lower(), OTHER) if isinstance(cat, str) else OTHER


# Top-level key of a Kineto trace that `perflab profile` / `investigate` write: the command that ran (a list).
PROGRAM_KEY = "perflab_program"

STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")

# The longest name an analysis reads whole. Real kernel names reach ~5 KB (templated CUTLASS/cuDNN); a longer one
# is held once, in full, in Trace.full_names, and the name table holds its first NAME_SHOWN characters and a
# digest of the whole, so every analysis (a regular expression per distinct name, a table, a diff by name) costs
# what it does for a name of ordinary length, a report that names it stays the size of one that names an ordinary
# op, and two distinct long names stay distinct.
NAME_LIMIT = 16384
NAME_SHOWN = 1024


def bounded_names(names: list[str]) -> tuple[list[str], dict[int, str]]:
    """The name table with names over NAME_LIMIT characters shortened, and those names in full by id."""
    full = {i: n for i, n in enumerate(names) if len(n) > NAME_LIMIT}
    if not full:
        return names, full
    table = list(names)
    for i, n in full.items():
        digest = hashlib.blake2b(n.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        table[i] = f"{n[:NAME_SHOWN]}… [{len(n)} characters, {digest}]"
    return table, full


@dataclass
class Trace:
    """One rank's trace. Times are in microseconds as written in the file (not rebased)."""

    names: list[str]
    cats: list[str]
    cat: np.ndarray          # int16, index into cats
    kind: np.ndarray         # int8, one of the kinds above
    name: np.ndarray         # int32, index into names
    ts: np.ndarray           # float64 µs
    dur: np.ndarray          # float64 µs (NaN where absent)
    tid: np.ndarray          # int64 thread (GPU events: the stream; string ids get negative ids)
    stream: np.ndarray       # int64, -1 where absent or not an integer (HTA's convention)
    device: np.ndarray       # int64, -1 where absent (read on GPU work only)
    correlation: np.ndarray  # int64, -1 where absent; links a runtime call to the GPU op it launched
    external_id: np.ndarray  # int64, -1 where absent (read on CPU ops and GPU work)
    nbytes: np.ndarray       # float64, NaN where absent (memcpy/memset "bytes")
    grid: np.ndarray         # int64, product of the grid dims, -1 where absent
    block: np.ndarray        # int64, product of the block dims, -1 where absent
    shape: np.ndarray        # int32, index into shapes ("Input Dims" JSON of CPU ops), -1 where absent
    dtype: np.ndarray        # int32, index into dtypes ("Input type" JSON of CPU ops), -1 where absent
    shapes: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    concrete: np.ndarray | None = None  # int32, index into concretes ("Concrete Inputs" JSON: scalar args), -1 absent
    concretes: list[str] = field(default_factory=list)
    flows: dict[str, np.ndarray] = field(default_factory=dict)  # ac2g flow events: id, ts, phase
    # optional per-row columns a reader adds beyond the common ones (Nsight Systems: pid, context, graph ids,
    # registers, shared memory; see docs/CONTRACTS.md); each has the length of the trace
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    full_names: dict[int, str] = field(default_factory=dict)  # names over NAME_LIMIT, whole, by id (bounded_names)
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.concrete is None:
            self.concrete = np.full(self.ts.shape[0], -1, dtype=np.int32)

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @property
    def end(self) -> np.ndarray:
        return self.cached("end", lambda: self.ts + self.dur)

    @property
    def rank(self) -> int:
        return int(self.meta.get("rank", 0))

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """Memoize a derived value on the trace (analyses are pure functions of the trace)."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def name_of(self, row: int) -> str:
        return self.names[int(self.name[row])]

    def full_name_of(self, row: int) -> str:
        """The name as the file wrote it, however long (names[] holds long ones shortened)."""
        i = int(self.name[row])
        return self.full_names.get(i, self.names[i])

    def name_table_mask(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """Boolean per row: predicate evaluated once per distinct name."""
        table = np.fromiter((bool(predicate(n)) for n in self.names), dtype=bool, count=len(self.names))
        hits = np.flatnonzero(table)
        if hits.size == 0:
            return np.zeros(len(self), dtype=bool)
        if hits.size <= 2:  # a pass per matching name costs less than gathering from the table
            out = self.name == hits[0]
            for i in hits[1:].tolist():
                out |= self.name == i
            return out
        return table.view(np.uint8).take(self.name).view(bool)

    def is_kind(self, *kinds: int) -> np.ndarray:
        return np.isin(self.kind, kinds)

    def rows(self, mask: np.ndarray) -> np.ndarray:
        return np.flatnonzero(mask)


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an integer column; a counting pass when the range is small."""
    values = np.asarray(values)
    if values.size == 0:
        return values
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 32 * values.size + (1 << 20):
        seen = np.bincount(values - lo, minlength=hi - lo + 1) > 0
        return (np.flatnonzero(seen) + lo).astype(values.dtype)
    return np.unique(values)
