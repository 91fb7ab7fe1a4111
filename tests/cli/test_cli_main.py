"""The CLI's error contract: one line, exit 2, no traceback."""
import subprocess
import sys

from perflab.__main__ import main
from perflab.errors import PerflabError


def test_perflab_error_is_one_line_exit_2(monkeypatch, capsys):
    import perflab.__main__ as entry

    def boom(*a, **k):
        raise PerflabError("nothing at bad.json: give a trace file")

    class FakeApp:
        __call__ = staticmethod(boom)

    monkeypatch.setattr(entry, "build_app", lambda: FakeApp())
    assert main(["doctor", "bad.json"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "perflab: error: nothing at bad.json: give a trace file"


def test_unknown_command_exits_2_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "perflab", "no-such-command"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_bare_perflab_prints_the_help_not_an_empty_error(capsys):
    for args in ([], ["memory"]):
        assert main(args) == 0
        out, err = capsys.readouterr()
        assert "Usage: perflab" in out and "error" not in err, (args, err)


def test_flags_show_no_value_type_in_the_help(capsys):
    assert main(["doctor", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--json" in out and "<bool>" not in out and "<int>" in out  # --rank still shows its type


def test_a_name_with_control_characters_stays_one_line(capsys, tmp_path):
    for name in ("a\nb.json", "a\rb.json", "esc\x1b[31mred.json", "sep\u2028x.json"):
        assert main(["doctor", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "\r" not in err and "\x1b" not in err and "\u2028" not in err, repr(err)
        assert "no such file" in err
    assert main(["doctor", str(tmp_path / "a\nb.json")]) == 2
    assert "a\\nb.json" in capsys.readouterr().err  # shown as an escape, not dropped
