"""benchmarks/investigate_one_pass.py stays runnable without a GPU: a CPU program alone, walked the earlier way and
today's, the table and results.json written (level 1 only: no kernel to profile here; the device run measures the
rest, scripts/gpu_benchmark_investigate_and_ranks.sh)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_walks_a_program_both_ways_and_compares_the_verdicts(tmp_path):
    app = tmp_path / "linear.py"
    app.write_text("import torch\nm = torch.nn.Linear(32, 32)\nfor _ in range(20):\n    m(torch.randn(4, 32))\n")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "investigate_one_pass.py"), "--out", str(tmp_path / "b"),
                           "--programs", "--program", f"cpu-linear={app}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads((tmp_path / "b" / "results.json").read_text())["programs"]["cpu-linear"]
    assert r["alone_rc"] == 0 and r["alone_s"] > 0
    for way in ("before", "after"):
        assert r[way]["rc"] == 0 and r[way]["levels"]["1"]["status"] == "done" and r[way]["levels"]["1"]["program_s"] > 0
    assert r["same_verdicts"] and r["after"]["verdicts"]["level2"][0] == "not-needed"
    assert "cpu-linear" in proc.stdout and "same" in proc.stdout
    assert (tmp_path / "b" / "walks" / "cpu-linear-before" / "investigation.json").exists()
