"""Help a user can follow on their own machine: the taxonomy ships with the package (`perflab taxonomy`), errors
name commands (never a file of the repository or one of its scripts), printed paths open and printed commands
run where the user is, usage errors are one line, and help text keeps its brackets."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from conftest import cli_run
from perflab.doctor.finding import TAXONOMY_IDS
from perflab.doctor.taxonomy import entries, table_rows

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "perflab"
SHARED = REPO.parent / "shared" / "TAXONOMY.md"


def test_the_packaged_taxonomy_is_the_projects_table():
    if not SHARED.is_file():
        pytest.skip("../shared/TAXONOMY.md is not here")
    assert table_rows((SRC / "doctor" / "taxonomy.md").read_text()) == table_rows(SHARED.read_text())


def test_every_id_has_its_level_meaning_evidence_and_fix():
    table = entries()
    assert list(table) and set(table) == set(TAXONOMY_IDS)
    for tid, e in table.items():
        assert e.level == TAXONOMY_IDS[tid] and e.meaning and e.evidence and len(e.fix) > 20, tid


def test_perflab_taxonomy_prints_an_id_and_lists_them_all(capsys):
    rc, out, _ = cli_run(capsys, "taxonomy", "pageable-memcpy")
    assert rc == 0 and out.startswith("pageable-memcpy  (system level)")
    flat = " ".join(out.split())
    assert "means: copies from/to pageable host memory" in flat and "evidence: Memcpy ... (Pageable -> Device)" in flat
    assert "fix: Copy from pinned host memory" in flat and "pageable-copies" in flat  # the puzzle that teaches it
    rc, out, _ = cli_run(capsys, "taxonomy", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "perflab.taxonomy/1" and [i["id"] for i in doc["ids"]] == list(entries())
    rc, out, err = cli_run(capsys, "taxonomy", "memcopy")
    assert rc == 2 and not out and err.count("\n") == 1 and "perflab taxonomy lists them" in err


def test_no_error_sends_the_user_to_a_repository_file_or_script():
    said = re.compile(r"(PerflabError|UnreadableInput|NeedsGPU|ValueError)\((?:[^()]|\([^()]*\))*?"
                      r"(TAXONOMY\.md|scripts/|docs/)", re.S)
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if said.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_usage_errors_are_one_line(capsys):
    for args in (["doctr", "x"], ["doctor"], ["doctor", "t.json", "--bogus"], ["stats", "f", "--top", "many"]):
        rc, out, err = cli_run(capsys, *args)
        assert rc == 2 and not out and err.count("\n") == 1 and err.startswith("perflab: error: "), (args, err)
        assert "--help" in err


def _help_texts(cmd) -> list[str]:
    texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
    return [t.replace("\\[", "[") for t in texts]


def test_help_keeps_its_brackets(capsys, monkeypatch):
    import typer

    from perflab.__main__ import build_app

    monkeypatch.setenv("COLUMNS", "400")
    group = typer.main.get_command(build_app())
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            continue
        wanted = {m for t in _help_texts(cmd) for m in re.findall(r"\[[\w:-]+\]?", t)}
        if not wanted:
            continue
        rc, out, _ = cli_run(capsys, name, "--help")
        flat = " ".join(out.replace("│", " ").split())
        assert rc == 0 and all(w in flat for w in wanted), (name, [w for w in wanted if w not in flat])
    rc, out, _ = cli_run(capsys, "sql", "--help")
    assert "pip install 'perflab[sql]'" in " ".join(out.replace("│", " ").split())


def test_a_recorded_program_becomes_one_this_machine_can_run(tmp_path):
    from perflab.doctor.investigation_files import by_hand, runnable_here

    recorded = ["/opt/torch/.venv/bin/python3", "-m", "perflab.puzzles.evidence.marked_steps",
                "/work/main/.walk/src/perflab/catalog/65-walk/workload.py", "--steps", "10"]
    here = runnable_here(recorded)
    assert here[0] == sys.executable and here[1:3] == recorded[1:3] and here[4:] == recorded[4:]
    assert Path(here[3]) == SRC / "catalog" / "65-walk" / "workload.py" and Path(here[3]).is_file()
    mine = [sys.executable, str(tmp_path / "train.py")]
    assert runnable_here(mine) == mine  # a user's own program is left as it is
    assert by_hand(tmp_path / "inv") == tmp_path / "inv" / "by-hand"
    assert by_hand(SRC / "catalog" / "65-walk" / "artifacts" / "slow.investigation") == \
        Path("perflab-by-hand") / "slow.investigation"  # never into the installed package


def test_the_walk_puzzles_by_hand_commands_run_here(capsys):
    folder = SRC / "catalog" / "65-walk" / "artifacts" / "slow.investigation"
    rc, out, _ = cli_run(capsys, "doctor", folder, "--json")
    doc = json.loads(out)
    commands = [c for level in doc["levels"] for c in (level.get("commands") or {}).values()]
    commands += [c for level in doc["levels"] for k in level.get("kernels") or [] for c in (k.get("commands") or {}).values()]
    assert rc == 0 and commands
    for c in commands:
        assert "/opt/torch" not in c and "/.walk/" not in c and "artifacts/slow.investigation/by-hand" not in c, c


def test_show_and_hint_name_paths_that_open_from_anywhere(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    rc, out, _ = cli_run(capsys, "show", "02-host-sync")
    mentioned = re.findall(r"(\S*artifacts/[\w.]+\.gz)", out)
    assert rc == 0 and mentioned
    assert all(Path(m.strip("(),")).is_file() for m in mentioned), mentioned


def test_stats_shows_every_column_that_fits(capsys, monkeypatch):
    trace = SRC / "catalog" / "02-host-sync" / "artifacts" / "slow.trace.json.gz"
    for width, want in ((200, ("Min", "Max", "StdDev", "Avg")), (100, ("Min", "Max", "Avg"))):
        monkeypatch.setenv("COLUMNS", str(width))
        rc, out, _ = cli_run(capsys, "stats", trace, "-r", "cuda_gpu_kern_sum")
        header = next(line for line in out.splitlines() if "Time (%)" in line)
        cells = [c.strip() for c in header.strip("┃").split("┃")]
        assert rc == 0 and all(w in cells for w in want) and "" not in cells, (width, header)
        assert max(len(line) for line in out.splitlines()) <= width
