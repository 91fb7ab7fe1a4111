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
