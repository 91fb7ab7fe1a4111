"""puzzle.toml validation: a broken file names the file and the field."""
from pathlib import Path

import pytest

from conftest import FAKE_ID, PUZZLE_TOML, make_puzzle
from perflab.__main__ import main
from perflab.puzzles.engine import catalog, spec
from perflab.puzzles.engine.spec import SpecError

GOOD = PUZZLE_TOML.format(pid=FAKE_ID)


def test_good_spec_parses(tmp_path):
    p = spec.load(make_puzzle(tmp_path) / "puzzle.toml")
    assert (p.id, p.level, p.order) == (FAKE_ID, 1, 990)
    assert p.taxonomy == ("host-sync", "pageable-memcpy")
    assert p.requirements.gpu is False and p.profile.steps == 3 and p.check.planted == "host-sync"
    assert [q.key for q in p.questions][:3] == ["cause", "syncs", "kernel"]
    assert p.find_question("syncs").tolerance == 0.01
    assert p.find_question("busy").analysis == "gpu_busy_pct"
    assert p.file("slow").name == "workload.py"


@pytest.mark.parametrize("old, new, field, words", [
    ("level = 1", "level = 7", "level", "must be an int 1..4"),
    ("level = 1", 'level = "one"', "level", "must be an int 1..4"),
    ("level = 1", "level = true", "level", "must be an int 1..4"),
    ('taxonomy = ["host-sync", "pageable-memcpy"]', 'taxonomy = ["host-sync", "slow-stuff"]', "taxonomy[1]",
     "'slow-stuff' is not one of"),
    ('tools = ["torch-profiler"]', 'tools = ["nsys"]', "tools[0]", "is not one of"),
    ('title = "Synthetic', 'titel = "Synthetic', "titel", "is not a known field"),
    ('analysis = "doctor_top_id"', 'analysis = "vibes"', "questions[0].analysis", "not a known analysis"),
    ('type = "taxonomy"', 'type = "essay"', "questions[0].type", "must be one of"),
    ('analysis = "doctor_top_id"', 'analysis = "doctor_top_id"\nargs = { nope = 1 }', "questions[0].args",
     "do not fit analysis 'doctor_top_id'"),
    ('args = { path = "steps", variant = "solution" }', 'args = { variant = "solution" }', "questions[8].args",
     "missing a required argument: 'path'"),
    ('analysis = "doctor_top_id"', 'analysis = "doctor_top_id"\nargs = { variant = "mine" }',
     "questions[0].args.variant", "must be 'slow' or 'solution'"),
    ("speedup = 2.0", "speedup = 0.5", "check.speedup", "must be >= 1.0"),
    ('planted = "host-sync"', 'planted = "nope"', "check.planted", "is not a taxonomy id"),
    ("gpu = false", 'gpu = false\nmin_cc = "eight"', "requirements.min_cc", "must be a string like"),
    ('key = "syncs"', 'key = "cause"', "questions[1].key", "is used by another question"),
    ('id = "zz-synthetic-sync"', 'id = "Bad Id"', "id", "lowercase letters"),
    ("steps = 3", "steps = 0", "profile.steps", "must be an int 1..1000"),
    ('choices = ["3", "4"]', "choices = []", "questions[8].choices", "must list the choices"),
])
def test_broken_spec_names_file_and_field(tmp_path, old, new, field, words):
    assert old in GOOD
    assert_names_file_and_field(make_puzzle(tmp_path, toml=GOOD.replace(old, new, 1), artifacts=False), field, words)


def assert_names_file_and_field(folder, field, words):
    with pytest.raises(SpecError) as info:
        spec.load(folder / "puzzle.toml")
    msg = str(info.value)
    assert msg.startswith(f"{folder / 'puzzle.toml'}: field '{field}' "), msg
    assert words in msg


def test_missing_field_and_bad_toml(tmp_path):
    folder = make_puzzle(tmp_path, toml=GOOD.replace('look_at = "', 'looks = "'), artifacts=False)
    with pytest.raises(SpecError, match="field 'looks' is not a known field"):
        spec.load(folder / "puzzle.toml")
    folder = make_puzzle(tmp_path / "b", toml=GOOD.replace('look_at = "', '# look_at = "'), artifacts=False)
    with pytest.raises(SpecError, match="field 'look_at' is missing"):
        spec.load(folder / "puzzle.toml")
    folder = make_puzzle(tmp_path / "c", toml=GOOD + "\nlevel = [", artifacts=False)
    with pytest.raises(SpecError, match=r"puzzle.toml: not valid TOML"):
        spec.load(folder / "puzzle.toml")


def test_missing_variant_file_is_named(tmp_path):
    folder = make_puzzle(tmp_path, artifacts=False)
    (folder / "solution.py").unlink()
    with pytest.raises(SpecError, match="lacks solution.py"):
        spec.load(folder / "puzzle.toml")


def test_cli_reports_broken_spec_relative_to_cwd(tmp_path, monkeypatch, capsys):
    folder = make_puzzle(tmp_path / "cat", toml=GOOD.replace("level = 1", "level = 7"), artifacts=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PERFLAB_CATALOG", str(tmp_path / "cat"))
    monkeypatch.setattr(catalog, "BUILTIN", tmp_path / "none")
    assert main(["list"]) == 2
    err = capsys.readouterr().err.strip()
    rel = Path("cat") / folder.name / "puzzle.toml"
    assert err == f"perflab: error: {rel}: field 'level' must be an int 1..4"


# --- stages: intermediate fixes between slow and solution (<stage>.py, recorded like the variants) --------

STAGED = GOOD.replace('tools = ["torch-profiler"]', 'tools = ["torch-profiler"]\nstages = ["stage1", "stage2"]', 1)


def staged_puzzle(tmp_path, toml=STAGED, files=("stage1", "stage2")):
    folder = make_puzzle(tmp_path, toml=toml, artifacts=False)
    for name in files:
        (folder / f"{name}.py").write_text((folder / "solution.py").read_text())
    return folder


def test_stages_parse_and_name_their_files(tmp_path):
    toml = STAGED.replace('args = { path = "steps", variant = "solution" }', 'args = { path = "steps", variant = "stage2" }')
    toml += '\n[[questions]]\nkey = "step2"\nprompt = "stage2 over stage1?"\ntype = "number"\n' \
            'analysis = "variant_speedup"\nargs = { variant = "stage2", over = "stage1" }\n'
    p = spec.load(staged_puzzle(tmp_path, toml) / "puzzle.toml")
    assert p.stages == ("stage1", "stage2")
    assert p.file("stage2") == p.folder / "stage2.py" and p.file("slow").name == "workload.py"
    assert p.find_question("fixed").args["variant"] == "stage2"
    assert p.find_question("step2").args == {"variant": "stage2", "over": "stage1"}
    assert spec.load(make_puzzle(tmp_path / "plain", artifacts=False) / "puzzle.toml").stages == ()


@pytest.mark.parametrize("old, new, files, field, words", [
    ('"stage1", "stage2"', '"stage1", "stage2"', ("stage1",), "stages[1]", "names stage2.py, which the puzzle folder lacks"),
    ('"stage1", "stage2"', '"stage1", "step2"', ("stage1", "step2"), "stages[1]", "'step2' must be 'stage' followed by digits"),
    ('"stage1", "stage2"', '"stage1", "stage1"', ("stage1",), "stages[1]", "'stage1' is listed twice"),
    ('"stage1", "stage2"', '"stage1", 2', ("stage1",), "stages[1]", "must be a string"),
    ('args = { path = "steps", variant = "solution" }', 'args = { path = "steps", variant = "stage3" }',
     ("stage1", "stage2"), "questions[8].args.variant", "must be 'slow', 'solution', 'stage1' or 'stage2'"),
    ("gpu = false", "gpu = false\ngpus = 2", ("stage1", "stage2"), "stages", "is not supported for multi-GPU"),
])
def test_broken_stages_name_file_and_field(tmp_path, old, new, files, field, words):
    assert old in STAGED
    assert_names_file_and_field(staged_puzzle(tmp_path, STAGED.replace(old, new, 1), files), field, words)


def test_a_stage_name_is_no_variant_without_stages(tmp_path):
    toml = GOOD.replace('args = { path = "steps", variant = "solution" }', 'args = { path = "steps", variant = "stage1" }')
    with pytest.raises(SpecError, match=r"field 'questions\[8\]\.args\.variant' must be 'slow' or 'solution'"):
        spec.load(staged_puzzle(tmp_path, toml, ("stage1",)) / "puzzle.toml")


def test_planted_fixed_by_names_a_stage(tmp_path):
    assert "[check]\n" in STAGED
    ok = STAGED.replace("[check]\n", '[check]\nplanted_fixed_by = "stage1"\n', 1)
    assert spec.load(staged_puzzle(tmp_path / "ok", ok) / "puzzle.toml").check.planted_fixed_by == "stage1"
    bad = STAGED.replace("[check]\n", '[check]\nplanted_fixed_by = "stage3"\n', 1)
    with pytest.raises(spec.SpecError, match="planted_fixed_by must name one of the puzzle's stages"):
        spec.load(staged_puzzle(tmp_path / "bad", bad) / "puzzle.toml")
