"""The recorded Nsight Compute fixtures (tests/data/ncu, recorded by scripts/record.py ncu-fixtures):
helpers the other test_ncu_* modules import, and a check of the fixture tables."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ncu"
TABLE = ROOT / "fixtures" / "kernels" / "FIXTURES"
VALIDATION = ROOT / "fixtures" / "kernels" / "VALIDATION"
GAINS = ROOT / "fixtures" / "kernels" / "GAINS"     # recorded by scripts/record.py gain-fixtures


def table_rows(table: Path = TABLE) -> list[tuple[str, str]]:
    """(name, expected top taxonomy id) for every line of a fixture table (FIXTURES or VALIDATION)."""
    rows = []
    for line in table.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, planted = line.split()[:2]
            rows.append((name, planted))
    return rows


def fixtures(table: Path = TABLE) -> list[tuple[str, str]]:
    """The rows of a fixture table whose recording is in tests/data/ncu."""
    return [(n, p) for n, p in table_rows(table) if csv(n).exists()]


def pending(table: Path = TABLE) -> list[str]:
    """Fixtures written but not recorded yet (scripts/record.py ncu-fixtures on the GPU machine)."""
    return [n for n, _ in table_rows(table) if not csv(n).exists() and not report(n).exists()]


def report(name: str) -> Path:
    return DATA / f"{name}.ncu-rep.gz"


def csv(name: str) -> Path:
    """The raw-page CSV: NAME.csv, or NAME.csv.gz (the gain fixtures: the CSV alone, compressed, holds every metric
    the doctor reads; their .ncu-rep files, 2.8 MB, stay with the recording's manifest)."""
    plain = DATA / f"{name}.csv"
    return plain if plain.exists() or not (DATA / f"{name}.csv.gz").exists() else DATA / f"{name}.csv.gz"


@lru_cache(maxsize=None)
def has_ncu_report() -> bool:
    from perflab.trace.ncu import load_ncu_report_module

    return load_ncu_report_module() is not None


def puzzle_path(puzzle: str, variant: str) -> Path:
    """A catalog puzzle's H100 recording (src/perflab/catalog/PUZZLE/artifacts/VARIANT.ncu-rep.gz, made by
    scripts/record.py puzzle); skips where the ncu_report module is not here. A missing file fails."""
    path = ROOT / "src" / "perflab" / "catalog" / puzzle / "artifacts" / f"{variant}.ncu-rep.gz"
    assert path.exists(), path
    if not has_ncu_report():
        pytest.skip("the ncu_report module is not here")
    return path


def puzzle_report(puzzle: str, variant: str):
    """The doctor's report of a puzzle's recording (see puzzle_path)."""
    from perflab.doctor.ncu import diagnose_ncu

    return diagnose_ncu(puzzle_path(puzzle, variant))


@lru_cache(maxsize=None)
def profile(name: str, source: str):
    """Loaded once per test session: source 'csv' or 'rep'."""
    from perflab.trace.ncu import load

    return load(csv(name) if source == "csv" else report(name))


def test_every_fixture_line_names_a_taxonomy_id_and_a_source():
    from perflab.doctor.finding import TAXONOMY_IDS

    for table in (TABLE, VALIDATION, GAINS):
        for line in table.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            name, planted, regex, skip, *program = line.split()
            assert planted in TAXONOMY_IDS and int(skip) >= 0 and program, line
            source = program[-1] if program[0] == "python3" else program[0].replace("build/fixtures/", "")
            assert (ROOT / source).exists() or (ROOT / "fixtures" / "kernels" / f"{source}.cu").exists(), line


def test_fixtures_waiting_for_their_recording():
    """A fixture line is either recorded (report and CSV) or waiting for its recording, never half there."""
    for table in (TABLE, VALIDATION):
        for name, _ in table_rows(table):
            assert csv(name).exists() == report(name).exists(), name
    waiting = pending(TABLE) + pending(VALIDATION)
    gains = pending(GAINS)
    if waiting or gains:
        pytest.skip(f"not recorded yet: {', '.join(waiting + gains)} (run scripts/record.py ncu-fixtures"
                    + (", and scripts/record.py gain-fixtures for the GAINS lines," if gains else "")
                    + " on the GPU machine)")
