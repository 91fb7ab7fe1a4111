"""perflab bench --collectives: busbw sweeps of all_reduce, all_gather, reduce_scatter and all_to_all with the
nccl-tests formulas, on the CPU with gloo; the saved file is what comm-below-roof reads."""
from __future__ import annotations

import json

import pytest

from perflab.analysis.work.saved_ceilings import sweeps_of
from perflab.errors import PerflabError
from perflab.toolkit.bench import collectives as C

torch = pytest.importorskip("torch")


def test_kinds_are_checked():
    assert C.parse_kinds("all_reduce, all-gather") == ["all_reduce", "all_gather"]
    with pytest.raises(PerflabError, match="unknown collective broadcastx"):
        C.parse_kinds("all_reduce,broadcastx")


def test_sweeps_in_a_one_rank_gloo_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        res = C.measure(C.KINDS, [1024, 8192], warmup=1, target_s=0.002)
    finally:
        dist.destroy_process_group()
    assert list(res["sweeps"]) == list(C.KINDS) and res["world_size"] == 1
    for kind, sweep in res["sweeps"].items():
        assert [r["bytes"] for r in sweep["rows"]] == [1024, 8192]
        for r in sweep["rows"]:
            assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3)
            assert r["busbw_gbps"] == 0.0  # one rank: (n-1)/n = 0 for every kind here


def test_cli_two_ranks_saves_sweeps_the_doctor_can_read(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # gloo processes even where a GPU exists
    from perflab.__main__ import main

    out, fig = tmp_path / "coll.json", tmp_path / "coll.png"
    code = main(["bench", "--collectives", "all_reduce,all_to_all", "--gpus", "2", "--min-bytes", "4096",
                 "--max-bytes", "16384", "--out", str(out), "--plot", str(fig)])
    assert code in (0, None)
    doc = json.loads(out.read_text())
    assert doc["schema"] == "perflab.collectives/1" and doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert "topology" in doc and doc["manifest"]["device"] == "cpu"
    ar, a2a = doc["sweeps"]["all_reduce"]["rows"], doc["sweeps"]["all_to_all"]["rows"]
    assert [r["bytes"] for r in ar] == [4096, 16384]
    for r in ar:  # nccl-tests: all_reduce 2(n-1)/n = 1 for 2 ranks, all_to_all (n-1)/n = 1/2
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"])
    for r in a2a:
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] / 2)
    assert fig.stat().st_size > 1000
    assert [(s["kind"], s["world_size"], len(s["rows"])) for s in sweeps_of(doc)] == [
        ("all_reduce", 2, 2), ("all_to_all", 2, 2)]
    assert main(["bench", "--collectives", "all_reduce", "--gpus", "2", "--out", str(out)]) == 2  # no --force
