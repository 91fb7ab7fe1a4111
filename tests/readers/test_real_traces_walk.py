"""Every profile in ../shared/real-traces/ (other projects' GPUs, Kineto versions, vLLM, AMD, ncu, nsys, folders of
ranks), read by the doctor as a user would: no crash, no verdict that contradicts its evidence ("bound at 0 %"),
and every finding carries the numbers that decide it."""
import json
import re
from pathlib import Path

import pytest

from perflab.doctor import diagnose
from perflab.errors import PerflabError

REAL = Path(__file__).resolve().parents[3] / "shared" / "real-traces"
INPUTS = sorted(p for p in REAL.rglob("*") if not p.name.endswith((".md", ".txt", ".csv")) and "LICENSES" not in p.parts
                and (p.is_file() and p.parent.name != "param_dlrm_v100_8rank" or p.name == "param_dlrm_v100_8rank")) \
    if REAL.is_dir() else []
AT_ZERO = re.compile(r"(limit|bound|roof)[^.;]{0,60}\bat 0(\.0+)? ?%|\b0(\.0+)? ?% of (peak|DRAM)|under 0(\.0+)? ?%", re.I)


@pytest.mark.skipif(not INPUTS, reason="../shared/real-traces is not here")
@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_a_real_profile_reads_without_contradiction(path):
    try:
        rep = diagnose(path)
    except PerflabError as exc:                  # a one-line refusal is an answer; a traceback is not
        assert "\n" not in str(exc) and str(exc)
        return
    text = json.dumps(rep.to_dict(), default=str)
    assert not AT_ZERO.search(rep.verdict + " ".join(f.summary for f in rep.findings)), rep.verdict
    for f in rep.findings:
        numbers = [v for v in f.evidence.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        assert numbers or f.id == "healthy" and f.evidence, (f.id, f.evidence)
        assert f.summary and f.fix
    assert json.loads(text)["schema"].startswith("perflab.doctor/")
