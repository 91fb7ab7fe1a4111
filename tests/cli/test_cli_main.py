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
