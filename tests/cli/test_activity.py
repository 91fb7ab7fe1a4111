"""Progress on long commands: a spinner with the stage on stderr, only on a terminal and never with --json."""
from __future__ import annotations

import time

import pytest

from conftest import cli_run
from perflab.cli import activity as act
from perflab.trace.builders import synthetic


@pytest.fixture
def trace(tmp_path):
    return synthetic.host_bound(steps=3).write(tmp_path / "t.json")


def test_the_spinner_names_the_stage_on_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(act, "on_terminal", lambda: True)
    with act.activity(after_s=0.0) as say:
        say("reading big.json")
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert "reading big.json" in err


def test_a_quick_command_shows_nothing(capsys, monkeypatch):
    monkeypatch.setattr(act, "on_terminal", lambda: True)
    with act.activity(after_s=5.0) as say:
        say("reading small.json")
    assert capsys.readouterr().err == ""


def test_doctor_stats_diff_sql_say_what_they_do_on_a_terminal_only(capsys, monkeypatch, trace, tmp_path):
    import perflab.doctor as doctor

    real = doctor.diagnose

    def slow(*a, **k):
        time.sleep(0.3)
        return real(*a, **k)

    monkeypatch.setattr(doctor, "diagnose", slow)
    monkeypatch.setattr(act, "SHOW_AFTER_S", 0.0)
    other = synthetic.gpu_bound(steps=3).write(tmp_path / "g.json")
    runs = [(["doctor", trace], "diagnosing"), (["stats", trace], "reading"), (["diff", trace, other], "diagnosing"),
            (["sql", trace, "SELECT count(*) FROM kernels"], "reading")]
    for args, stage in runs:  # piped (as under pytest): nothing on stderr
        rc, _, err = cli_run(capsys, *args)
        assert rc == 0 and stage not in err, (args, err)
    monkeypatch.setattr(act, "on_terminal", lambda: True)
    rc, out, err = cli_run(capsys, "doctor", trace, "--json")
    assert rc == 0 and err == "" and out.startswith("{")
    rc, _, err = cli_run(capsys, "doctor", trace)
    assert rc == 0 and "diagnosing" in err
