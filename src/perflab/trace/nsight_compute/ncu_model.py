"""The Nsight Compute model (trace/ncu.py reads reports into it): per kernel launch its facts and every
metric in base units (normalize_unit), whatever the report's own units were."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
_SECOND = {"s", "second", "seconds", "sec"}
_BASES = {"byte", "bytes", "hz", "cycle", "cycles", "inst", "sector", "sectors", "warp", "thread", "block",
          "register", "request", "requests", "pass", "flop", "op", "ops", "branches", "cluster", "sample"} | _SECOND


def _part_factor(part: str) -> tuple[float, str]:
    """('Gbyte') -> (1e9, 'byte'); ('nsecond') -> (1e-9, 'second'); unknown parts pass through."""
    p = part.strip()
    for prefix in ("", *(k for k in _PREFIX if k)):
        if prefix and not p.startswith(prefix):
            continue
        base = p[len(prefix):]
        if base.lower() in _BASES and (base.lower() != "s" or prefix or p == "s"):
            canon = "second" if base.lower() in _SECOND else ("hz" if base.lower() == "hz" else base)
            return _PREFIX[prefix], canon
    return 1.0, p


def normalize_unit(unit: str) -> tuple[float, str]:
    """Factor to multiply a value by, and the base unit: 'usecond' -> (1e-6, 'second'),
    'Gbyte/s' -> (1e9, 'byte/second'), 'cycle/nsecond' -> (1e9, 'cycle/second'), '%' -> (1, '%')."""
    unit = (unit or "").strip()
    if not unit or unit == "%":
        return 1.0, unit
    parts = unit.split("/")
    factor, names = 1.0, []
    for i, part in enumerate(parts):
        f, name = _part_factor(part)
        factor = factor * f if i == 0 else factor / f
        names.append(name)
    return factor, "/".join(names)


def parse_number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if not t or t.lower() in {"n/a", "nan", "-", "no data"}:
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _triplet(value: Any) -> tuple[int, int, int] | None:
    if value is None:
        return None
    nums = [int(float(x)) for x in re.findall(r"\d+(?:\.\d+)?", str(value).replace(",", ""))
            if float(x) < 2 ** 32]  # CUDA's limit on a grid dimension; more digits are garbage, not a launch
    if len(nums) == 3:
        return nums[0], nums[1], nums[2]
    if len(nums) == 1:
        return nums[0], 1, 1
    return None


@dataclass
class KernelProfile:
    """One profiled kernel launch."""

    index: int
    name: str                                   # function name, no parameters
    full_name: str                              # demangled, with parameters when known
    metrics: dict[str, Any] = field(default_factory=dict)   # numbers in base units, or strings
    units: dict[str, str] = field(default_factory=dict)      # base unit per metric
    nvtx: list[str] = field(default_factory=list)            # NVTX ranges open at launch
    rules: list[dict[str, Any]] = field(default_factory=list)  # ncu's own guided-analysis results (ncu_rules.py)
    dropped: dict[str, str] = field(default_factory=dict)    # metric -> raw value that cannot be a measurement

    def get(self, name: str, default: float | None = None) -> float | None:
        v = self.metrics.get(name)
        return float(v) if isinstance(v, (int, float)) else default

    def first(self, *names: str) -> float | None:
        """The first of `names` that the report has (metric names changed across ncu versions)."""
        for n in names:
            v = self.get(n)
            if v is not None:
                return v
        return None

    @property
    def duration_s(self) -> float | None:
        return self.get("gpu__time_duration.sum")

    def _launch_dims(self, what: str, column: str) -> tuple[int, int, int] | None:
        """launch__{what}_dim_x/y/z, else the report's '(x, y, z)' text (CSV column or launch__{what}_size)."""
        dims = [self.get(f"launch__{what}_dim_{a}") for a in "xyz"]
        if all(d is not None for d in dims):
            return tuple(int(d) for d in dims)  # type: ignore[return-value]
        return _triplet(self.metrics.get(column) or self.metrics.get(f"launch__{what}_size"))

    @property
    def grid(self) -> tuple[int, int, int] | None:
        return self._launch_dims("grid", "Grid Size")

    @property
    def block(self) -> tuple[int, int, int] | None:
        return self._launch_dims("block", "Block Size")

    @property
    def registers(self) -> int | None:
        v = self.get("launch__registers_per_thread")
        return int(v) if v is not None else None

    @property
    def shared_mem_bytes(self) -> int | None:
        parts = [self.get("launch__shared_mem_per_block_static"), self.get("launch__shared_mem_per_block_dynamic")]
        if all(p is None for p in parts):
            return None
        return int(sum(p or 0 for p in parts))

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "grid": self.grid, "block": self.block, "registers": self.registers,
                "shared_mem_bytes": self.shared_mem_bytes, "duration_us": _us(self.duration_s)}


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e6, 3)


@dataclass
class NcuProfile:
    path: str
    source: str                     # "ncu_report" | "csv"
    kernels: list[KernelProfile]

    @property
    def device(self) -> str | None:
        for k in self.kernels:
            v = k.metrics.get("device__attribute_display_name")
            if isinstance(v, str) and v:
                return v
        return None


def short_name(full: str) -> str:
    """'void ns::kern<int>(float*, int)' -> 'ns::kern<int>'; plain names pass through."""
    name = full.strip()
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # first '(' outside template brackets starts the parameter list
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    name = name[:cut].strip()
    return name[5:] if name.startswith("void ") else name
