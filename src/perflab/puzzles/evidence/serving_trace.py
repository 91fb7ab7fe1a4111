"""A serving puzzle taught from the torch.profiler trace alone: a [check] metric of the serving engine
(evidence/serving.py's SERVING_METRICS, e.g. `itl_p99_ms`) without the "serving" tool, so no engine log ships.

- record: the torch.profiler traces of slow and solution, as every puzzle's (evidence/trace.py); the engine names each
  iteration the way vLLM does (perflab/workloads/serving.py), and the doctor reads the trace through them
  (analysis/steps/iterations.py);
- check: the metric measured as evidence/serving.py measures it (the engine timed, slow and fix pass after pass, the
  slow / fix ratio's interval against `reduction`), then the fix re-profiled: the doctor on its trace must no longer
  hold the planted finding (evidence/trace.py's profiled_evidence), the evidence the learner reads.
"""
from __future__ import annotations

from typing import Any

from perflab.puzzles.engine import checker
from perflab.puzzles.engine.kinds import Checking, Kind, register
from perflab.puzzles.evidence.serving import SERVING_METRICS, measure_metric
from perflab.puzzles.evidence.trace import reprofiled


def judged_from_trace(puzzle: Any) -> bool:
    return puzzle.check.metric in SERVING_METRICS and "serving" not in puzzle.tools


@register
class ServingTrace(Kind):
    """[check] metric itl_p99_ms without tools = ["serving"]: measured on the engine, judged on the fix's trace."""
    name = "serving-trace"

    def applies(self, puzzle: Any) -> bool:
        return judged_from_trace(puzzle)

    def measure(self, chk: Checking) -> checker.CheckResult | None:
        result = measure_metric(chk, judge=False)
        if result.correctness.ok and result.speed is not None:
            reprofiled(chk)
        return result
