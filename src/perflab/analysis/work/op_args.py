"""An op's recorded arguments, decoded: torch.profiler(record_shapes=True) writes per op "Input Dims"
(a list: a tensor's sizes, [] for a scalar or None, a list of lists for a tensor list), "Input type"
(the C++ dtype names) and, since torch 2.1, "Concrete Inputs" (scalar arguments as text)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

# Bytes per element by the names torch.profiler writes (2020 to today).
DTYPE_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "long": 8, "int": 4,
    "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "unsigned int": 4,
    "unsigned short": 2, "unsigned long": 8, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "c10::Float4_e2m1fn_x2": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::complex<c10::Half>": 4, "c10::qint8": 1,
    "c10::quint8": 1, "c10::qint32": 4, "c10::quint4x2": 1, "c10::quint2x4": 1, "c10::bits8": 1,
    "c10::bits16": 2, "c10::bits1x8": 1, "c10::bits2x4": 1, "c10::bits4x2": 1,
}
# torch.ScalarType codes, as a dtype argument appears among the Concrete Inputs ("15" = bfloat16).
SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 8: 4, 9: 8, 10: 16, 11: 1, 12: 1, 13: 1,
                     14: 4, 15: 2, 16: 1, 17: 1, 23: 1, 24: 1, 25: 1, 26: 1}
NARROW = ("Float8", "Float4", "signed char", "unsigned char", "qint8", "quint", "bits")


def precision(dtype: str) -> str:
    """The compute path a matrix op on this input dtype runs on (before the tf32 question)."""
    if dtype in ("c10::BFloat16",):
        return "bf16"
    if dtype in ("c10::Half",):
        return "fp16"
    if dtype.startswith("c10::Float8") or dtype.startswith("c10::Float4"):
        return "fp8"
    if dtype in ("signed char", "unsigned char", "c10::qint8", "c10::quint8"):
        return "int8"
    if dtype == "double":
        return "fp64"
    return "fp32"


@dataclass(frozen=True)
class Tensor:
    sizes: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)

    @property
    def itemsize(self) -> float | None:
        return DTYPE_BYTES.get(self.dtype)

    @property
    def nbytes(self) -> float:
        """Bytes at the recorded dtype; 1 byte per element where the dtype is unknown (a lower bound)."""
        return self.numel * (self.itemsize or 1)

    @property
    def narrow(self) -> bool:
        return any(n in self.dtype for n in NARROW)


@dataclass(frozen=True)
class OpArgs:
    """One op's arguments by position: a Tensor, a list of Tensors (tensor list), or None (scalar,
    None, not recorded); `concrete` holds the scalar arguments as text where recorded."""

    args: tuple
    concrete: tuple[str, ...] = ()

    def tensor(self, i: int) -> Tensor | None:
        a = self.args[i] if i < len(self.args) else None
        return a if isinstance(a, Tensor) else None

    def tensors(self) -> list[Tensor]:
        out: list[Tensor] = []
        for a in self.args:
            if isinstance(a, Tensor):
                out.append(a)
            elif isinstance(a, list):
                out.extend(a)
        return out

    def scalar(self, i: int) -> str | None:
        v = self.concrete[i] if i < len(self.concrete) else ""
        return v if v != "" else None

    def ints(self, i: int) -> tuple[int, ...] | None:
        """An int-list argument ('[2, 2]') or an int ('2') from the Concrete Inputs."""
        v = self.scalar(i)
        if v is None:
            return None
        try:
            parsed = json.loads(v)
        except ValueError:
            return None
        if isinstance(parsed, int) and not isinstance(parsed, bool):
            return (parsed,)
        if isinstance(parsed, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in parsed):
            return tuple(parsed)
        return None

    def flag(self, i: int) -> bool | None:
        v = self.scalar(i)
        return {"True": True, "False": False, "1": True, "0": False}.get(v) if v is not None else None


def _sizes(value) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
        return tuple(value)
    return None


def decode(dims_text: str, types_text: str, concrete_text: str = "") -> OpArgs | None:
    """OpArgs from the three recorded JSON texts; None when the dims are absent or not a list."""
    try:
        dims = json.loads(dims_text) if dims_text else None
        types = json.loads(types_text) if types_text else []
        concrete = json.loads(concrete_text) if concrete_text else []
    except (ValueError, RecursionError):
        return None
    if not isinstance(dims, list):
        return None
    types = types if isinstance(types, list) else []
    args = []
    for i, d in enumerate(dims):
        dtype = types[i] if i < len(types) and isinstance(types[i], str) else ""
        sizes = _sizes(d)
        if sizes is not None and (sizes or dtype in DTYPE_BYTES):
            args.append(Tensor(sizes, dtype))  # [] with a tensor dtype: a 0-dim tensor
        elif isinstance(d, list) and d and all(_sizes(x) is not None for x in d):
            args.append([Tensor(_sizes(x), "") for x in d])  # a tensor list: no dtype per tensor recorded
        else:
            args.append(None)
    concrete = tuple(c if isinstance(c, str) else "" for c in concrete) if isinstance(concrete, list) else ()
    return OpArgs(tuple(args), concrete)
