"""The typed shape of one Kineto event, as the reader decodes it (msgspec), and the integer coercion the reader
and its lenient path share (HTA's convention)."""
from __future__ import annotations

import math
from functools import partial
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


class CommArgs(Args, gc=False):
    """Args and the keys collectives add (trace/torch_profiler/comm_args.py reads them), decoded in the columns' own pass."""
    collective: Optional[str] = msgspec.field(name="Collective name", default=None)
    in_nelems: Optional[Num] = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Optional[Num] = msgspec.field(name="Out msg nelems", default=None)
    group_size: Optional[Num] = msgspec.field(name="Group size", default=None)
    dtype: Optional[str] = None
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    # True only where the event has no args at all (a key no recorder writes keeps the JSON from setting it)
    absent: bool = msgspec.field(name="perflab: no args", default=False)


class CommEvent(Event, gc=False):
    args: CommArgs = msgspec.field(default_factory=partial(CommArgs, absent=True))  # partial: no Python frame


def _to_int(v: Any, default: int = -1) -> int:
    """HTA's convention: int(value) if that works, else the default."""
    try:
        if isinstance(v, float) and not math.isfinite(v):
            return default
        out = int(v)
    except (TypeError, ValueError, OverflowError):
        return default
    return out if -(1 << 63) <= out < (1 << 63) else default
