"""GPUMonitor: a background thread sampling one GPU through NVML (nvidia-ml-py's `pynvml`).

Power is NVML's instantaneous reading where the driver has it (field NVML_FI_DEV_POWER_INSTANT):
`nvmlDeviceGetPowerUsage` is a 1 s average on Ampere and newer, which smears a 10 ms sampler and
makes ∫power dt lag the energy counter. The energy counter (`nvmlDeviceGetTotalEnergyConsumption`,
mJ since driver load) is read too, so the summary gives energy both ways and they can be compared.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError

NVML_MISSING = "NVML not available: install nvidia-ml-py and run on a machine with an NVIDIA driver"
SCHEMA = "perflab.monitor/1"

# nvmlClocksEventReason* bits (formerly "throttle reasons"), in NVML's order.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}
FIELDS = ("t", "gpu_util_pct", "mem_util_pct", "mem_used_mib", "power_w", "sm_clock_mhz", "mem_clock_mhz",
          "temp_c", "throttle", "energy_mj")


def load_nvml() -> Any:
    """pynvml, initialized; PerflabError with one line when there is no NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, or NVMLError (no driver, no library)
        raise PerflabError(NVML_MISSING) from None
    return pynvml


def nvml_handle(nv: Any, device: int) -> Any:
    """The NVML handle of CUDA device `device`, honouring CUDA_VISIBLE_DEVICES (indices or UUIDs)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    try:
        if not visible:
            return nv.nvmlDeviceGetHandleByIndex(device)
        if device >= len(visible):
            raise PerflabError(f"no CUDA device {device}: CUDA_VISIBLE_DEVICES={','.join(visible)}")
        ident = visible[device]
        if ident.isdigit():
            return nv.nvmlDeviceGetHandleByIndex(int(ident))
        return nv.nvmlDeviceGetHandleByUUID(ident.encode())
    except nv.NVMLError as exc:
        raise PerflabError(f"NVML cannot open GPU {device}: {exc}") from None


def decode_throttle(mask: int | None) -> list[str]:
    """Names of the clock-event (throttle) reason bits set in `mask`."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


Reader = Callable[[], dict]


def _readers(nv: Any, h: Any) -> dict[str, list[tuple[str, Reader]]]:
    """For each metric, NVML queries that return some of FIELDS, best first, each with a label."""

    def util() -> dict[str, float]:
        u = nv.nvmlDeviceGetUtilizationRates(h)
        return {"gpu_util_pct": u.gpu, "mem_util_pct": u.memory}

    def instant_power() -> dict[str, float]:
        (v,) = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_POWER_INSTANT])
        if v.nvmlReturn != 0:
            raise nv.NVMLError(v.nvmlReturn)
        return {"power_w": v.value.uiVal / 1000}

    def reasons(name: str) -> Reader:  # "clocks event reasons" is the new name of "throttle reasons"
        return lambda: {"throttle": int(getattr(nv, name)(h))}

    return {
        "util": [("", util)],
        "memory": [("", lambda: {"mem_used_mib": nv.nvmlDeviceGetMemoryInfo(h).used / 2**20})],
        "power": [("instant", instant_power),
                  ("1 s average", lambda: {"power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000})],
        "clocks": [("", lambda: {"sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                 "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)})],
        "temperature": [("", lambda: {"temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)})],
        "throttle": [("", reasons("nvmlDeviceGetCurrentClocksEventReasons")),
                     ("", reasons("nvmlDeviceGetCurrentClocksThrottleReasons"))],
        "energy": [("", lambda: {"energy_mj": nv.nvmlDeviceGetTotalEnergyConsumption(h)})],
    }


def _working(readers: dict[str, list[tuple[str, Reader]]]) -> dict[str, tuple[str, Reader]]:
    """Per metric, the first query that works on this GPU (probed once); metrics with none are left out."""
    ok = {}
    for metric, choices in readers.items():
        for label, read in choices:
            try:
                read()
            except Exception:  # NVMLError (not supported), or a binding too old to have the call
                continue
            ok[metric] = (label, read)
            break
    return ok


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def integrate(ts: list[float], ps: list[float]) -> float:
    """∫ p dt by the trapezoid rule."""
    return sum((ps[i] + ps[i + 1]) / 2 * (ts[i + 1] - ts[i]) for i in range(len(ts) - 1))


class GPUMonitor:
    """Sample a GPU every `interval` seconds on a background thread.

        with GPUMonitor(interval=0.01) as mon:
            run()
        print(mon.summary())

    `device` is a CUDA device index (CUDA_VISIBLE_DEVICES is honoured). Each sample is a dict of
    FIELDS: t in seconds since open() or start(), None where the GPU does not report a metric.
    """

    def __init__(self, interval: float = 0.01, device: int = 0, *,
                 clock: Callable[[], float] = time.perf_counter):
        if interval <= 0:
            raise PerflabError(f"interval must be > 0 seconds (got {interval})")
        self.interval, self.device, self.clock = interval, device, clock
        self.samples: list[dict[str, Any]] = []
        self._nv: Any = None
        self._readers: dict[str, tuple[str, Reader]] = {}
        self._t0 = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.name = ""
        self.power_source = ""

    # -- lifecycle --
    def open(self) -> None:
        """Connect to NVML and probe what this GPU reports (start() does it when needed)."""
        if self._nv is not None:
            return
        nv = load_nvml()
        try:
            handle = nvml_handle(nv, self.device)
        except PerflabError:
            nv.nvmlShutdown()
            raise
        name = nv.nvmlDeviceGetName(handle)
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self._readers = _working(_readers(nv, handle))
        self.power_source = self._readers.get("power", ("none",))[0]
        self._nv = nv
        self._t0 = self.clock()

    def start(self) -> "GPUMonitor":
        self.open()
        self.samples.clear()
        self._stop.clear()
        self._t0 = self.clock()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="perflab-gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> "GPUMonitor":
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()  # so the samples span the whole monitored time
        if self._nv is not None:
            self._nv.nvmlShutdown()
            self._nv = None
        return self

    def __enter__(self) -> "GPUMonitor":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        next_t = self.clock()
        while True:
            next_t += self.interval
            if self._stop.wait(max(0.0, next_t - self.clock())):
                return
            self.sample()

    # -- data --
    def sample(self) -> dict[str, Any]:
        """Take one sample now (the thread calls this every interval)."""
        row: dict[str, Any] = dict.fromkeys(FIELDS)
        row["t"] = self.clock() - self._t0
        for _, read in self._readers.values():
            try:
                row.update(read())
            except Exception:  # a transient NVML error loses this metric for this sample only
                pass
        self.samples.append(row)
        return row

    def latest(self) -> dict[str, Any] | None:
        return self.samples[-1] if self.samples else None

    def column(self, name: str) -> tuple[list[float], list[float]]:
        """(t, value) over the samples that have `name`."""
        pairs = [(s["t"], s[name]) for s in self.samples if s.get(name) is not None]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def summary(self) -> dict[str, Any]:
        s = self.samples
        duration = s[-1]["t"] - s[0]["t"] if len(s) > 1 else 0.0
        tp, power = self.column("power_w")
        te, energy = self.column("energy_mj")
        integrated = integrate(tp, power) if len(power) > 1 else None
        _, util = self.column("gpu_util_pct")
        _, mem_util = self.column("mem_util_pct")
        _, mem = self.column("mem_used_mib")
        _, sm = self.column("sm_clock_mhz")
        _, temp = self.column("temp_c")
        _, masks = self.column("throttle")
        throttle = {name: sum(name in decode_throttle(m) for m in masks) / len(masks)
                    for name in THROTTLE_REASONS.values()} if masks else {}
        return {
            "device": self.name, "samples": len(s), "interval_s": self.interval, "duration_s": duration,
            "power_source": self.power_source,
            # time-weighted, like the energy: samples are not exactly evenly spaced
            "mean_power_w": integrated / (tp[-1] - tp[0]) if integrated and tp[-1] > tp[0] else _mean(power),
            "max_power_w": max(power) if power else None,
            "energy_j_counter": (energy[-1] - energy[0]) / 1000 if len(energy) > 1 else None,
            "energy_j_integrated": integrated,
            "mean_gpu_util_pct": _mean(util), "mean_mem_util_pct": _mean(mem_util),
            "peak_mem_used_mib": max(mem) if mem else None,
            "mean_sm_clock_mhz": _mean(sm), "min_sm_clock_mhz": min(sm) if sm else None,
            "max_temp_c": max(temp) if temp else None,
            "throttle": {k: v for k, v in throttle.items() if v > 0},  # fraction of samples
        }

    def records(self) -> list[dict[str, Any]]:
        """The samples with throttle reasons decoded to names (`a|b`)."""
        return [{**r, "throttle": "|".join(decode_throttle(r["throttle"]))} for r in self.samples]

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.records(), columns=list(FIELDS))

    def to_json(self, path: str | Path, *, force: bool = False) -> Path:
        from perflab.outputs import write_output

        doc = {"schema": SCHEMA, "device": self.name, "interval_s": self.interval,
               "summary": _finite(self.summary()), "samples": self.records()}
        return write_output(path, json.dumps(doc, indent=1), force=force)

    def to_csv(self, path: str | Path, *, force: bool = False) -> Path:
        import csv

        from perflab.outputs import atomic_path

        with atomic_path(path, force=force) as tmp, tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(self.records())
        return Path(path)

    def plot(self, path: str | Path) -> Path:
        """Power, utilization and clocks over time, one panel each (matplotlib, PNG/SVG/PDF by suffix)."""
        from matplotlib.figure import Figure  # no pyplot: leaves the user's backend alone

        panels = [("power (W)", ["power_w"]), ("utilization (%)", ["gpu_util_pct", "mem_util_pct"]),
                  ("clock (MHz)", ["sm_clock_mhz", "mem_clock_mhz"])]
        fig = Figure(figsize=(9, 7))
        axes = fig.subplots(len(panels), 1, sharex=True)
        for ax, (label, names) in zip(axes, panels):
            for name in names:
                t, v = self.column(name)
                if v:
                    ax.plot(t, v, label=name)
            ax.set_ylabel(label)
            ax.legend(loc="upper right", fontsize="small")
        axes[-1].set_xlabel("time (s)")
        fig.suptitle(f"{self.name} — every {self.interval * 1000:g} ms")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path)
        return path


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/inf: None instead."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in d.items()}
