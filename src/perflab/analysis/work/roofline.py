"""Roofline: per kernel arithmetic intensity and achieved FLOP/s against the machine's ceilings.

Work comes from ncu counters: SIMT FLOPs = fadd + fmul + 2*ffma (and the f16/f64 analogues; a packed
HFMA2 counts 4), tensor FLOPs = the `sm__ops_path_tensor_*` counters (math ops, 2 per multiply-add),
DRAM bytes = dram__bytes_read + dram__bytes_write, time = gpu__time_duration. Ceilings are the ones
`perflab bench` measured (user data dir), else datasheet values labelled as such. The ridge point
(compute roof / DRAM roof) says on which side of the roofline a kernel sits.
"""
from __future__ import annotations

import re
from dataclasses import replace, asdict, dataclass, field
from pathlib import Path

from perflab.trace.ncu import KernelProfile, NcuProfile

# Datasheet fallbacks, used only when no bench was run: dense (no sparsity) peaks at boost clock.
DATASHEETS = {
    "H100 SXM": {
        "source": "datasheet: NVIDIA H100 Tensor Core GPU datasheet, H100 SXM5 column (dense)",
        "pattern": r"H100.*(SXM|HBM3)|H100$",
        "dram": 3.35e12, "fp64": 34e12, "fp64_tensor": 67e12, "fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12,
        "fp16": 989.4e12, "fp8": 1978.9e12, "int8": 1978.9e12,
    },
    "H100 PCIe": {
        "source": "datasheet: NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (dense)",
        "pattern": r"H100.*PCIe",
        "dram": 2.0e12, "fp64": 26e12, "fp64_tensor": 51e12, "fp32": 51e12, "tf32": 378e12, "bf16": 756e12,
        "fp16": 756e12, "fp8": 1513e12, "int8": 1513e12,
    },
    "H200": {
        "source": "datasheet: NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column (dense)",
        "pattern": r"H200",
        "dram": 4.8e12, "fp64": 34e12, "fp64_tensor": 67e12, "fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12,
        "fp16": 989.4e12, "fp8": 1978.9e12, "int8": 1978.9e12,
    },
}
DEFAULT_DATASHEET = "H100 SXM"

# Which ceiling of `perflab bench` stands for which compute path.
BENCH_KEYS = {"bf16": "matmul_bf16", "fp16": "matmul_fp16", "fp8": "matmul_fp8_e4m3", "tf32": "matmul_tf32",
              "fp32": "matmul_fp32"}

SIMT_FLOPS = {  # path -> [(counter, flops per thread instruction)]
    "fp32": [("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 1), ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 2)],
    "fp16": [("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", 2), ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", 2),
             ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", 4)],
    "fp64": [("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", 1), ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", 2)],
}
TENSOR_FLOPS = {  # path -> counters of tensor math ops
    "bf16": ["sm__ops_path_tensor_src_bf16_dst_fp32.sum"],
    "fp16": ["sm__ops_path_tensor_src_fp16_dst_fp16.sum", "sm__ops_path_tensor_src_fp16_dst_fp32.sum"],
    "tf32": ["sm__ops_path_tensor_src_tf32_dst_fp32.sum"],
    "fp8": ["sm__ops_path_tensor_src_fp8.sum"],
    "fp64": ["sm__ops_path_tensor_src_fp64.sum"],
    "int8": ["sm__ops_path_tensor_src_int8.sum"],
}


@dataclass
class Roof:
    name: str
    value: float            # FLOP/s for compute roofs, byte/s for memory roofs
    source: str             # "measured ..." | "datasheet ..." | "ncu peak ..."


@dataclass
class Ceilings:
    memory: dict[str, Roof]
    compute: dict[str, Roof]
    source: str

    @property
    def dram(self) -> Roof:
        return self.memory["dram"]


def datasheet_for(device: str | None) -> tuple[str, dict]:
    for key, sheet in DATASHEETS.items():
        if device and re.search(sheet["pattern"], device):
            return key, sheet
    return DEFAULT_DATASHEET, DATASHEETS[DEFAULT_DATASHEET]


def ceilings_from(data: dict | None, device: str | None = None) -> Ceilings:
    """Roofs from a `perflab bench` result (measured), filling gaps from the datasheet (labelled)."""
    key, sheet = datasheet_for(device or (data or {}).get("manifest", {}).get("gpu"))
    ds = f"datasheet {key}"
    memory = {"dram": Roof("DRAM", sheet["dram"], ds)}
    compute = {p: Roof(p.upper(), sheet[p], ds) for p in ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8",
                                                           "int8")}
    source = sheet["source"]
    if data:
        res = data.get("results", {})
        man = data.get("manifest", {})
        tag = f"measured on {man.get('gpu', '?')} {str(man.get('date', ''))[:10]}"
        bws = [res[k]["value"] for k in ("dram_copy", "dram_read_smem") if "value" in res.get(k, {})]
        if bws:
            memory["dram"] = Roof("DRAM", max(bws) * 1e9, tag)
        if "value" in res.get("l2_read", {}):
            memory["l2"] = Roof("L2", res["l2_read"]["value"] * 1e9, tag)
        for path, bench_key in BENCH_KEYS.items():
            if "value" in res.get(bench_key, {}):
                compute[path] = Roof(path.upper(), res[bench_key]["value"] * 1e12, f"{tag} ({bench_key})")
        source = f"{tag} by perflab bench; unmeasured roofs from the {key} datasheet"
    return Ceilings(memory=memory, compute=compute, source=source)


def load_ceilings(path: Path | None = None, device: str | None = None) -> Ceilings:
    from perflab.analysis.work.saved_ceilings import load_ceilings as load_saved

    return ceilings_from(load_saved(path), device)


def fp32_fma_peak(k: KernelProfile) -> float | None:
    """The FP32 FMA peak that ncu reports for this GPU: FMA lanes per cycle x 2 x max clock."""
    lanes = k.get("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained")
    khz = k.get("device__attribute_max_gpu_frequency_khz") or k.get("device__attribute_clock_rate")
    return 2 * lanes * khz * 1e3 if lanes and khz else None


@dataclass
class Work:
    flops: dict[str, float]          # path -> FLOPs ("fp32", "tensor_bf16", ...)
    dram_bytes: float | None
    duration_s: float | None
    flops_counted: bool = True       # the report has FLOP counters (a basic section set has none)

    @property
    def total_flops(self) -> float:
        return sum(self.flops.values())

    @property
    def dominant(self) -> str | None:
        return max(self.flops, key=self.flops.get) if self.total_flops > 0 else None


def kernel_work(k: KernelProfile) -> Work:
    flops: dict[str, float] = {}
    counted = any(k.get(c) is not None for parts in SIMT_FLOPS.values() for c, _ in parts) or \
        any(k.get(c) is not None for counters in TENSOR_FLOPS.values() for c in counters)
    for path, parts in SIMT_FLOPS.items():
        vals = [(k.get(c), w) for c, w in parts]
        if any(v is not None for v, _ in vals):
            flops[path] = sum((v or 0) * w for v, w in vals)
    for path, counters in TENSOR_FLOPS.items():
        vals = [k.get(c) for c in counters]
        if any(v is not None for v in vals):
            flops[f"tensor_{path}"] = sum(v or 0 for v in vals)
    rd, wr = k.get("dram__bytes_read.sum"), k.get("dram__bytes_write.sum")
    dram = (rd or 0) + (wr or 0) if (rd is not None or wr is not None) else k.get("dram__bytes.sum")
    return Work(flops={p: v for p, v in flops.items() if v > 0}, dram_bytes=dram, duration_s=k.duration_s,
                flops_counted=counted)


@dataclass
class RooflinePoint:
    name: str
    duration_s: float | None
    flops: float
    dram_bytes: float | None
    intensity: float | None          # FLOP per DRAM byte (None: no DRAM traffic measured)
    flops_per_s: float
    dram_bytes_per_s: float
    path: str | None                 # dominant compute path
    roof: str                        # the compute roof it is held against
    roof_flops: float
    ridge: float                     # FLOP/byte where that roof meets the DRAM roof
    bound: str                       # "memory" | "compute" | "unknown" (no FLOP or no DRAM counters)
    attainable_flops: float
    pct_of_roof: float               # achieved / attainable (FLOP/s on the compute side, bytes/s below the ridge)


@dataclass
class RooflineModel:
    points: list[RooflinePoint]
    ceilings: Ceilings
    device: str | None = None
    path: str = ""
    extra_roofs: dict[str, Roof] = field(default_factory=dict)

    @property
    def ceilings_source(self) -> str:
        return self.ceilings.source

    def to_dict(self) -> dict:
        return {"schema": "perflab.roofline/1", "path": self.path, "device": self.device,
                "ceilings": {"source": self.ceilings.source,
                             "memory": {k: asdict(r) for k, r in self.ceilings.memory.items()},
                             "compute": {k: asdict(r) for k, r in {**self.ceilings.compute, **self.extra_roofs}.items()}},
                "kernels": [asdict(p) for p in self.points]}


def _roof_for(path: str | None, k: KernelProfile, ceilings: Ceilings) -> Roof:
    if path and path.startswith("tensor_"):
        return ceilings.compute.get(path[len("tensor_"):], ceilings.compute["bf16"])
    if path == "fp32" or path is None:
        peak = fp32_fma_peak(k)
        if peak:
            return Roof("FP32 FMA", peak, "ncu peak (FMA lanes x 2 x max clock)")
        return ceilings.compute["fp32"]
    if path == "fp16":
        peak = fp32_fma_peak(k)
        return Roof("FP16 FMA", 2 * peak, "ncu peak (packed half2)") if peak else ceilings.compute["fp32"]
    return ceilings.compute.get(path, ceilings.compute["fp32"])


def place(k: KernelProfile, ceilings: Ceilings) -> RooflinePoint:
    w = kernel_work(k)
    dur = w.duration_s or 0.0
    flops = w.total_flops
    roof = _roof_for(w.dominant, k, ceilings)
    bw = ceilings.dram.value
    ridge = roof.value / bw
    intensity = flops / w.dram_bytes if w.dram_bytes else None
    fps = flops / dur if dur else 0.0
    bps = (w.dram_bytes or 0.0) / dur if dur else 0.0
    if not w.flops_counted or w.dram_bytes is None:
        bound = "unknown"  # a missing counter is not zero work: the point cannot be placed
    else:
        bound = "memory" if (intensity is not None and intensity < ridge) or flops == 0 else "compute"
    attainable = min(roof.value, intensity * bw) if intensity is not None else roof.value
    if bound == "memory":
        pct = 100 * bps / bw if bw else 0.0
    elif bound == "compute":
        pct = 100 * fps / attainable if attainable else 0.0
    else:
        pct = 0.0
    return RooflinePoint(name=k.name, duration_s=w.duration_s, flops=flops, dram_bytes=w.dram_bytes,
                         intensity=intensity, flops_per_s=fps, dram_bytes_per_s=bps, path=w.dominant,
                         roof=f"{roof.name} ({roof.source})", roof_flops=roof.value, ridge=ridge, bound=bound,
                         attainable_flops=attainable, pct_of_roof=round(pct, 1))


def roofline(profile: NcuProfile, ceilings: Ceilings) -> RooflineModel:
    points = [place(k, ceilings) for k in profile.kernels]
    extra = {}
    peaks = [p for p in (fp32_fma_peak(k) for k in profile.kernels) if p]
    if peaks:
        extra["fp32_fma"] = Roof("FP32 FMA", max(peaks), "ncu peak (FMA lanes x 2 x max clock)")
    return RooflineModel(points=points, ceilings=ceilings, device=profile.device, path=profile.path, extra_roofs=extra)


def roofline_for_report(path: str | Path, ceilings_path: Path | None = None) -> RooflineModel:
    from perflab.trace.ncu import load

    profile = load(path)
    return roofline(profile, load_ceilings(ceilings_path, profile.device))


def roofline_for_reports(paths: list[str | Path], ceilings_path: Path | None = None) -> RooflineModel:
    """Several reports on one roofline (the first one's device picks the ceilings); with more than one
    report each kernel is labelled with its report's name."""
    models = [roofline_for_report(p, ceilings_path) for p in paths]
    if len(models) == 1:
        return models[0]
    first = models[0]
    points = []
    for path, m in zip(paths, models):
        stem = Path(path).name.split(".")[0]
        points += [replace(pt, name=f"{stem}: {pt.name}") for pt in m.points]
    extra = {}
    for m in models:
        for k, r in m.extra_roofs.items():
            if k not in extra or r.value > extra[k].value:
                extra[k] = r
    return RooflineModel(points=points, ceilings=first.ceilings, device=first.device,
                         path=", ".join(str(p) for p in paths), extra_roofs=extra)
