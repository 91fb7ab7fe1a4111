"""`perflab profile --html`: the doctor's report written after the run (the run itself is stubbed with a
recorded H100 trace here; tests/gpu/test_toolkit_gpu.py runs it for real on the GPU)."""
import html as html_lib
import shutil
from pathlib import Path

from perflab.__main__ import main
from perflab.doctor import diagnose
from perflab.toolkit import profile as lib

TRACE = (Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog" / "02-host-sync" / "artifacts"
         / "slow.trace.json.gz")
PROCESSES = [{"pid": 1, "rank": None, "torch": True, "steps_by": "top-level nn.Module calls", "boundaries": 12,
              "recorded_steps": 10, "trace": "x"}]


def test_profile_writes_the_html_report(monkeypatch, capsys, tmp_path):
    out, html = tmp_path / "prof", tmp_path / "report.html"
    trace = out / "trace.json.gz"
    seen = []

    def run(cmd, **kw):
        seen.append(kw["out"])
        kw["out"].mkdir(exist_ok=True)
        shutil.copy(TRACE, trace)
        return lib.ProfiledRun(0, [trace], PROCESSES)

    monkeypatch.setattr(lib, "profile_command", run)
    target = tmp_path / "s.py"
    target.write_text("")
    assert main(["profile", "--out", str(out), "--html", str(html), "--", "python", str(target)]) == 0
    stdout = capsys.readouterr().out
    assert seen == [out]
    verdict = diagnose(trace).verdict
    assert f"doctor: {verdict}" in stdout and f"HTML report -> {html}" in stdout
    page = html_lib.unescape(html.read_text())
    assert verdict in page and "host-sync" in page and "<svg class='chart lanes'" in page


def test_profile_refuses_an_existing_html_before_running(monkeypatch, capsys, tmp_path):
    html = tmp_path / "report.html"
    html.write_text("mine")
    ran = []
    monkeypatch.setattr(lib, "profile_command", lambda *a, **k: ran.append(1))
    target = tmp_path / "s.py"
    target.write_text("")
    assert main(["profile", "--html", str(html), "--", "python", str(target)]) == 2
    err = capsys.readouterr().err
    assert "exists: pass --force" in err and err.count("\n") == 1
    assert ran == [] and html.read_text() == "mine"
