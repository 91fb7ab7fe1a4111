"""Kineto events from arbitrary decoded JSON values: the reader's path for blocks whose fields have unexpected
types (a string timestamp, a dict for a stream id), coercing what can be coerced instead of failing the block."""
from __future__ import annotations

from typing import Any

import msgspec

from perflab.trace.torch_profiler.kineto_structs import _NO_ARGS, NAN, Args, Event, _to_int


def loose_event(item: Any) -> Event:
    """Build an Event from an arbitrary decoded JSON value, coercing what can be coerced."""
    if not isinstance(item, dict):
        return Event(ph="?")
    raw_args = item.get("args")
    args = _NO_ARGS
    if isinstance(raw_args, dict):
        args = Args(
            stream=_scalar(raw_args.get("stream"), -1), device=_scalar(raw_args.get("device"), -1),
            correlation=_scalar(raw_args.get("correlation"), -1),
            external_id=_scalar(raw_args.get("External id"), -1),
            external_id_2021=_scalar(raw_args.get("external id"), -1),
            bytes=_scalar(raw_args.get("bytes"), NAN),
            grid=_int_list(raw_args.get("grid")), block=_int_list(raw_args.get("block")),
            input_dims=_raw(raw_args.get("Input Dims")), input_type=_raw(raw_args.get("Input type")),
            concrete_inputs=_raw(raw_args.get("Concrete Inputs")),
        )
    return Event(
        ph=_text(item.get("ph")), cat=_text(item.get("cat")), name=_text(item.get("name")),
        ts=_scalar(item.get("ts"), NAN), dur=_scalar(item.get("dur"), NAN),
        tid=_id(item.get("tid")), id=_id(item.get("id")), args=args,
    )


def _text(v: Any) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else str(v)


def _scalar(v: Any, default):
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, (int, float, str)):
        return v
    return default


def _id(v: Any):
    if isinstance(v, bool) or v is None:
        return -1
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return _to_int(v)
    return str(v)


def _int_list(v: Any) -> list[int] | None:
    if not isinstance(v, list):
        return None
    return [_to_int(x, 0) for x in v]


def _raw(v: Any) -> msgspec.Raw:
    if v is None:
        return msgspec.Raw(b"")
    try:
        return msgspec.Raw(msgspec.json.encode(v))
    except (TypeError, ValueError, OverflowError):
        return msgspec.Raw(b"")
