"""Speed of light over every recorded H100 trace of the catalog: no step beats it, and no op runs faster than
physics allows unless its bytes fit in L2 or a measured ceiling sits under the datasheet peak."""
from pathlib import Path

import pytest

from perflab.analysis.work.ceilings import device_ceilings, measured_beside
from perflab.analysis.work.op_work import op_work
from perflab.analysis.work.speed_of_light import OVER_ROOF, speed_of_light
from perflab.analysis.steps.windows import analysis_windows
from perflab.trace.kineto import load

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
TRACES = sorted(CATALOG.glob("*/artifacts/*.trace.json.gz"))


def _sol(path: Path) -> dict:
    trace = load(path)
    windows = analysis_windows(trace, None)
    steps = max(len(windows.steps), 1)
    c = device_ceilings(trace.meta["device_name"], measured_beside(str(path)))
    return speed_of_light(op_work(trace, windows), c, steps=steps, step_us=windows.total / steps)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parts[-3]}/{p.name.split('.')[0]}")
def test_no_recorded_step_beats_its_speed_of_light(path):
    sol = _sol(path)
    st = sol["step"]
    assert sol["ceilings"]["source"].startswith(("datasheet", "measured"))
    if st["sol_us"] is None or st["modelled_gpu_us"] == 0:
        pytest.skip("no op with recorded shapes in this trace")
    # the work model never prices an op above what the datasheet allows (a model that counts work an op does not do)
    model_errors = [o for o in sol["over_roof"] if o["why"] == "model"]
    assert not model_errors, model_errors
    assert st["sol_us"] <= st["modelled_gpu_us"] * OVER_ROOF   # each op's time, within the timer's noise
    assert st["step_us"] >= st["gpu_us"] / 8        # per-step accounting (GPU time may overlap on streams)


def test_the_catalog_is_priced_where_shapes_were_recorded():
    """Where torch ops launched the kernels (not a graph replay, not a kernel launched by hand), the model
    prices nearly all the device's time."""
    covered = {}
    for path in TRACES:
        sol = _sol(path)
        st, un = sol["step"], sol["unmodelled"]
        by_hand = sum(un[k]["us"] for k in ("graph_replay", "no_op") if k in un)
        if st["gpu_us"] > 0 and by_hand < 0.2 * st["gpu_us"]:
            covered[f"{path.parts[-3]}/{path.name}"] = round(st["coverage_pct"])
    assert len(covered) >= 25
    assert sorted(covered.values())[len(covered) // 10] >= 80, covered   # 90 % of them at >= 80 %
