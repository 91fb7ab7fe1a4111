"""The catalog: discovery, curriculum order, unique ids, prerequisites, lookup; and the real puzzles."""
import pytest

from conftest import FAKE_ID, PUZZLE_TOML, make_puzzle, shipped_puzzles
from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, replay
from perflab.puzzles import questions
from perflab.puzzles.engine.spec import SpecError


def two_puzzles(root, second_toml=None):
    make_puzzle(root, "zz-b", toml=PUZZLE_TOML.format(pid="zz-b").replace("order = 990", "order = 5"),
                artifacts=False)
    make_puzzle(root / "more", "zz-a", toml=second_toml, artifacts=False)
    return [root, root / "more"]


def test_order_then_id_and_env_roots(tmp_path, monkeypatch):
    roots = two_puzzles(tmp_path)
    assert [p.id for p in catalog.load_catalog(roots)] == ["zz-b", "zz-a"]  # order 5 before 990
    monkeypatch.setenv("PERFLAB_CATALOG", f"{roots[0]}:{roots[1]}")
    assert catalog.catalog_roots() == [catalog.BUILTIN, *roots]
    monkeypatch.setattr(catalog, "BUILTIN", tmp_path / "none")
    assert [p.id for p in catalog.load_catalog()] == ["zz-b", "zz-a"]


def test_duplicate_ids_name_both_files(tmp_path):
    roots = two_puzzles(tmp_path, PUZZLE_TOML.format(pid="zz-b"))
    with pytest.raises(SpecError, match=r"field 'id' 'zz-b' is already used by .*99-zz-b/puzzle.toml"):
        catalog.load_catalog(roots)


def test_unknown_prerequisite(tmp_path):
    toml = PUZZLE_TOML.format(pid="zz-a").replace("prerequisites = []", 'prerequisites = ["zz-b", "zz-nope"]')
    roots = two_puzzles(tmp_path, toml)
    with pytest.raises(SpecError, match=r"field 'prerequisites\[1\]' names no puzzle \('zz-nope'\)"):
        catalog.load_catalog(roots)


def test_find_by_id_folder_and_number(tmp_path):
    puzzles = catalog.load_catalog(two_puzzles(tmp_path))
    assert catalog.find(puzzles, "zz-a").id == "zz-a"
    assert catalog.find(puzzles, "99-zz-b").id == "zz-b"
    assert catalog.find(puzzles, "99").id in ("zz-a", "zz-b")
    with pytest.raises(PerflabError, match="no puzzle 'zz-bb': did you mean zz-b[?]"):
        catalog.find(puzzles, "zz-bb")


def test_tag_filter(tmp_path):
    puzzles = catalog.load_catalog(two_puzzles(tmp_path))
    assert len(catalog.with_tag(puzzles, "pageable-memcpy")) == 2
    assert catalog.with_tag(puzzles, "bank-conflicts") == []
    with pytest.raises(PerflabError, match="not a taxonomy id"):
        catalog.with_tag(puzzles, "slowness")


# --- the shipped catalog ----------------------------------------------------------------------------

def test_shipped_catalog_is_valid():
    puzzles = catalog.load_catalog([catalog.BUILTIN])
    for p in puzzles:
        assert p.questions and p.hints, f"{p.id}: needs questions and hints"


# kernel puzzles (tools = ["ncu"]) plant an ncu finding: tests/catalog/test_puzzle_ncu.py checks their recordings; those
# whose planted finding is the trace's (planted_in = "trace": the ncu reports explain it) are checked here too.
# Serving puzzles plant a schedule no kernel trace can see (padded batch rows): the fix check and
# tests/catalog/test_serving_puzzle.py read the engine's log in serving.json instead
MEMORY_METRICS = ("peak_reserved_mb", "reserved_mb")
# a serving puzzle taught from its trace (serving-trace: [check] metric itl_p99_ms, no serving tool) is judged on its
# traces like any other: the doctor's serving level reads them through the engine's iterations
RECORDED = [p for p in shipped_puzzles() if replay.recording(p).has("slow") and p.check.planted_in == "trace"
            and "serving" not in p.tools]


@pytest.mark.parametrize("puzzle", RECORDED, ids=[p.id for p in RECORDED])
def test_shipped_questions_compute_and_the_doctor_sees_the_planted_finding(puzzle):
    ev = replay.recording(puzzle)
    assert ev.manifest().get("gpu"), "manifest names the GPU"
    for q in puzzle.questions:
        computed = questions.compute(q, ev)
        assert computed.value is not None
        if q.type != "text":
            assert questions.grade(q, str(computed.value), computed).correct, q.key
        if q.analysis == "doctor_top_id":  # the answer the puzzle teaches must be one of its own tags
            assert computed.value in puzzle.taxonomy, (q.key, computed.value, computed.evidence)
    planted = puzzle.check.planted
    if puzzle.check.metric in MEMORY_METRICS:  # a memory puzzle: the memory doctor on the recorded snapshots
        from perflab.puzzles.questions.memory import memory_report

        slow, fixed = ({f.id: f.severity for f in reversed(memory_report(ev, v).findings)}  # the top one wins
                       for v in ("slow", "solution"))
    else:
        slow = {f.id: f.severity for f in ev.report("slow").findings}
        fixed = {f.id: f.severity for f in ev.report("solution").findings}
    assert slow.get(planted) in ("high", "medium"), slow
    if puzzle.check.metric == "overhead":  # the fix keeps the host work and profiles it cheaply: its measure is the
        assert ev.measurements()["check"]["solution"]["passed"]  # recorded overhead check, not a dropped finding
        return
    assert fixed.get(planted) not in ("high", "medium"), fixed


def test_fake_id_is_not_shipped_puzzles():
    assert FAKE_ID not in [p.id for p in shipped_puzzles()]


WITH_ARTIFACTS = [p for p in shipped_puzzles() if (p.folder / "artifacts" / "manifest.json").exists()]


@pytest.mark.parametrize("puzzle", WITH_ARTIFACTS, ids=[p.id for p in WITH_ARTIFACTS])
def test_every_question_of_every_recorded_puzzle_is_answerable_in_replay(puzzle):
    ev = replay.recording(puzzle)
    for q in puzzle.questions:
        computed = questions.compute(q, ev)
        assert computed.value is not None, q.key
        if q.type != "text":
            assert questions.grade(q, str(computed.value), computed).correct, q.key
