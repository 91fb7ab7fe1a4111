"""What a collective moves: its kind from a recorded or kernel name, its message size in bytes from element counts
and dtype, and the nccl-tests bus-bandwidth factor (the formulas analysis/multigpu/collectives.py's docstring gives)."""
from __future__ import annotations

import re
from functools import lru_cache

# bus-bandwidth factor per collective type, as a function of the group size n
BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}

_KINDS = (  # first match wins; applied to recorded collective names and to kernel names
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("all_reduce", re.compile(r"all_?reduce|cross_device_reduce|quick_?reduce", re.IGNORECASE)),
    # expert-parallel dispatch/combine (DeepEP, pplx) send each token to its experts' ranks: an all-to-all
    ("all_to_all", re.compile(r"all_?to_?all|a2a|deep_?ep::.*(dispatch|combine)|pplx::", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast|bcast", re.IGNORECASE)),
    ("send_recv", re.compile(r"send|recv|p2p", re.IGNORECASE)),
    ("barrier", re.compile(r"barrier", re.IGNORECASE)),
    ("reduce", re.compile(r"reduce", re.IGNORECASE)),
)

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "int": 4, "int32": 4, "uint32": 4, "complexhalf": 4,
    "double": 8, "float64": 8, "long": 8, "int64": 8, "uint64": 8, "complexfloat": 8,
    "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "int16": 2, "uint16": 2,
    "byte": 1, "char": 1, "bool": 1, "int8": 1, "uint8": 1, "int8_t": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "complexdouble": 16,
}


def collective_kind(name: str | None) -> str | None:
    if not name:
        return None
    return next((k for k, rx in _KINDS if rx.search(name)), None)


collective_kind_cached = lru_cache(maxsize=4096)(collective_kind)   # names repeat: one search per distinct one


@lru_cache(maxsize=4096)
def kernel_collective_kind(name: str) -> str | None:
    return collective_kind(re.sub(r"^nccl(Dev)?Kernel_", "", name))


def dtype_bytes(dtype: str | None) -> int | None:
    if not dtype:
        return None
    key = dtype.lower().replace("c10::", "").replace("torch.", "").strip()
    return _DTYPE_BYTES.get(key)


def message_bytes(kind: str | None, in_nelems: int | None, out_nelems: int | None, dtype: str | None,
                  n: int | None) -> float | None:
    """The buffer size nccl-tests reports for this collective (all_gather: the gathered output)."""
    size = dtype_bytes(dtype)
    if size is None or kind is None:
        return None
    if kind in ("all_gather", "reduce_scatter"):
        total = max(in_nelems or 0, out_nelems or 0)
        if in_nelems and (not out_nelems or out_nelems == in_nelems) and n and kind == "all_gather":
            total = in_nelems * n  # only the per-rank input is known
        nelems = total or None
    else:
        nelems = in_nelems if in_nelems is not None else out_nelems
    return float(nelems * size) if nelems is not None else None


@lru_cache(maxsize=256)  # called per collective (tens of thousands) with a handful of (kind, n)
def bus_factor(kind: str | None, n: int | None) -> float | None:
    if kind not in BUS_FACTOR or not n or n < 1:
        return None
    return BUS_FACTOR[kind](n)
