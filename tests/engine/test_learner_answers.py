"""The puzzles as a learner meets them: a wrong answer points at the evidence without giving the value and
lets them try again; --reveal shows it and progress records that; where a profiled and a timed number
differ, the output says which is which."""
from __future__ import annotations

import io
import json
import sys

import pytest

from conftest import FAKE_ID, cli_run


@pytest.fixture
def cli(fake_catalog, capsys):
    return lambda *args: cli_run(capsys, *args)


def test_a_wrong_answer_says_where_to_look_not_the_value(cli):
    rc, out, _ = cli("answer", FAKE_ID, "-a", "syncs=5", "-a", "kernel=elementwise")
    assert rc == 1 and "0/2 right" in out
    assert "✗ syncs: 5 is not what the evidence says" in out
    assert "look at the recorded slow trace: syncs, steps, per step, calls" in out
    assert "±1% of the computed value" in out  # how close counts, not what the value is
    assert "how: torch.profiler trace: the gaps after cudaStreamSynchronize" in out
    assert out.count("how:") == 1  # the puzzle's advice once, not under every wrong answer
    assert f"perflab answer {FAKE_ID} --reveal syncs" in out and f"perflab hint {FAKE_ID}" in out
    assert "2.00" not in out and "gemm_bf16" not in out  # neither value leaks
    status = json.loads(cli("progress", "--json")[1])
    mine = next(p for p in status["puzzles"] if p["id"] == FAKE_ID)
    assert mine["right"] == [] and mine["wrong_answers"] == 2 and mine["revealed"] == []


def test_interactively_a_wrong_answer_is_asked_again(cli, monkeypatch):
    # cause: wrong, then right; syncs: wrong, then skipped with Enter; the rest: end of input
    monkeypatch.setattr(sys, "stdin", io.StringIO("launch-overhead\nhost-sync\n7\n\n"))
    rc, out, err = cli("answer", FAKE_ID)
    assert rc == 1, err
    assert out.index("✗ cause: launch-overhead") < out.index("✓ cause: host-sync") < out.index("✗ syncs: 7")
    assert "(again, or Enter to skip)" in out and f"--reveal syncs" in out
    assert "1/9 right" in out
    status = json.loads(cli("progress", "--json")[1])
    mine = next(p for p in status["puzzles"] if p["id"] == FAKE_ID)
    assert mine["right"] == ["cause"] and mine["wrong_answers"] == 2


def test_reveal_shows_the_value_and_progress_records_it(cli):
    rc, out, _ = cli("answer", FAKE_ID, "--reveal", "syncs")
    assert rc == 0 and "revealed syncs: 2" in out and "evidence from the recorded slow trace" in out
    rc, out, _ = cli("answer", FAKE_ID, "-a", "syncs=2", "--reveal", "kernel")
    assert rc == 0 and "✓ syncs: 2" in out and "revealed kernel: void gemm_bf16_kernel<128, 128>" in out
    status = json.loads(cli("progress", "--json")[1])
    mine = next(p for p in status["puzzles"] if p["id"] == FAKE_ID)
    assert status["schema"] == "perflab.progress/1" and mine["revealed"] == ["kernel", "syncs"]
    assert mine["right"] == ["syncs"]
    assert "1/9 (2 revealed)" in cli("progress")[1]
    assert cli("answer", FAKE_ID, "--reveal", "nope")[0] == 2


def test_all_right_after_a_reveal_says_so(cli):
    from test_cli_puzzles import RIGHT

    cli("answer", FAKE_ID, "--reveal", "all")
    assert cli("answer", FAKE_ID, *RIGHT)[0] == 0
    status = json.loads(cli("progress", "--json")[1])
    assert next(p for p in status["puzzles"] if p["id"] == FAKE_ID)["status"] == "diagnosed (9 revealed)"
    assert "diagnosed (9 revealed)" in cli("list")[1]


def test_profiled_and_timed_numbers_are_named(cli, tmp_path):
    rc, out, _ = cli("run", FAKE_ID, "--replay")
    assert rc == 0 and "step time (median, profiled)" in out and "timed without the profiler:" in out
    assert "speed-up 2.50×" in out
    rc, out, _ = cli("answer", FAKE_ID, "-a", "speedup=2.5")
    assert "from the recorded timings without the profiler (measurements.json)" in out
    art = tmp_path / "catalog" / f"99-{FAKE_ID}" / "artifacts"
    rc, out, _ = cli("diff", art / "slow.trace.json.gz", art / "solution.trace.json.gz", "--json")
    doc = json.loads(out)
    assert " per profiled step (" in doc["verdict"] and any("`perflab check` times the fix without" in n
                                                            for n in doc["notes"])
    rc, out, _ = cli("diff", art / "slow.trace.json.gz", art / "solution.trace.json.gz")
    assert "step time (median, profiled)" in out
