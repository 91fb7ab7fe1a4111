"""Issue 27 on several ranks: the multi-GPU fix check (evidence/rank_worker.py run_check) runs guard.time_guarded on
every rank under torchrun (gloo, 2 CPU processes): fresh inputs before every timed repetition, outputs compared
after every one, each decision agreed by all ranks (RankPairing), so one rank's mismatch stops every rank."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, checker, guard, runner
from perflab.puzzles.evidence import multirank as distributed

GLOO_ABORT = "terminate called without an active exception"


def check_on_two_ranks(pid: str, fix: Path, out: Path, **kw):
    """distributed.check on 2 gloo ranks; run again only on Gloo's teardown abort (torch's, not ours: a CPU rank
    aborts at exit after its result is written, seen in CI and in tests/multigpu/test_scale_cli.py)."""
    p = catalog.get(pid)
    for attempt in range(3):
        folder = out / f"try{attempt}"
        try:
            return distributed.check(p, fix, folder, device="cpu", **kw)
        except PerflabError:
            log = folder / ".check-job" / "torchrun.check.log"
            if attempt == 2 or GLOO_ABORT not in (log.read_text(errors="replace") if log.is_file() else ""):
                raise
    raise AssertionError("unreachable")


def solution_with_step(tmp_path: Path, pid: str, new_step: str) -> Path:
    """The puzzle's solution with its step renamed `honest_step` and `new_step` (source) appended."""
    src = catalog.get(pid).file("solution").read_text(encoding="utf-8")
    assert src.count("\ndef step(state") == 1
    fix = tmp_path / "fix.py"
    fix.write_text(src.replace("\ndef step(state", "\ndef honest_step(state") + "\n\n" + new_step, encoding="utf-8")
    return fix


CACHES_ITS_FIRST_OUTPUT = '''
def step(state):
    """Returns its first result ever after: right on the inputs it was first given, stale after a refill."""
    if "cached" not in state:
        state["cached"] = honest_step(state).clone()
    return state["cached"]
'''

WRONG_ON_THE_THIRD_BATCH = '''
def step(state):
    """Honest until the third new batch of inputs: then rank 1 returns a wrong mean gradient."""
    import torch

    seen = state.setdefault("seen", [state["x"].clone(), 0])
    if not torch.equal(seen[0], state["x"]):
        seen[0].copy_(state["x"])
        seen[1] += 1
    out = honest_step(state)
    if state["rank"] == 1 and seen[1] >= 3:
        out.mul_(1.5)
    return out
'''


def test_a_fix_that_caches_its_first_output_is_refused_on_two_ranks(tmp_path):
    """It passes the first steps' comparison (the inputs have not changed yet); the first refill unmasks it."""
    pytest.importorskip("torch")
    fix = solution_with_step(tmp_path, "exposed-allreduce", CACHES_ITS_FIRST_OUTPUT)
    r = check_on_two_ranks("exposed-allreduce", fix, tmp_path / "check", seed=5, reps=4)
    assert not r.correctness.ok and not r.passed and r.speed is None
    msg = r.correctness.message
    assert msg.startswith("timed repetition 1: rank 0: out: Tensor-likes are not close!"), msg
    assert "atol=1e-09" in msg
    assert not list((tmp_path / "check").glob("try*/mine.ranks/*.json.gz"))   # refused before re-profiling


def test_a_mismatch_on_one_rank_at_a_later_repetition_stops_every_rank(tmp_path):
    """Only rank 1 goes wrong, and only from the third batch of fresh inputs: the check names that repetition and
    that rank, and both ranks stop there together (no rank left waiting in a collective: the job returns)."""
    pytest.importorskip("torch")
    fix = solution_with_step(tmp_path, "exposed-allreduce", WRONG_ON_THE_THIRD_BATCH)
    r = check_on_two_ranks("exposed-allreduce", fix, tmp_path / "check", seed=9, reps=6)
    assert not r.correctness.ok and r.speed is None
    assert r.correctness.message.startswith("timed repetition 3: rank 1: out: Tensor-likes are not close!"), \
        r.correctness.message


def test_every_repetition_gets_fresh_inputs_of_its_own_rank(tmp_path):
    """An honest fix that notes the batch each of its steps sees: it passes (every comparison held, so the reference
    saw the same batches), each timed repetition brought a new batch, and the ranks' batches differ (70's refill
    draws each rank's own rows, as its setup does)."""
    pytest.importorskip("torch")
    spy = f"SPY = {str(tmp_path)!r}\n" + '''
def step(state):
    with open(f"{SPY}/rank{state['rank']}.txt", "a") as fh:
        fh.write(f"{float(state['x'].float().sum())!r}\\n")
    return honest_step(state)
'''
    fix = solution_with_step(tmp_path, "exposed-allreduce", spy)
    reps = 3
    r = check_on_two_ranks("exposed-allreduce", fix, tmp_path / "check", seed=4, reps=reps)
    assert r.correctness.ok, r.correctness.message
    seen = [list(dict.fromkeys((tmp_path / f"rank{rank}.txt").read_text().split())) for rank in (0, 1)]
    assert all(len(batches) >= reps + 2 for batches in seen), seen    # setup's, then one per repetition (+ warm-up)
    assert not set(seen[0]) & set(seen[1])


@pytest.mark.parametrize("pid", ["straggler", "tp-scaling-knee", "nccl-timeline"])
def test_the_other_solutions_pass_with_fresh_inputs_on_two_ranks(pid, tmp_path):
    """70 and 74-77: tests/multigpu/test_multigpu_puzzles.py and tests/multigpu/test_parallelism_puzzles.py (the same path)."""
    pytest.importorskip("torch")
    p = catalog.get(pid)
    r = check_on_two_ranks(pid, p.file("solution"), tmp_path / "check", seed=7, reps=2)
    assert r.correctness.ok, r.correctness.message
    assert r.speed is not None and r.speed.n == 2


def test_exposed_allreduce_tolerance_sees_a_stale_gradient_and_passes_the_solution():
    """Mean gradients of ~1e-3 (CPU smoke size) against bf16's default atol of 1e-2 let any stale result through;
    the puzzle's own atol does not, for any seed, while the solution matches (one rank: the same arithmetic)."""
    pytest.importorskip("torch")
    p = catalog.get("exposed-allreduce")
    default = checker.DTYPE_TOLERANCES["bfloat16"][1]
    assert p.check.atol is not None and p.check.atol < default
    slow, sol = runner.load_module(p.file("slow")), runner.load_module(p.file("solution"))
    loose = dataclasses.replace(p, check=dataclasses.replace(p.check, atol=None))
    stale_passed_loose = 0
    for seed in range(8):
        state, fixed = slow.setup("cpu", seed), sol.setup("cpu", seed)
        first = checker.snapshot(slow.step(state))
        assert checker.compare(first, checker.snapshot(sol.step(fixed)), p) == ""
        guard.refill(slow, state, ["x"], seed + 100)
        fresh = checker.snapshot(slow.step(state))
        assert checker.compare(fresh, first, p) != "", f"seed {seed}: a stale gradient passed"
        stale_passed_loose += checker.compare(fresh, first, loose) == ""
    assert stale_passed_loose, "the default atol was expected to let some stale gradient through"
