"""puzzle.toml validation: a broken file names the file and the field."""
from pathlib import Path

import pytest

from conftest import FAKE_ID, PUZZLE_TOML, make_puzzle
from perflab.__main__ import main
from perflab.puzzles import catalog, spec
from perflab.puzzles.spec import SpecError

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
    folder = make_puzzle(tmp_path, toml=GOOD.replace(old, new, 1), artifacts=False)
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
