"""pipeline-bubble: P2P-bracketed compute on each stage, its idle share against (p-1)/(m+p-1).

Synthetic GPipe jobs (trace/builders/synthetic_pipeline.py) plant the bubble; recorded DDP, tensor-parallel and
expert/all-to-all traces have no send/recv between compute blocks and must stay silent.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from perflab.analysis.multigpu.pipeline import gpipe_bubble_pct
from perflab.doctor import diagnose
from perflab.trace.builders import synthetic, synthetic_pipeline

DATA = Path(__file__).parents[1] / "data" / "multigpu" / "h200x2"
CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
DLRM = Path(__file__).resolve().parents[3] / "shared" / "real-traces" / "param_dlrm_v100_8rank"


def _job(tmp_path, **kw) -> Path:
    folder = tmp_path / "pp"
    folder.mkdir(parents=True)
    for b in synthetic_pipeline.gpipe(**kw):
        b.write(folder / f"rank{b.rank}.trace.json.gz")
    return folder


def _bubble(rep):
    return next((f for f in rep.findings if f.id == "pipeline-bubble"), None)


def test_schedule_bubble_formula():
    assert gpipe_bubble_pct(4, 2) == pytest.approx(60.0)
    assert gpipe_bubble_pct(4, 16) == pytest.approx(100 * 3 / 19)
    assert gpipe_bubble_pct(1, 8) == 0.0


@pytest.mark.parametrize("training", [True, False])
def test_gpipe_with_two_micro_batches_on_four_stages(tmp_path, training):
    folder = _job(tmp_path, stages=4, micro_batches=2, training=training)
    for rank in (0, 1, 3):
        rep = diagnose(folder, rank=rank)
        f = _bubble(rep)
        assert f is not None and rep.top.id == "pipeline-bubble", rep.ids()
        ev = f.evidence
        assert ev["stages"] == 4 and ev["micro_batches_per_step"] == 2 and ev["training"] is training
        assert ev["schedule_bubble_pct"] == pytest.approx(60.0)
        assert 50.0 < ev["bubble_pct"] < 66.0 and f.gain_pct == pytest.approx(min(ev["bubble_pct"], 60.0), abs=0.1)
        assert set(ev["per_stage_bubble_pct"]) == {0, 1, 2, 3}
        assert "micro-batches" in f.fix and "1F1B" in f.fix
        # waiting in a receive is the bubble, not a late rank nor exposed transfer
        assert "load-imbalance" not in rep.ids() and "comm-not-overlapped" not in rep.ids()
    inference_first = _bubble(diagnose(folder, rank=0)).evidence
    if not training:  # forward only: stage 0 idles at the end, the last stage at the start
        last = _bubble(diagnose(folder, rank=3)).evidence
        assert inference_first["end_idle_pct"] > inference_first["start_idle_pct"]
        assert last["start_idle_pct"] > last["end_idle_pct"]


def test_more_micro_batches_shrink_the_bubble_as_the_formula_says(tmp_path):
    few = _bubble(diagnose(_job(tmp_path / "a", stages=4, micro_batches=2), rank=1)).gain_pct
    many = _bubble(diagnose(_job(tmp_path / "b", stages=4, micro_batches=16), rank=1))
    assert many.evidence["micro_batches_per_step"] == 16
    assert many.gain_pct < few / 2 and many.gain_pct == pytest.approx(gpipe_bubble_pct(4, 16), abs=4.0)


def test_silent_on_data_parallel_tensor_parallel_and_all_to_all(tmp_path):
    paths = [DATA / "ddp", DATA / "exposed", DATA / "straggler",
             CATALOG / "72-tp-scaling-knee" / "artifacts" / "slow.ranks"]
    if DLRM.is_dir():
        paths.append(DLRM)  # all-to-all over NCCL SendRecv kernels: a collective, not a pipeline
    for p in paths:
        assert _bubble(diagnose(p)) is None, p
    one = tmp_path / "dp.json"
    synthetic.exposed_allreduce().write(one)
    assert _bubble(diagnose(one)) is None


H200_PP = Path(__file__).parents[1] / "data" / "multigpu" / "h200x4-pipeline-bubble"   # 74's recording, 4x H200 host


def test_recorded_gpipe_per_step_figures_fit_in_the_step():
    """Five back-to-back ProfilerSteps merge into one window: per-step figures divide by the steps, so a stage
    idles less than its step and the slow recording (m = 2) shows 2 micro-batches, the fix (m = 8) 8."""
    from perflab.analysis.multigpu.pipeline import rank_pipeline
    from perflab.analysis.steps.windows import analysis_windows
    from perflab.trace.kineto import load

    for variant, m in (("slow", 2), ("solution", 8)):
        for rank in (0, 1):
            t = load(H200_PP / f"{variant}.ranks" / f"rank{rank}.trace.json.gz")
            p = rank_pipeline(t, analysis_windows(t))
            assert p["micro_batches"] == m
            assert p["p2p_per_step"] == pytest.approx(2 * m)
            assert 0 < p["bubble_ms_per_step"] < p["step_ms"] < 25


def test_recorded_bubble_gain_is_the_schedule_share_and_the_rest_is_a_slower_stage():
    slow = diagnose(H200_PP / "slow.ranks", rank=0)
    assert slow.findings[0].id == "pipeline-bubble" and slow.findings[0].severity == "high"
    assert slow.findings[0].gain_pct == pytest.approx(gpipe_bubble_pct(2, 2), abs=0.1)
    fixed = diagnose(H200_PP / "solution.ranks", rank=0)
    bubble = _bubble(fixed)
    assert bubble.gain_pct == pytest.approx(gpipe_bubble_pct(2, 8), abs=0.1)   # all more micro-batches can win
    assert fixed.findings[0].id == "load-imbalance"   # rank 0 waits on stage 1 beyond the schedule's bubble
    ev = fixed.findings[0].evidence
    assert ev["slower_stage_rank"] == 1 and ev["slower_stage_compute_ms"] > ev["compute_ms"]
    assert fixed.findings[0].gain_pct == pytest.approx(bubble.evidence["bubble_pct"] - bubble.gain_pct, abs=0.2)
