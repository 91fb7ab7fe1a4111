"""energy(fn): joules per call from the GPU's energy counter, and FLOP per joule.

The counter (NVML total energy, mJ) is read after a synchronize at both ends of a run of many calls
long enough (min_time_s) that its update granularity and the two reads do not matter.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from time import perf_counter
from typing import Any, Callable

from perflab.errors import PerflabError
from perflab.toolkit.monitor import load_nvml, nvml_handle
from perflab.toolkit.timing import require_cuda


@dataclass(frozen=True)
class EnergyResult:
    joules_per_call: float
    mean_power_w: float
    seconds_per_call: float
    calls: int
    flops_per_call: float | None  # given, or counted by FlopCounterMode; None if unknown

    @property
    def flop_per_joule(self) -> float | None:
        """FLOP per joule, which is (FLOP/s) per watt."""
        return self.flops_per_call / self.joules_per_call if self.flops_per_call and self.joules_per_call > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flop_per_joule": self.flop_per_joule}

    def __str__(self) -> str:
        text = (f"{self.joules_per_call:.4g} J/call at {self.mean_power_w:.0f} W mean "
                f"({self.seconds_per_call * 1e3:.4g} ms/call, {self.calls} calls)")
        if self.flop_per_joule:
            text += f", {self.flop_per_joule / 1e9:.4g} GFLOP/J (= GFLOP/s per W)"
        return text


def count_flops(fn: Callable, args: tuple, kwargs: dict) -> float | None:
    """FLOPs of one call, by torch's FlopCounterMode (matmuls, convolutions, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return float(counter.get_total_flops()) or None


def energy(fn: Callable, *args: Any, repeats: int = 100, warmup: int = 5, min_time_s: float = 2.0,
           flops: float | None = None, device: int | None = None, **kwargs: Any) -> EnergyResult:
    """Energy of fn(*args, **kwargs) on a CUDA GPU: at least `repeats` calls and `min_time_s` seconds."""
    nv = load_nvml()
    try:
        torch = require_cuda("energy()")
        device = torch.cuda.current_device() if device is None else device
        handle = nvml_handle(nv, device)

        def read() -> int:
            return nv.nvmlDeviceGetTotalEnergyConsumption(handle)

        try:
            read()
        except nv.NVMLError as exc:
            raise PerflabError(f"this GPU has no energy counter ({exc}); it needs Volta or newer") from None
        with torch.cuda.device(device):
            if flops is None:
                flops = count_flops(fn, args, kwargs)
            for _ in range(warmup):
                fn(*args, **kwargs)
            torch.cuda.synchronize()
            t0 = perf_counter()
            fn(*args, **kwargs)
            torch.cuda.synchronize()
            calls = max(repeats, math.ceil(min_time_s / max(perf_counter() - t0, 1e-9)))

            e0, t0 = read(), perf_counter()
            for _ in range(calls):
                fn(*args, **kwargs)
            torch.cuda.synchronize()
            e1, t1 = read(), perf_counter()
    finally:
        nv.nvmlShutdown()
    joules = (e1 - e0) / 1000
    return EnergyResult(joules_per_call=joules / calls, mean_power_w=joules / (t1 - t0),
                        seconds_per_call=(t1 - t0) / calls, calls=calls, flops_per_call=flops)
