"""Memory snapshots on a real GPU (run on the device: python3 -m pytest -m gpu tests/gpu/test_memory_gpu.py).

A snapshot dumped by torch (the pickle) is read by the restricted reader, converted to JSON with the
same numbers, and the memory doctor sees CUDA graph private pools exactly as torch reports them.
"""
import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _capture_graphs(n, pool=None):
    graphs = []
    x = torch.randn(1024, 1024, device="cuda")
    (x @ x).relu() @ x  # warm-up: cuBLAS initializes outside any capture
    torch.cuda.synchronize()
    for _ in range(n):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            y = (x @ x).relu() @ x  # 4 MB temporaries inside the capture
        graphs.append((g, y))
    return graphs


def test_real_snapshot_pools_and_json_roundtrip(tmp_path):
    from perflab.analysis.gpu_memory.memory import private_pools, totals
    from perflab.doctor.memory import diagnose_memory
    from perflab.trace import sniff
    from perflab.trace.snapshot import convert, load

    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=2000, stacks="python")
    try:
        graphs = _capture_graphs(4)
        torch.cuda.synchronize()
        pickle_path = tmp_path / "snap.pickle"
        torch.cuda.memory._dump_snapshot(str(pickle_path))
        raw = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    assert sniff.sniff(pickle_path) == sniff.MEMORY
    snap = load(pickle_path)
    expected_pools = {tuple(s["segment_pool_id"]) for s in raw["segments"]} - {(0, 0)}
    assert private_pools(snap)["count"] == len(expected_pools) >= 4
    assert totals(snap)["reserved_mb"] * 2**20 == pytest.approx(sum(s["total_size"] for s in raw["segments"]), abs=1)
    out = convert(pickle_path, tmp_path / "snap.json.gz")
    assert sniff.sniff(out) == sniff.MEMORY
    again = load(out)
    assert totals(again) == totals(snap)
    assert any(e.frames for e in again.traces[0]), "python stacks recorded"
    report = diagnose_memory(out)
    assert report.to_dict()["analyses"]["memory"]["device"]["private_pools"]["count"] == len(expected_pools)
    del graphs
