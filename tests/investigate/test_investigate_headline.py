"""investigate's headline when a level could not judge: the numbers are those of the H100 runs of
examples/stacks (scripts/record.py stack-checks, 2026-11-27): a CUDA-graphed decode whose kernels the timeline
cannot price (98 % of GPU time, GPU busy 86 %) with one kernel of 13 % read by Nsight Compute; a reduce-overhead
block whose one GEMM (79 % of the step) ncu read at its roof; an HF generate that ran past the time limit."""
from perflab.doctor.investigation import headline


def not_judged(unjudged_pct, busy_pct):
    return {"id": "below-roof", "level": "kernel", "severity": "low", "gain_pct": 0.0, "gain_unit": "% of step time",
            "summary": f"Not judged: {unjudged_pct}% of the GPU time is in kernels the work model cannot price.",
            "fix": "", "evidence": {"unjudged_gpu_time_pct": unjudged_pct, "gpu_busy_pct": busy_pct}}


def kernel_read(share_pct, gain_pct):
    return {"kernel": "k", "function": "nvjet_gemm", "time_us": share_pct * 10.0, "step_us": 1000.0,
            "pct_of_roof": None, "gain_pct": gain_pct, "basis": "time", "ncu_gain_pct": gain_pct,
            "finding": {"id": "healthy" if gain_pct < 1 else "memory-bound", "severity": "info" if gain_pct < 1 else "low",
                        "gain_pct": gain_pct, "summary": "read by ncu", "evidence": {}}}


def levels(l1_status, f1, kernels):
    return [{"level": 1, "status": l1_status, "finding": f1, "top_line": "top line"},
            {"level": 2, "status": "done", "kernels": kernels}, {"level": 3, "status": "not-needed"}]


def test_most_time_unread_is_not_nothing_left():
    h = headline(levels("done", not_judged(98.0, 86.0), [kernel_read(13.0, 2.9)]))
    assert h["scope"] == "incomplete" and h["text"].startswith("Not judged yet: 71 %")
    assert "--kernels" in h["text"]


def test_the_dominant_kernel_read_at_its_roof_is_nothing_big_left():
    h = headline(levels("done", not_judged(100.0, 94.0), [kernel_read(79.0, 0.0)]))
    assert h["scope"] == "healthy" and h["text"].startswith("Nothing big left")


def test_a_program_stopped_before_any_evidence_is_not_judged():
    h = headline(levels("timed-out", None, []))
    assert h["scope"] == "incomplete" and h["text"].startswith("Not judged: level 1 timed-out")
    h = headline(levels("done", None, []))  # a real run with nothing to report stays 'nothing to fix'
    assert h["scope"] == "healthy" and h["text"].startswith("Nothing to fix")
