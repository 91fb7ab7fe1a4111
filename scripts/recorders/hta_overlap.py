"""Record HTA 0.5.0's comm/comp overlap on the multi-rank peer traces as a test fixture (no GPU).

    record.py hta-overlap     # writes tests/data/kineto/hta_comm_expected.json

HTA runs in .bench/hta-venv (benchmarks/doctor_vs_hta.py creates it); its numbers are stored so CI
compares perflab.analysis.multigpu.collectives.hta_comm_comp_overlap against HTA without installing HTA.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from doctor_vs_hta import HTA_PY, PEER, ensure_hta  # noqa: E402

HTA_OVERLAP = r'''
import json, logging, os, sys, tempfile, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
for p in sys.argv[1:]:
    os.symlink(os.path.abspath(p), os.path.join(d, os.path.basename(p)))
ta = TraceAnalysis(trace_dir=d)
df = ta.get_comm_comp_overlap(visualize=False)
print(json.dumps(df.to_dict("records"), default=str))
'''

CASES = {
    "trace_filter_rank_0_1": ["trace_filter__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz"],
    "nccl_parser_config": ["nccl_parser_config__nccl_data.json.gz"],
}


def main(argv: list[str], prog: str = "record.py hta-overlap") -> int:
    if argv:
        print(f"usage: {prog}\n\n{__doc__}")
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    ensure_hta()
    out = {"hta": "holistictraceanalysis==0.5.0", "function": "TraceAnalysis.get_comm_comp_overlap", "cases": {}}
    for key, files in CASES.items():
        res = subprocess.run([str(HTA_PY), "-c", HTA_OVERLAP, *(str(PEER / f) for f in files)],
                             capture_output=True, text=True, check=True)
        rows = json.loads(res.stdout.strip().splitlines()[-1])
        out["cases"][key] = {"files": files, "overlap": [
            {"rank": int(r["rank"]), "comp_comm_overlap_pctg": float(r["comp_comm_overlap_pctg"])} for r in rows]}
        print(key, out["cases"][key]["overlap"])
    dest = ROOT / "tests" / "data" / "kineto" / "hta_comm_expected.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", dest)
    return 0
