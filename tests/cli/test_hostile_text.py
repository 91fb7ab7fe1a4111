"""Text from a file is data: Rich markup in a name prints as itself, control characters never reach the
terminal, the JSON keeps the name exactly and the HTML escapes it."""
from __future__ import annotations

import csv
import io
import json
import pickle
import sys
from pathlib import Path

import pytest

from conftest import FAKE_ID, cli_run, retouched_trace
from perflab.trace.builders import synthetic

REPO = Path(__file__).resolve().parents[2]
MARKUP = "aten::shard[/data/shard]"
KERNEL = "gemm[bold red]hot[/]_kernel"
ANSI = "\x1b[31mred\x1b[0m\x1b]0;pwned\x07\x1b[2J"
CONTROL = ("\x1b", "\x07", "\x9b", "\x00")


def hostile_trace(path: Path) -> Path:
    def device(doc):
        doc["deviceProperties"][0]["name"] = "GPU [/x]" + ANSI

    return retouched_trace(path, device, kernel=lambda ev, _: ev.update(name=KERNEL + ANSI),
                           cpu_op=lambda ev, _: ev.update(name=MARKUP + ANSI))


run = cli_run


def assert_clean(text: str) -> None:
    assert not any(c in text for c in CONTROL), repr(text[:400])


def test_doctor_prints_names_as_data(capsys, tmp_path):
    trace = hostile_trace(tmp_path / "t.json")
    rc, out, err = run(capsys, "doctor", trace)
    assert rc == 0, err
    assert MARKUP in out and "GPU [/x]" in out and "[31m" in out  # the escape's visible tail, its ESC gone
    assert_clean(out + err)


def test_doctor_json_keeps_the_names_and_html_escapes_them(capsys, tmp_path):
    trace = hostile_trace(tmp_path / "t.json")
    rc, out, _ = run(capsys, "doctor", trace, "--json", "--html", tmp_path / "r.html")
    doc = json.loads(out)
    assert rc == 0 and MARKUP + ANSI in doc["verdict"]
    page = (tmp_path / "r.html").read_text()
    assert "[/data/shard]" in page and "\x1b" not in page.replace("\\u001b", "")


def test_diff_prints_names_as_data(capsys, tmp_path):
    a = hostile_trace(tmp_path / "a.json")
    b = synthetic.gpu_bound(steps=3, name=KERNEL + ANSI).write(tmp_path / "b.json")
    rc, out, err = run(capsys, "diff", a, b)
    assert rc == 0, err
    assert "gemm[bold red]hot[/]_kernel" in out
    assert_clean(out + err)


def test_ncu_kernel_names_as_data(capsys, tmp_path):
    rows = list(csv.reader(open(REPO / "tests" / "data" / "ncu" / "memory_bound_scalar.csv")))
    col = rows[0].index("Kernel Name")
    for row in rows[2:]:
        row[col] = "scale[/x]" + ANSI + "(float*)"
    path = tmp_path / "k.csv"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    rc, out, err = run(capsys, "doctor", path)
    assert rc == 0 and "scale[/x]" in out, err
    assert_clean(out + err)
    rc, out, err = run(capsys, "roofline", path)
    assert rc == 0 and "scale[/x]" in out, err
    assert_clean(out + err)


def test_an_error_message_quoting_a_file_is_one_clean_line(capsys, tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("never",))

    data = pickle.dumps({"segments": [Evil()]}).replace(b"builtins", b"built\x1bin")
    snap = tmp_path / "s.pickle"
    snap.write_bytes(data)
    rc, out, err = run(capsys, "doctor", snap)
    assert rc == 2 and "refused to load" in err and err.count("\n") == 1
    assert_clean(out + err)


def test_an_answer_with_markup_is_shown_as_typed(capsys, fake_catalog, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("[/x]\nhost-sync\n"))
    rc, out, err = run(capsys, "answer", FAKE_ID, "-a", "kernel=[/oops]")
    assert rc == 1 and "[/oops]" in out, err
    monkeypatch.setattr(sys, "stdin", io.StringIO("[/x]\n"))
    rc, out, err = run(capsys, "answer", FAKE_ID)
    assert "'[/x]' is not a taxonomy id" in out and "MarkupError" not in err


@pytest.mark.parametrize("text", ["[/x]", "[bold]b[/bold]", "a\x1b[2Jb", "\x9b31m", "tab\tand\nnewline"])
def test_the_console_renders_any_text_literally_without_control_characters(text):
    from perflab.report.console import clean, safe_console

    buf = io.StringIO()
    safe_console(file=buf, width=200, highlight=False).print(text)
    assert buf.getvalue() == clean(text).expandtabs(8) + "\n"
    buf = io.StringIO()
    safe_console(file=buf, width=200, force_terminal=True).print(text)  # styles on: only Rich's own codes
    assert "\x1b[2J" not in buf.getvalue() and "\x9b" not in buf.getvalue()
