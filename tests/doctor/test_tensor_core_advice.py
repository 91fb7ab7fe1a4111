"""Advice only for what the GPU in the trace has: TF32 and bf16 tensor cores from compute capability 8.0, fp16 alone
on Volta and Turing (7.x), none before Volta; the compute capability comes from the trace's device properties."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflab.doctor import diagnose
from perflab.trace.builders import synthetic

V100 = Path(__file__).resolve().parents[3] / "shared" / "real-traces" / "kineto_resnet50_v100_nw4.json.gz"
ADVISES_TF32_OR_BF16 = ("allow_tf32 = True", "set_float32_matmul_precision", "bf16/fp16", "in bf16")


def _fp32_gemms_on(tmp_path: Path, name: str, major: int, minor: int = 0) -> Path:
    doc = synthetic.fp32_gemms(steps=5).to_dict()
    doc["deviceProperties"] = [{"id": 0, "name": name, "computeMajor": major, "computeMinor": minor, "numSms": 80}]
    return synthetic.write_document(tmp_path / f"{major}{minor}.json", doc)


def _tensor_findings(report) -> list:
    return [f for f in report.findings if f.id == "no-tensor-cores"]


@pytest.mark.skipif(not V100.exists(), reason="../shared/real-traces is not here")
def test_a_v100_trace_gets_no_tf32_or_bf16_advice():
    report = diagnose(V100)
    assert report.source["device"].startswith("Tesla V100")
    tensor = _tensor_findings(report)
    assert tensor and "torch.autocast('cuda', dtype=torch.float16)" in tensor[0].fix
    for f in report.findings:
        assert not any(w in f.fix for w in ADVISES_TF32_OR_BF16), (f.id, f.fix)
        assert not any(w in f.summary for w in ("bf16", "tf32")), (f.id, f.summary)
    ops = report.analyses["speed_of_light"]["ops"]
    assert ops and not [o for o in ops if o["path"] in ("tf32", "bf16")]  # fp32 math there runs on the SIMT units


def test_the_advice_follows_the_compute_capability(tmp_path):
    volta = _tensor_findings(diagnose(_fp32_gemms_on(tmp_path, "Tesla V100-SXM2-16GB", 7)))
    turing = _tensor_findings(diagnose(_fp32_gemms_on(tmp_path, "Tesla T4", 7, 5)))
    for found, cc in ((volta, "7.0"), (turing, "7.5")):
        assert found and f"compute capability {cc}" in found[0].fix and "float16" in found[0].fix
        assert not any(w in found[0].fix for w in ADVISES_TF32_OR_BF16)
    assert not _tensor_findings(diagnose(_fp32_gemms_on(tmp_path, "Tesla P100-PCIE-16GB", 6)))  # no tensor cores
    ampere = _tensor_findings(diagnose(_fp32_gemms_on(tmp_path, "NVIDIA A100-SXM4-80GB", 8)))
    assert ampere and "allow_tf32 = True" in ampere[0].fix
    json.dumps([f.to_dict() for f in volta])  # plain data


def _fp32_products(tmp_path: Path, m: int, kernel: str, kernel_us: float) -> Path:
    """A GPU-bound step of fp32 products [m, 4096] x [4096, 4096] with their shapes recorded."""
    b = synthetic.TraceBuilder()
    for n in range(4):
        with b.step(n):
            for _ in range(20):
                b.op("aten::addmm", [(kernel, kernel_us, [512, 1, 1], [128, 1, 1])], cpu_us=8.0,
                     dims=[[4096], [m, 4096], [4096, 4096], [], []], dtypes=["float", "float", "float", "Scalar", "Scalar"])
    b.synchronize()
    return b.write(tmp_path / f"m{m}.json")


def test_tensor_cores_are_advised_for_fp32_matrix_math_not_for_a_matrix_vector_product(tmp_path):
    # [2048, 4096] x [4096, 4096]: 68.7 GFLOP on the FMA pipes, paced by them; tensor cores speed it up
    gemm = _tensor_findings(diagnose(_fp32_products(tmp_path, 2048, "ampere_sgemm_128x64_tn", 1400.0)))
    assert gemm and gemm[0].severity == "high"
    # [1, 4096] x [4096, 4096]: 64 MiB of weights for 34 MFLOP, paced by DRAM whatever pipe does the math
    gemv = diagnose(_fp32_products(tmp_path, 1, "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, "
                                                "4, 4, false, false>", 40.0))
    assert not _tensor_findings(gemv), [(f.id, f.summary) for f in gemv.findings]
