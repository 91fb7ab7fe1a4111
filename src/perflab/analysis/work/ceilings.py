"""The GPU's ceilings for speed-of-light arithmetic: measured by `perflab bench` on the same GPU model when
such a measurement is at hand, else the vendor datasheet (datasheets.toml), labelled as such; an unknown GPU
gets none (relative figures only).

Pure apart from reading files: `device_ceilings(device, measured)` takes the bench result as a dict.
"""
from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from perflab.analysis.work.saved_ceilings import measured_beside  # noqa: F401 (the doctor's and the questions' way in)

PATHS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")
# A path the GPU has no figure for borrows the next one that runs the same operands (a V100 has no bf16 or
# tf32 tensor path: torch runs bf16 on its fp16-class units or emulates it, fp32 matmuls on the FP32 units).
FALLBACK = {"bf16": ("fp16", "fp32"), "fp16": ("bf16", "fp32"), "tf32": ("fp32",), "fp8": ("bf16", "fp16", "fp32"),
            "fp4": ("fp8", "bf16", "fp16"), "int8": ("fp16", "bf16", "fp32"), "fp64": ("fp32",), "fp32": ()}
# Which result of `perflab bench` measures which roof.
BENCH_MATMUL = {"bf16": "matmul_bf16", "fp16": "matmul_fp16", "fp8": "matmul_fp8_e4m3", "tf32": "matmul_tf32",
                "fp32": "matmul_fp32"}


@dataclass
class DeviceCeilings:
    device: str
    dram: float | None                   # bytes/s
    compute: dict[str, float]            # path -> FLOP/s
    source: str                          # "measured ..." | "datasheet ..." | "unknown GPU"
    l2: float | None = None              # bytes/s, where measured
    l2_bytes: float | None = None
    sms: int | None = None
    sources: dict[str, str] = field(default_factory=dict)   # roof -> where it came from
    peak: dict[str, float] = field(default_factory=dict)    # the datasheet's figures ("dram" and paths), if any

    @property
    def known(self) -> bool:
        return self.dram is not None

    def flops_roof(self, path: str) -> tuple[float | None, str]:
        """(FLOP/s, the path whose figure it is) for a compute path, through FALLBACK."""
        for p in (path, *FALLBACK.get(path, ())):
            if p in self.compute:
                return self.compute[p], p
        return None, path

    def to_dict(self) -> dict:
        return {"device": self.device, "source": self.source, "dram_gbps": _g(self.dram),
                "l2_gbps": _g(self.l2), "l2_mb": round(self.l2_bytes / 1e6, 1) if self.l2_bytes else None,
                "sms": self.sms, "compute_tflops": {p: round(v / 1e12, 1) for p, v in self.compute.items()},
                "sources": self.sources}


def _g(v: float | None) -> float | None:
    return round(v / 1e9, 1) if v else None


@functools.lru_cache(maxsize=1)
def datasheets() -> tuple[dict, ...]:
    with open(Path(__file__).with_name("datasheets.toml"), "rb") as fh:
        return tuple(tomllib.load(fh)["gpu"])


def datasheet(device: str | None) -> dict | None:
    """The datasheet entry whose pattern occurs in the device name, or None for a GPU we have none for."""
    if not device:
        return None
    return next((d for d in datasheets() if re.search(d["pattern"], device, re.I)), None)


def same_gpu(measured_on: str, device: str) -> bool:
    """A measurement counts for a trace when it was made on the same GPU model (names as the driver gives them)."""
    return bool(measured_on) and bool(device) and measured_on.strip() == device.strip()


def device_ceilings(device: str | None, measured: dict | None = None) -> DeviceCeilings:
    """Ceilings for `device`: measured roofs (when `measured` was taken on the same GPU model) over the
    datasheet's; an unknown GPU with no measurement has no roofs (dram None)."""
    device = device or ""
    sheet = datasheet(device)
    compute: dict[str, float] = {}
    sources: dict[str, str] = {}
    dram = l2 = l2_bytes = None
    sms = None
    if sheet:
        tag = f"datasheet {sheet['name']}"
        dram, l2_bytes, sms = sheet.get("dram"), sheet.get("l2"), sheet.get("sms")
        sources["dram"] = tag
        for p in PATHS:
            if p in sheet:
                compute[p], sources[p] = float(sheet[p]), tag
    source = f"datasheet: {sheet['source']} (dense peaks)" if sheet else "unknown GPU: no datasheet or measured ceilings"
    man = (measured or {}).get("manifest") or {}
    if measured and same_gpu(str(man.get("gpu") or ""), device):
        res = measured.get("results") or {}
        tag = f"measured on {man.get('gpu')} {str(man.get('date', ''))[:10]}"
        bws = [res[k]["value"] for k in ("dram_copy", "dram_read_smem") if isinstance(res.get(k), dict)
               and isinstance(res[k].get("value"), (int, float))]
        if bws:
            dram, sources["dram"] = max(bws) * 1e9, tag
        if isinstance((res.get("l2_read") or {}).get("value"), (int, float)):
            l2, sources["l2"] = res["l2_read"]["value"] * 1e9, tag
        for p, key in BENCH_MATMUL.items():
            if isinstance((res.get(key) or {}).get("value"), (int, float)):
                compute[p], sources[p] = res[key]["value"] * 1e12, f"{tag} ({key})"
        l2_bytes = man.get("l2_bytes") or l2_bytes
        sms = man.get("sms") or sms
        source = f"{tag} by perflab bench" + (f"; unmeasured roofs from the {sheet['name']} datasheet" if sheet else "")
    peak = {k: float(sheet[k]) for k in ("dram", *PATHS) if sheet and k in sheet}
    return DeviceCeilings(device=device, dram=dram, compute=compute, source=source, l2=l2, l2_bytes=l2_bytes,
                          sms=int(sms) if sms else None, sources=sources, peak=peak)
