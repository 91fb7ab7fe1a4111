"""What a set of ceilings was measured on: GPU, clocks (NVML), driver, versions, date."""
from __future__ import annotations

import datetime as dt
import platform
import socket
import sys


def nvml_facts(index: int = 0) -> dict:
    """Driver, clocks and power limit through NVML (nvidia-ml-py); {} when NVML is unavailable."""
    try:
        import pynvml
    except ImportError:
        return {"nvml": "unavailable (nvidia-ml-py not installed)"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"nvml": f"unavailable ({exc})"}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)

        def clock(kind, which):
            try:
                return which(h, kind)
            except Exception:
                return None

        facts = {
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "clocks_mhz": {
                "sm": clock(pynvml.NVML_CLOCK_SM, pynvml.nvmlDeviceGetClockInfo),
                "sm_max": clock(pynvml.NVML_CLOCK_SM, pynvml.nvmlDeviceGetMaxClockInfo),
                "mem": clock(pynvml.NVML_CLOCK_MEM, pynvml.nvmlDeviceGetClockInfo),
                "mem_max": clock(pynvml.NVML_CLOCK_MEM, pynvml.nvmlDeviceGetMaxClockInfo),
            },
        }
        try:
            facts["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000
        except Exception:
            pass
        return facts
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def manifest(mode: str) -> dict:
    import torch

    import perflab

    props = torch.cuda.get_device_properties(0)
    out = {
        "gpu": props.name,
        "cc": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "perflab": perflab.__version__,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
    }
    try:
        import cupy

        out["cupy"] = cupy.__version__
    except ImportError:
        out["cupy"] = None
    out.update(nvml_facts(torch.cuda.current_device()))
    return out
