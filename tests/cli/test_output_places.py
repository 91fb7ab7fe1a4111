"""Where an output may go: never through or over a symlink (--force or not), only into a folder that exists (a typo
is one line, not a new tree of folders), and a folder a command fills is tried before the work, so an unusable one
costs nothing (the program is not run)."""
from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest

from conftest import FAKE_ID, cli_run
from perflab.trace.builders import synthetic

REPO = Path(__file__).resolve().parents[2]
NCU_CSV = REPO / "tests" / "data" / "ncu" / "memory_bound_scalar.csv"


def _one_line(capsys, *args, why: str) -> None:
    rc, _, err = cli_run(capsys, *args)
    assert rc == 2 and why in err and err.count("\n") == 1, err


@pytest.fixture
def trace(tmp_path) -> Path:
    return synthetic.host_bound(steps=3).write(tmp_path / "t.json")


def test_start_never_writes_through_a_dangling_fix_py(capsys, tmp_path, fake_catalog):
    fix = tmp_path / "work" / FAKE_ID / "fix.py"
    fix.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere" / "target.py"
    elsewhere.parent.mkdir()
    fix.symlink_to(elsewhere)
    _one_line(capsys, "start", FAKE_ID, why="is a symbolic link")
    assert not elsewhere.exists() and fix.is_symlink()


def test_start_in_an_unusable_workspace_is_one_line(capsys, tmp_path, fake_catalog, monkeypatch):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("PERFLAB_WORK", str(tmp_path / "afile"))
    _one_line(capsys, "start", FAKE_ID, why="is not a folder")
    assert (tmp_path / "afile").read_text() == "x"


def test_force_never_replaces_a_symlink(capsys, tmp_path, trace):
    other = synthetic.gpu_bound(steps=3).write(tmp_path / "g.json")
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    cases = [("doctor", trace, "--html", "{}"), ("diff", trace, other, "--html", "{}"),
             ("diff", trace, other, "--plot", "{}"), ("memory", "convert", snap, "{}"),
             ("roofline", NCU_CSV, "--out", "{}"), ("sql", trace, "SELECT 1", "--out", "{}"),
             ("bench", "--quick", "--out", "{}")]
    suffix = {"--plot": ".png", "convert": ".json", "roofline": ".png", "sql": ".csv", "bench": ".json"}
    for args in cases:
        ext = next((suffix[a] for a in args if a in suffix), ".html")
        link = tmp_path / f"link{ext}"
        for target in (mine, tmp_path / "nowhere.txt"):  # a link to a file, a dangling link
            link.unlink(missing_ok=True)
            link.symlink_to(target)
            _one_line(capsys, *[link if a == "{}" else a for a in args], "--force", why="is a symbolic link")
            assert link.is_symlink() and os.readlink(link) == str(target), args
    assert mine.read_text() == "mine" and not (tmp_path / "nowhere.txt").exists()


def test_no_writer_makes_missing_folders(capsys, tmp_path, trace):
    other = synthetic.gpu_bound(steps=3).write(tmp_path / "g.json")
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    typo = tmp_path / "no" / "such"
    for args in (("doctor", trace, "--html", typo / "r.html"), ("diff", trace, other, "--plot", typo / "d.png"),
                 ("memory", "convert", snap, typo / "s.json"), ("roofline", NCU_CSV, "--out", typo / "r.png"),
                 ("sql", trace, "SELECT 1", "--out", typo / "q.csv"), ("bench", "--quick", "--out", typo / "c.json"),
                 ("monitor", "--csv", typo / "m.csv", "--", "true")):
        _one_line(capsys, *args, why="does not exist; create it first")
    assert not (tmp_path / "no").exists()


@pytest.fixture
def no_program(monkeypatch):
    """profile_command and the scaling sweep that would run the program: a call is a failure of the test."""
    from perflab.toolkit import profile as lib
    from perflab.toolkit import scaling

    def ran(*a, **k):
        raise AssertionError("the program ran before the output folder was checked")

    monkeypatch.setattr(lib, "profile_command", ran)
    monkeypatch.setattr(scaling, "run_scaling", ran)


def test_an_unusable_output_folder_is_refused_before_the_program_runs(capsys, tmp_path, no_program):
    script = tmp_path / "app.py"
    script.write_text("")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for cmd in ("profile", "investigate"):
        _one_line(capsys, cmd, "--out", afile / "run", "--", "python", script, why="is not a folder")
        _one_line(capsys, cmd, "--out", tmp_path / "no" / "run", "--", "python", script, why="does not exist")
    _one_line(capsys, "scale", "--gpus", "1", "--out", afile / "run", "--", script, why="is not a folder")
    _one_line(capsys, "scale", "--gpus", "1", "--out", tmp_path / "no" / "run", "--", script, why="does not exist")
    assert afile.read_text() == "x" and not (tmp_path / "no").exists()


def test_a_read_only_output_folder_is_refused_before_the_program_runs(capsys, tmp_path, no_program):
    import subprocess

    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        script = tmp_path / "app.py"
        script.write_text("")
        for cmd in ("profile", "investigate"):
            _one_line(capsys, cmd, "--out", ro / "run", "--", "python", script, why="Read-only file system")
        _one_line(capsys, "scale", "--gpus", "1", "--out", ro / "run", "--", script, why="Read-only file system")
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


def test_writing_into_a_folder_through_a_link_to_it_still_works(capsys, tmp_path, trace):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real)
    rc, _, err = cli_run(capsys, "doctor", trace, "--html", tmp_path / "linked" / "r.html")
    assert rc == 0, err
    assert (real / "r.html").is_file()
    shutil.rmtree(real)
