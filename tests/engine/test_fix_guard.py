"""Issue 27: the fix checker cannot be fooled (puzzles/engine/guard.py), on the CPU with fake fixes."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from perflab.puzzles.engine import guard  # noqa: E402

PUZZLE = SimpleNamespace(check=SimpleNamespace(rtol=None, atol=None))


class Reference:
    INPUTS = ("x",)

    @staticmethod
    def setup(device, seed):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(256, generator=g), "w": torch.randn(256, generator=g)}

    @staticmethod
    def step(state):
        return state["x"] * state["w"] + 1.0


class Honest:
    setup = Reference.setup

    @staticmethod
    def step(state):
        return torch.addcmul(torch.ones_like(state["x"]), state["x"], state["w"])


class Caches:
    """Computes once, then returns the cached result: right on the first (checked) step only."""
    setup = Reference.setup

    @staticmethod
    def step(state):
        if "cached" not in state:
            state["cached"] = state["x"] * state["w"] + 1.0
        return state["cached"]


class SkipsLater:
    """Does the work on its first few calls, then skips it and returns an empty result."""
    setup = Reference.setup

    @staticmethod
    def step(state):
        state["n"] = state.get("n", 0) + 1
        return state["x"] * state["w"] + 1.0 if state["n"] <= 2 else torch.zeros_like(state["x"])


def _timed(fix, reps=4):
    return guard.time_guarded(Reference, Reference.setup("cpu", 1), fix, fix.setup("cpu", 1), "cpu", reps, PUZZLE,
                              seed=7)


def test_an_honest_fix_passes_every_repetition():
    t = _timed(Honest)
    assert t.mismatch == "" and len(t.slow) == len(t.fast) == 4


def test_a_fix_that_caches_its_result_fails_on_fresh_inputs():
    t = _timed(Caches)
    assert "timed repetition" in t.mismatch


@pytest.mark.parametrize("fix", [Caches, SkipsLater])
def test_what_the_first_steps_check_lets_through_the_timed_repetitions_catch(fix):
    from perflab.puzzles.engine import checker

    ref_state, fix_state = Reference.setup("cpu", 1), fix.setup("cpu", 1)
    first = checker.check_correctness(Reference, ref_state, fix, fix_state, "cpu", 1, PUZZLE)
    assert first.ok                       # right on the checked steps...
    t = guard.time_guarded(Reference, ref_state, fix, fix_state, "cpu", 3, PUZZLE, seed=7)
    assert t.mismatch.startswith("timed repetition")   # ...wrong once it is timed


def test_fresh_inputs_are_the_same_for_reference_and_fix_and_new_each_time():
    a, b = Reference.setup("cpu", 1), Reference.setup("cpu", 1)
    guard.refresh(a, ["x"], 3)
    guard.refresh(b, ["x"], 3)
    assert torch.equal(a["x"], b["x"])
    before = a["x"].clone()
    guard.refresh(a, ["x"], 4)
    assert not torch.equal(a["x"], before)
    assert torch.equal(a["w"], b["w"])      # weights are not inputs: a fix's setup may derive buffers from them


CEIL = SimpleNamespace(dram=2e12, compute={"fp32": 50e12, "bf16": 900e12}, peak={}, l2_bytes=50e6,
                       source="test ceilings")


def test_a_fix_faster_than_its_speed_of_light_is_refused_with_the_numbers():
    work = {"bytes": 4e9, "flops": 0.0, "path": ""}          # 4 GB at 2 TB/s: 2 ms at the very least
    why = guard.below_speed_of_light(0.5, work, CEIL)
    assert "faster than the speed of light" in why and "4 GB" in why and "measurement error" in why
    assert guard.below_speed_of_light(2.5, work, CEIL) == ""


def test_flops_count_against_the_fastest_roof_unless_the_work_names_its_path():
    work = {"bytes": 0.0, "flops": 9e12}                     # 10 ms at 900 TFLOP/s
    assert guard.floor_ms(work, CEIL)[0] == pytest.approx(10.0)
    assert guard.floor_ms({**work, "path": "fp32"}, CEIL)[0] == pytest.approx(180.0)


def test_bytes_that_fit_in_l2_judge_nothing():
    x = torch.zeros(1024)
    work = guard.work_of(Reference, {"x": x, "w": x}, x)      # 8 KB: could all stay in L2
    assert guard.floor_ms(work, CEIL)[0] == 0.0
    assert guard.below_speed_of_light(1e-9, work, CEIL) == ""


def test_a_workload_may_state_its_work():
    mod = SimpleNamespace(work=lambda state: {"flops": 1e12, "bytes": 1e9, "path": "bf16"})
    assert guard.work_of(mod, {}, None)["flops"] == 1e12


def test_a_catalog_workload_names_its_inputs_and_its_solution_keeps_up_with_fresh_ones():
    from perflab.puzzles.engine import runner
    from perflab.puzzles.engine.catalog import load_catalog

    p = {p.id: p for p in load_catalog()}["unfused-elementwise"]
    ref, fix = runner.load_module(p.file("slow")), runner.load_module(p.file("solution"))
    assert guard.input_keys(ref, ref.setup("cpu", 1)) == ["x", "residual"]
    t = guard.time_guarded(ref, ref.setup("cpu", 1), fix, fix.setup("cpu", 1), "cpu", 2, p, seed=3)
    assert t.mismatch == ""


class Pooled:
    """A step that advances its state (the next batch of a pool, like host-compute's), slower than its fix:
    each side repeats its step a different number of times per timed sample."""

    @staticmethod
    def setup(device, seed):
        g = torch.Generator().manual_seed(seed)
        return {"pool": [torch.randn(64, generator=g) for _ in range(5)], "w": torch.randn(64, generator=g), "i": 0}

    @staticmethod
    def step(state):
        import time

        time.sleep(2e-4)
        x = state["pool"][state["i"] % len(state["pool"])]
        state["i"] += 1
        return x * state["w"] + 1.0


class PooledFast:
    setup = Pooled.setup

    @staticmethod
    def step(state):
        x = state["pool"][state["i"] % len(state["pool"])]
        state["i"] += 1
        return torch.addcmul(torch.ones_like(x), x, state["w"])


class PooledCaches:
    setup = Pooled.setup

    @staticmethod
    def step(state):
        state["i"] += 1
        if "cached" not in state:
            state["cached"] = state["pool"][0] * state["w"] + 1.0
        return state["cached"]


def test_a_step_that_advances_its_state_is_compared_at_the_same_step_of_both():
    t = guard.time_guarded(Pooled, Pooled.setup("cpu", 1), PooledFast, PooledFast.setup("cpu", 1), "cpu", 3, PUZZLE,
                           seed=7)
    assert t.mismatch == "" and len(t.fast) == 3
    assert sorted(t.fast)[1] < sorted(t.slow)[1]    # the two sides did repeat their steps differently often
    caught = guard.time_guarded(Pooled, Pooled.setup("cpu", 1), PooledCaches, PooledCaches.setup("cpu", 1), "cpu", 3,
                                PUZZLE, seed=7)
    assert caught.mismatch.startswith("timed repetition")
