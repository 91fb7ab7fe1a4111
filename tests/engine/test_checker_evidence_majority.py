"""The trace kind's profiled_evidence: one profile decides when the planted finding is gone; otherwise two of three."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from perflab.puzzles.engine import checker
from perflab.puzzles.evidence import trace as trace_evidence

PUZZLE = SimpleNamespace(id="p", profile=SimpleNamespace(steps=4, with_stack=False), check=SimpleNamespace(planted="x"))


def run(monkeypatch, tmp_path, verdicts):
    profiled, queue = [], list(verdicts)

    def profile(name):
        profiled.append(name)
        return trace_evidence.replay.trace_file(tmp_path, name)

    monkeypatch.setattr(trace_evidence, "planted_evidence",
                        lambda puzzle, trace: checker.Evidence(ok=queue.pop(0), planted="x", found=["x (high)"],
                                                               trace=str(trace)))
    return trace_evidence.profiled_evidence(PUZZLE, profile), [trace_evidence.replay.trace_file(tmp_path, n).name for n in profiled]


def test_a_clean_first_profile_decides_alone(monkeypatch, tmp_path):
    ev, profiled = run(monkeypatch, tmp_path, [True])
    assert ev.ok and profiled == ["mine.trace.json.gz"]


@pytest.mark.parametrize("verdicts,ok,n", [
    ([False, True, True], True, 3),    # one stray pause: the two others decide
    ([False, True, False], False, 3),
    ([False, False], False, 2),        # two of three already say it is there: no third profile
])
def test_when_the_first_shows_it_two_of_three_decide(monkeypatch, tmp_path, verdicts, ok, n):
    ev, profiled = run(monkeypatch, tmp_path, verdicts)
    assert ev.ok is ok and len(profiled) == n
    assert ev.trace.endswith("mine.trace.json.gz")
    assert ev.found[-1] == f"x blocking in {sum(not v for v in verdicts)} of {n} profiles"
