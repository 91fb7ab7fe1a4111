"""The puzzles CLI: output, exit codes (0 ok, 1 wrong/failed, 2 bad input), and torch-free commands."""
import io
import json
import sys

import pytest

from conftest import FAKE_ID, GPU_NAME, PUZZLE_TOML, make_puzzle, run_cli_subprocess, shipped_puzzles
from perflab.__main__ import main
from perflab.puzzles.engine import runner

RIGHT = ["-a", "cause=host-sync", "-a", "syncs=2", "-a", "kernel=gemm_bf16", "-a", "kernels=41", "-a", "busy=68",
         "-a", "pageable=2", "-a", "h2d=2097152", "-a", "speedup=2.5", "-a", "fixed=3"]


@pytest.fixture
def cli(fake_catalog, capsys):
    def run(*args, stdin=None):
        rc = main(list(args))
        out, err = capsys.readouterr()
        return rc, out, err
    return run


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(runner, "cuda_available", lambda: False)


@pytest.fixture
def gpu_puzzle(tmp_path, monkeypatch, fake_catalog):
    """A second synthetic puzzle that needs a GPU."""
    root = tmp_path / "gpu-cat"
    make_puzzle(root, "zz-gpu-only", toml=PUZZLE_TOML.format(pid="zz-gpu-only").replace("gpu = false", "gpu = true"))
    monkeypatch.setenv("PERFLAB_CATALOG", f"{fake_catalog}:{root}")
    return "zz-gpu-only"


def test_list_and_tag_filter(cli):
    rc, out, _ = cli("list")
    assert rc == 0 and FAKE_ID in out and "host-sync" in out and "no (CPU ok)" in out
    rc, out, _ = cli("list", "--tag", "bank-conflicts")
    assert rc == 0 and FAKE_ID not in out
    rc, out, _ = cli("list", "--json")
    row = [p for p in json.loads(out)["puzzles"] if p["id"] == FAKE_ID][0]
    assert row["gpu"] is False and row["status"] == "" and row["taxonomy"][0] == "host-sync" and row["recorded"]
    assert cli("list", "--tag", "nonsense")[0] == 2


def test_list_fits_a_narrow_terminal(cli, monkeypatch):
    rc, wide, _ = cli("list")
    assert "a step that waits on the host" in wide and "host-sync, pageable-memcpy" in wide
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _ = cli("list")
    lines = out.splitlines()
    assert rc == 0 and all(len(line) <= 80 for line in lines)
    assert "a step that waits on the host" not in out
    row = next(line for line in lines if FAKE_ID in line)   # one line per puzzle, every column intact
    assert row.split()[2:] == ["host-sync", "+1", "CPU", "ok", "-"]


def test_an_unrecorded_puzzle_says_so(cli, tmp_path, monkeypatch, fake_catalog):
    root = tmp_path / "unrec"
    make_puzzle(root, "zz-unrecorded", toml=PUZZLE_TOML.format(pid="zz-unrecorded").replace("gpu = false", "gpu = true"),
                artifacts=False)
    monkeypatch.setenv("PERFLAB_CATALOG", f"{fake_catalog}:{root}")
    rc, out, _ = cli("show", "zz-unrecorded")
    assert rc == 0 and "not recorded yet, so nothing to replay" in out
    assert "replays the recorded evidence" in cli("show", FAKE_ID)[1]
    monkeypatch.setenv("COLUMNS", "80")
    assert "GPU, unrecorded" in next(line for line in cli("list")[1].splitlines() if "zz-unrecorded" in line)


def test_show(cli):
    rc, out, _ = cli("show", FAKE_ID)
    assert rc == 0
    for text in ("Synthetic: a step that waits on the host", "Why is the GPU idle?", "cudaStreamSynchronize",
                 "torch-profiler", "syncs (number)"):
        assert text in out


def test_unknown_puzzle_exits_2(cli):
    rc, _, err = cli("show", "zz-nope")
    assert rc == 2 and err.startswith("perflab: error: no puzzle 'zz-nope'")


def test_run_replay_is_labelled(cli):
    rc, out, _ = cli("run", FAKE_ID, "--replay")
    assert rc == 0
    assert f"REPLAY of a recording made on {GPU_NAME} on 2026-11-22" in out
    assert "gemm_bf16_kernel" in out and "cudaStreamSynchronize ×6" in out and "speed-up 2.50×" in out
    rc, out, _ = cli("run", FAKE_ID, "--replay", "--variant", "solution", "--json")
    doc = json.loads(out)
    assert doc["mode"] == "replay" and doc["summary"]["syncs"]["per_step"] == 0 and doc["manifest"]["gpu"] == GPU_NAME
    assert cli("run", FAKE_ID, "--replay", "--variant", "mine")[0] == 2
    assert cli("run", FAKE_ID, "--variant", "fast")[0] == 2


def test_run_without_gpu_replays_a_gpu_puzzle(cli, gpu_puzzle, no_gpu):
    rc, out, _ = cli("run", gpu_puzzle)
    assert rc == 0 and "REPLAY of a recording made on" in out
    assert "torch sees no CUDA GPU; showing the shipped recording" in out


def test_run_live_on_cpu_for_a_cpu_capable_puzzle(cli, no_gpu, tmp_path):
    rc, out, _ = cli("run", FAKE_ID, "--steps", "2")
    assert rc == 0 and "LIVE run on the CPU" in out
    runs = list((tmp_path / "work" / FAKE_ID / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "slow.trace.json.gz").is_file()


def test_check_without_gpu_exits_2(cli, gpu_puzzle, no_gpu):
    rc, _, err = cli("check", gpu_puzzle)
    assert rc == 2 and "needs a CUDA GPU" in err


def test_start_then_check_on_cpu(cli, no_gpu, tmp_path):
    rc, _, _ = cli("check", FAKE_ID)
    assert rc == 2  # no fix yet
    rc, out, _ = cli("start", FAKE_ID)
    fix = tmp_path / "work" / FAKE_ID / "fix.py"
    assert rc == 0 and "wrote" in out and fix.is_file()
    rc, out, _ = cli("start", FAKE_ID)
    assert rc == 0 and "already exists" in out
    rc, out, _ = cli("check", FAKE_ID)  # the starter as it is: correct, not faster
    assert rc == 1 and "✓ correct" in out and "FAIL" in out
    solution = tmp_path / "catalog" / f"99-{FAKE_ID}" / "solution.py"
    rc, out, _ = cli("check", FAKE_ID, "--fix", str(solution), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["passed"] and doc["speed"]["ci_low"] >= 2.0
    saved = sorted((tmp_path / "work" / FAKE_ID / "runs").glob("*-check/check.json"))[-1]
    assert json.loads(saved.read_text())["slow"]["samples_ms"] == doc["slow"]["samples_ms"]
    rc, out, _ = cli("progress")
    assert "passed" in out


def test_answer_right_wrong_and_bad_input(cli):
    rc, out, _ = cli("answer", FAKE_ID, *RIGHT)
    assert rc == 0 and "9/9 right" in out
    rc, out, _ = cli("answer", FAKE_ID, "-a", "cause=launch-overhead", "-a", "syncs=2")
    assert rc == 1 and "✗ cause: launch-overhead is not what the evidence says" in out and "1/2 right" in out
    assert "look at perflab doctor on the recorded slow trace: top finding, severity" in out
    assert "host-sync" not in out  # where to look, not the value (perflab answer --reveal shows it)
    rc, _, err = cli("answer", FAKE_ID, "-a", "nope=1")
    assert rc == 2 and "no question 'nope'" in err
    rc, _, err = cli("answer", FAKE_ID, "-a", "cause=slowness")
    assert rc == 2 and "not a taxonomy id" in err
    assert cli("answer", FAKE_ID, "-a", "syncs")[0] == 2
    assert cli("answer", "zz-nope", "-a", "syncs=2")[0] == 2
    rc, out, _ = cli("list")
    assert "diagnosed" in out


def test_answer_interactively(cli, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("slowness\nhost-sync\n" + "\n".join(
        ["2", "gemm", "41", "60", "2", "2097152", "2.5", "3"]) + "\n"))
    rc, out, _ = cli("answer", FAKE_ID)
    assert rc == 0 and "'slowness' is not a taxonomy id" in out and "9/9 right" in out
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    rc, _, err = cli("answer", FAKE_ID)
    assert rc == 2 and "--answer KEY=VALUE" in err


def test_hints_in_order(cli):
    outs = [cli("hint", FAKE_ID)[1] for _ in range(4)]
    assert outs[0].startswith("hint 1/3: look at the timeline")
    assert outs[1].startswith("hint 2/3") and outs[2].startswith("hint 3/3") and "last hint" in outs[3]
    assert cli("hint", FAKE_ID, "1")[1].startswith("hint 1/3")
    assert cli("hint", FAKE_ID, "9")[0] == 2
    assert "3/3" in cli("progress")[1]


def test_solution_asks_first(cli, monkeypatch):
    for answer in ("n\n", ""):  # no, and end of input
        monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
        rc, out, _ = cli("solution", FAKE_ID)
        assert rc == 0 and "not shown" in out and "def step" not in out
    rc, out, _ = cli("solution", FAKE_ID, "--yes")
    assert rc == 0 and "state[\"w\"].sum(0)" in out


def test_progress_reset(cli, monkeypatch):
    cli("hint", FAKE_ID)
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    assert "kept" in cli("progress", "--reset")[1]
    assert "1/3" in cli("progress")[1]
    assert "erased" in cli("progress", "--reset", "--yes")[1]
    assert "0/3" in cli("progress")[1]


def test_commands_work_without_torch(fake_catalog):
    commands = [["list"], ["show", FAKE_ID], ["hint", FAKE_ID], ["progress"], ["answer", FAKE_ID, *RIGHT],
                ["answer", FAKE_ID, "-a", "syncs=7"], ["answer", FAKE_ID, "-a", "nope=1"]]
    marks, out, err = run_cli_subprocess(commands)
    assert [rc for rc, _ in marks] == [0, 0, 0, 0, 0, 1, 2], err
    assert [tried for _, tried in marks] == [0] * len(commands), "torch was imported"
    assert "Traceback" not in err and "9/9 right" in out and "hint 1/3" in out


def test_run_without_torch_replays_and_check_says_why(fake_catalog):
    marks, out, err = run_cli_subprocess([["run", FAKE_ID], ["check", FAKE_ID]])
    assert [rc for rc, _ in marks] == [0, 2], err
    assert "REPLAY of a recording made on" in out and "torch is not installed; showing the shipped recording" in out
    assert "perflab: error: perflab check zz-synthetic-sync needs torch (torch is not installed)" in err


RECORDED = [p.id for p in shipped_puzzles() if (p.artifacts / "slow.trace.json.gz").is_file()]


@pytest.mark.skipif(not RECORDED, reason="no shipped puzzle has recorded artifacts yet")
def test_a_shipped_puzzle_replays_without_torch():
    pid = RECORDED[0]
    marks, out, err = run_cli_subprocess([["list"], ["show", pid], ["run", pid, "--variant", "solution"]],
                                         shipped=True)
    assert [rc for rc, _ in marks] == [0, 0, 0], err
    assert marks[1][1] == 0, "list/show tried to import torch"
    assert "REPLAY of a recording made on" in out and "torch is not installed" in out
