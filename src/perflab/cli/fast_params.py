"""Typer (0.29+) coerces every non-bool parameter through a pydantic TypeAdapter, and importing pydantic is ~0.1 s
of an interactive command's start-up (`perflab show ID`, `hint ID N`, `answer ID -a k=v`). The adapter returns a str,
a list of str, or a plain decimal int given as digits unchanged (as str, list, int): those values skip it. Every other
value (a number out of range or written another way, paths, choices, custom parsers, bytes) goes through typer's own
coercion, so its results and error messages stay typer's. Without those internals (another typer) nothing changes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args, get_origin


def _plain_int(value: Any, info: Any) -> int | None:
    if type(value) is not str or not (value.isascii() and value.isdigit()) or getattr(info, "clamp", False):
        return None
    n = int(value)
    lo, hi = getattr(info, "min", None), getattr(info, "max", None)
    return n if (lo is None or n >= lo) and (hi is None or n <= hi) else None


def _fast(annotation: Any, info: Any, value: Any) -> tuple[bool, Any]:
    """(True, result) where the adapter would return `result` for `value`; (False, None) otherwise."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return False, None
    if annotation is str and type(value) is str:
        return True, value
    if annotation is int:
        n = _plain_int(value, info)
        return (n is not None), n
    if get_origin(annotation) is list and get_args(annotation) in ((str,), (int,)) \
            and isinstance(value, (list, tuple)):
        items = [_fast(get_args(annotation)[0], info, v) for v in value]
        if all(ok for ok, _ in items):
            return True, [v for _, v in items]
    return False, None


def install() -> None:
    try:
        from typer import _coercion, core
    except ImportError:
        return
    cls = getattr(core, "_TyperParameter", None)
    base = getattr(_coercion, "RuntimeParam", None)
    build = getattr(_coercion, "build_runtime_param", None)
    if cls is None or base is None or build is None or not hasattr(cls, "get_runtime_param") \
            or getattr(cls, "_perflab_fast", False):
        return

    @dataclass(frozen=True)
    class FastParam(base):  # type: ignore[misc, valid-type]
        descriptor: Any

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            ok, result = _fast(self.annotation, self.parameter_info, value)
            return result if ok else build(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            d = self.type_descriptor
            self._runtime_param = build(d) if d.file_annotation is not None else \
                FastParam(parameter_info=d.parameter_info, annotation=d.annotation, descriptor=d)
        return self._runtime_param

    cls.get_runtime_param = get_runtime_param
    cls._perflab_fast = True
