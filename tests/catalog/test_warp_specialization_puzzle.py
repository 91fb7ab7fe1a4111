"""warp-specialization (catalog 69, issue 28) without a GPU.

The workload, the solution and the starter derived from the workload take their torch path at SMOKE_SIZE and
return C = A @ B^T (fp32 accumulation, bf16 out), so the files run and check anywhere; the solution changes
only the warp specialization of the K loop (and num_warps, which Triton 3.6 needs at 4 for it).

What the hints say about the Source page is checked on the recorded reports' stall samples per instruction
(ncu_report): the prototype's (proto/artifacts/warp_specialization) and, once recorded, the puzzle's own. The
recording itself (questions, planted finding first on slow and gone on the fix, the bar) is checked by
tests/catalog/test_puzzle_ncu.py and tests/catalog/test_puzzle_catalog.py; the kernels run on the device in
tests/gpu/test_kernel_puzzles_gpu.py and tests/gpu/test_warp_specialization_gpu.py.
"""
from __future__ import annotations

import collections
import gzip
import shutil
from pathlib import Path

import pytest

from test_ncu_fixtures import has_ncu_report
from perflab.puzzles.engine import catalog, replay, runner

from conftest import assert_inputs_follow_the_seed

torch = pytest.importorskip("torch")
PUZZLE = next(p for p in catalog.load_catalog([catalog.BUILTIN]) if p.id == "warp-specialization")
PROTO = Path(__file__).resolve().parents[2] / "proto" / "artifacts" / "warp_specialization"
RECORDED = replay.is_recorded(PUZZLE)
unrecorded = pytest.mark.skipif(not RECORDED, reason="unrecorded: `scripts/record.py puzzle warp-specialization` on an H100")


@pytest.mark.parametrize("variant", ["slow", "solution", "starter"])
def test_every_variant_computes_the_product_on_the_cpu(variant):
    module = runner.load_module(PUZZLE.file(variant))
    state = module.setup("cpu", 11)
    state["out"].fill_(float("nan"))
    got = module.step(state)
    size = module.SMOKE_SIZE
    assert state["a"].shape == (size["m"], size["k"]) and state["b"].shape == (size["n"], size["k"])
    expected = (state["a"].double() @ state["b"].double().T).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == (size["m"], size["n"])
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=1e-2)


def test_the_inputs_come_from_the_seed():
    assert_inputs_follow_the_seed(runner.load_module(PUZZLE.file("slow")))


def test_the_fix_keeps_the_tile_and_stages_and_specializes_the_warps():
    slow, fix = runner.load_module(PUZZLE.file("slow")), runner.load_module(PUZZLE.file("solution"))
    assert (slow.WARP_SPECIALIZE, slow.WARPS) == (False, 8) and (fix.WARP_SPECIALIZE, fix.WARPS) == (True, 4)
    assert (slow.BM, slow.BN, slow.BK, slow.STAGES) == (128, 256, 64, 3)
    src = PUZZLE.file("slow").read_text()
    assert "def matmul_tma(" in src and "warp_specialize=WS" in src and "make_tensor_descriptor" in src


def stall_samples_by_opcode(path: Path, tmp: Path) -> tuple[dict, int]:
    """{reason: Counter(opcode: samples)} and the total sample count, from a .ncu-rep(.gz)'s Source counters."""
    import ncu_report

    rep = tmp / "report.ncu-rep"
    with gzip.open(path, "rb") as src, rep.open("wb") as out:
        shutil.copyfileobj(src, out)
    action = ncu_report.load_report(str(rep)).range_by_idx(0).action_by_idx(0)
    opcodes: dict[int, str] = {}
    by = collections.defaultdict(collections.Counter)
    for reason in ("barrier", "long_scoreboard"):
        m = action.metric_by_name(f"smsp__pcsamp_warps_issue_stalled_{reason}")
        pcs = m.correlation_ids()
        for i in range(m.num_instances()):
            pc = pcs.as_uint64(i)
            if pc not in opcodes:
                words = (action.sass_by_pc(pc) or "?").split()
                opcodes[pc] = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
            by[reason][opcodes[pc]] += m.as_uint64(i)
    return by, int(action.metric_by_name("smsp__pcsamp_sample_count").as_uint64())


def reports(variant: str) -> list:
    proto = PROTO / f"{'fast' if variant == 'solution' else variant}.ncu-rep.gz"
    own = PUZZLE.artifacts / f"{variant}.ncu-rep.gz"
    return [pytest.param(proto, id=f"proto-{variant}"),
            pytest.param(own, id=f"puzzle-{variant}", marks=unrecorded)]


@pytest.mark.parametrize("path", reports("slow"))
def test_the_slow_kernel_s_barrier_samples_wait_for_their_own_wgmma(path, tmp_path):
    """Hint 2: 'barrier' leads, and its samples sit on WARPGROUP.DEPBAR (wgmma.wait_group), not on BAR.SYNC."""
    if not has_ncu_report():
        pytest.skip("the ncu_report module is not here")
    by, total = stall_samples_by_opcode(path, tmp_path)
    barrier = sum(by["barrier"].values())
    assert barrier > 0.5 * total
    assert by["barrier"].most_common(1)[0][0] == "WARPGROUP.DEPBAR.LE"
    assert by["barrier"]["WARPGROUP.DEPBAR.LE"] > 0.75 * barrier
    assert by["barrier"]["BAR.SYNC.DEFER_BLOCKING"] < 0.05 * barrier


@pytest.mark.parametrize("path", reports("solution"))
def test_the_fixed_kernel_s_producer_waits_on_mbarriers(path, tmp_path):
    """Hint 4: after the fix long_scoreboard rises, on the branch of the mbarrier wait loops (SYNCS.PHASECHK,
    then BRA back while the phase has not flipped), while the barrier samples shrink."""
    if not has_ncu_report():
        pytest.skip("the ncu_report module is not here")
    by, total = stall_samples_by_opcode(path, tmp_path)
    waits = sum(by["long_scoreboard"].values())
    assert waits > 0.2 * total and by["long_scoreboard"]["BRA"] > 0.9 * waits
    assert sum(by["barrier"].values()) < 0.6 * total


@unrecorded
def test_replay_shows_the_recording_without_a_gpu(capsys):
    from perflab.__main__ import main

    assert main(["run", PUZZLE.id, "--replay"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "REPLAY" in out and "slow.ncu-rep.gz" in out
    sp = replay.recording(PUZZLE).measurements()["speedup"]
    assert sp["ci_low"] >= PUZZLE.check.speedup == 1.15
