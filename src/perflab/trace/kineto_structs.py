"""The typed shape of one Kineto event, as the reader decodes it (msgspec), and the integer coercion the reader
and its lenient path share (HTA's convention)."""
from __future__ import annotations

import math
from typing import Any, Optional, Union

import msgspec

Num = Union[int, float, str]
NAN = float("nan")


class Args(msgspec.Struct, gc=False):
    stream: Num = -1
    device: Num = -1
    correlation: Num = -1
    external_id: Num = msgspec.field(name="External id", default=-1)
    external_id_2021: Num = msgspec.field(name="external id", default=-1)  # kernels' spelling in 2021 Kineto
    bytes: Num = NAN
    grid: Optional[list[int]] = None
    block: Optional[list[int]] = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b""))
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw(b""))


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: Num = NAN
    dur: Num = NAN
    tid: Union[int, str] = -1
    id: Union[int, str] = -1
    args: Args = msgspec.field(default_factory=Args)


_NO_ARGS = Args()


def _to_int(v: Any, default: int = -1) -> int:
    """HTA's convention: int(value) if that works, else the default."""
    try:
        if isinstance(v, float) and not math.isfinite(v):
            return default
        out = int(v)
    except (TypeError, ValueError, OverflowError):
        return default
    return out if -(1 << 63) <= out < (1 << 63) else default
