"""benchmarks/multirank_workers.py stays runnable here: two tiny jobs (one three times the other) read by one and two
workers of a real local Dask cluster (fresh clusters, then clusters started before the run), the same findings at both
counts and both sizes, the planted straggler found, results.json written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_worker_ladder_runs_on_a_real_local_cluster(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "multirank_workers.py"), "--out", str(tmp_path / "s"),
                           "--ranks", "8", "--mb", "0.3", "0.9", "--workers", "1", "2", "--phases", "2", "--long-lived"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads((tmp_path / "s" / "results.json").read_text())
    small, large = r["jobs"]
    for job in (small, large):
        assert [run["workers"] for run in job["runs"]] == [1, 2] and all(run["rc"] == 0 for run in job["runs"])
        assert all(len(run["worker_mb"]) == run["workers"] for run in job["runs"])   # each worker process was seen
    assert large["layers_per_step"] > 2 * small["layers_per_step"]
    # each count again on a cluster started before the run (perflab doctor --scheduler): its start timed apart
    assert [k["workers"] for k in large["long_lived"]] == [1, 2]
    assert all(k["rc"] == 0 and k["cluster_start_s"] > 0 and k["straggler"] == 7 for k in large["long_lived"])
    # the straggle is a share of the step: the larger job is the same workload, its findings the same
    assert r["same_findings_every_worker_count"] and r["same_findings_every_size"] and r["straggler_found_every_size"]
    job = large
    assert set(job["phases"]) >= {"start", "map", "merge", "close", "workers_cpu"}
