"""Replay: summaries and answers computed from recorded artifacts (a synthetic recording)."""
import pytest

from conftest import FAKE_ID, GPU_NAME
from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, replay
from perflab.puzzles import questions
from perflab.puzzles.questions import trace as trace_questions


@pytest.fixture
def puzzle(fake_catalog):
    return catalog.get(FAKE_ID)


@pytest.fixture
def ev(puzzle):
    return replay.recording(puzzle)


def test_summary_of_the_recording(ev):
    s = ev.summary("slow")
    assert s["steps"] == 3
    assert s["kernels_per_step"] == pytest.approx(41)
    assert s["syncs"]["per_step"] == pytest.approx(2)
    assert s["top_kernels"][0]["name"].startswith("void gemm_bf16_kernel")
    assert s["copies"]["h2d"]["pageable_count"] == 6
    assert ev.summary("solution")["syncs"]["per_step"] == 0


def test_each_trace_is_read_once(ev, monkeypatch):
    calls = []
    real = replay.load_trace
    monkeypatch.setattr(replay, "load_trace", lambda path: calls.append(path) or real(path))
    ev.summary("slow"), ev.report("slow"), ev.summary("slow"), trace_questions.top_kernel(ev)
    assert len(calls) == 1


def test_replay_label_from_manifest(ev):
    assert replay.replay_label(ev.manifest()) == f"REPLAY of a recording made on {GPU_NAME} on 2026-11-22"
    assert replay.replay_label({"device": "cpu", "date": "2026-01-02T00:00:00"}) == \
        "REPLAY of a recording made on the CPU on 2026-01-02"


def test_missing_recording_says_how_to_make_it(puzzle, tmp_path):
    ev = replay.Evidence(tmp_path, puzzle.id)
    with pytest.raises(PerflabError, match=rf"no recorded slow trace .*`perflab run {FAKE_ID}` profiles the puzzle live"):
        ev.summary("slow")
    with pytest.raises(PerflabError, match="no measurements.json"):
        trace_questions.speedup(ev)


@pytest.mark.parametrize("key, expected", [
    ("cause", "host-sync"), ("syncs", 2.0), ("kernels", 41.0), ("pageable", 2.0), ("h2d", 2 * (1 << 20)),
    ("speedup", 2.5), ("fixed", 3),
])
def test_answers_computed_from_the_artifacts(puzzle, ev, key, expected):
    computed = questions.compute(puzzle.find_question(key), ev)
    assert computed.value == pytest.approx(expected) if isinstance(expected, float) else computed.value == expected
    assert computed.evidence and computed.source


def test_top_kernel_and_its_alternatives(puzzle, ev):
    c = questions.compute(puzzle.find_question("kernel"), ev)
    assert c.value.startswith("void gemm_bf16_kernel") and "elementwise_add_kernel" in c.alternatives
    assert c.evidence["count"] == 3


def test_gpu_busy_is_graded_with_tolerance(puzzle, ev):
    q = puzzle.find_question("busy")
    c = questions.compute(q, ev)
    assert 55 <= c.value <= 75  # 500 µs of kernels + 100 µs of copies per 1000 µs step (60 %; more if the
    # span is counted from the first GPU activity to the last)
    assert questions.grade(q, f"{c.value * 1.1:.3f}%", c).correct
    assert not questions.grade(q, f"{c.value * 1.3:.3f}", c).correct


def test_summary_field_paths(ev):
    assert trace_questions.summary_field(ev, "top_kernels.0.count").value == 3
    assert trace_questions.summary_field(ev, "copies.h2d.pageable_count").value == 6
    with pytest.raises(PerflabError, match="no field 'copies.x2y'"):
        trace_questions.summary_field(ev, "copies.x2y")


def grade(puzzle, ev, key, raw):
    q = puzzle.find_question(key)
    return questions.grade(q, raw, questions.compute(q, ev))


def test_taxonomy_answers(puzzle, ev):
    assert grade(puzzle, ev, "cause", "host-sync").correct
    assert grade(puzzle, ev, "cause", " Host Sync ").correct
    wrong = grade(puzzle, ev, "cause", "launch-overhead")
    assert not wrong.correct and wrong.expected == "host-sync"
    assert wrong.computed.evidence["top finding"] == "host-sync" and wrong.computed.evidence["syncs_per_step"] == 2
    with pytest.raises(PerflabError, match="'slowness' is not a taxonomy id"):
        grade(puzzle, ev, "cause", "slowness")


def test_number_answers_and_tolerance(puzzle, ev):
    assert grade(puzzle, ev, "syncs", "2").correct
    assert grade(puzzle, ev, "syncs", "2.019").correct          # tolerance 1 %
    assert not grade(puzzle, ev, "syncs", "2.03").correct
    assert not grade(puzzle, ev, "syncs", "1").correct
    assert grade(puzzle, ev, "speedup", "2.5x").correct
    with pytest.raises(PerflabError, match="'two' is not a number"):
        grade(puzzle, ev, "syncs", "two")


def test_text_answers_are_case_insensitive_substrings_that_single_out_the_kernel(puzzle, ev):
    assert grade(puzzle, ev, "kernel", "GEMM_bf16").correct
    assert grade(puzzle, ev, "kernel", "void gemm_bf16_kernel<128, 128>").correct
    assert not grade(puzzle, ev, "kernel", "ge").correct            # too short to name anything
    vague = grade(puzzle, ev, "kernel", "kernel")                    # also names elementwise_add_kernel
    assert not vague.correct and "also matches 'elementwise_add_kernel'" in vague.note
    assert not grade(puzzle, ev, "kernel", "elementwise").correct


def test_choice_answers(puzzle, ev):
    assert grade(puzzle, ev, "fixed", "3").correct
    assert not grade(puzzle, ev, "fixed", "4").correct
    with pytest.raises(PerflabError, match="not one of the choices: 3, 4"):
        grade(puzzle, ev, "fixed", "5")
