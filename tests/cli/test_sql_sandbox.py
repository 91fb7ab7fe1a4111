"""perflab sql runs the query in DuckDB's own sandbox (external access off, configuration locked), on a real DuckDB:
no statement reads a file beyond the trace's views or writes one, however the SQL is written; a result reaches disk
only through --out, which perflab writes under the rule for every output."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli_run
from perflab.trace.builders import synthetic

pytest.importorskip("duckdb")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def trace(tmp_path) -> Path:
    return synthetic.host_bound(steps=3).write(tmp_path / "in.json")


def _snapshot(folder: Path) -> dict[str, tuple]:
    """Every path under `folder` with what it is and holds (a symlink by its target, a file by its bytes)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            out[str(p)] = ("link", os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[str(p)] = ("file", p.read_bytes(), st.st_mtime_ns)
        else:
            out[str(p)] = (stat.S_IFMT(st.st_mode),)
    return out


def _one_line_refusal(capsys, *args) -> str:
    rc, out, err = cli_run(capsys, *args)
    assert rc == 2 and err.startswith("perflab: error: ") and err.count("\n") == 1, (rc, err)
    return err


def test_sql_tricks_write_nothing(capsys, tmp_path, trace):
    """Each way the tokenizer-based check let a query write over a file: block comments hiding the target,
    a prepared COPY, the profiler's and the query log's output files, a symlink. Nothing on disk changes."""
    keep = tmp_path / "keep.csv"
    keep.write_text("mine")
    link = tmp_path / "link.csv"
    link.symlink_to(keep)
    tricks = [
        f"COPY /* FROM */ (SELECT 1) TO '{trace}'",
        f"COPY (SELECT 1) /* FROM x */ TO '{keep}'",
        f"PREPARE p AS COPY (SELECT 1) TO '{keep}'; EXECUTE p",
        f"PRAGMA profiling_output='{keep}'; PRAGMA enable_profiling='json'; SELECT 1",
        f"SET profiling_output='{keep}'; SET enable_profiling='json'; SELECT 1",
        f"SET log_query_path='{keep}'; SELECT 1",
        f"COPY (SELECT 1) TO '{link}'",
        f"EXPORT DATABASE '{tmp_path / 'dump'}'",
        f"ATTACH '{tmp_path / 'x.db'}' AS x",
        "CALL enable_logging(storage='file', storage_path='.')",
        "SET enable_external_access=true; COPY (SELECT 1) TO 'x.csv'",
        "RESET lock_configuration",
        f"SET allowed_paths=['{keep}']",
        "INSTALL httpfs",
    ]
    before = _snapshot(tmp_path)
    cwd = sorted(os.listdir(Path.cwd()))
    for query in tricks:
        _one_line_refusal(capsys, "sql", trace, query)
        _one_line_refusal(capsys, "sql", trace, query, "--force")
    assert _snapshot(tmp_path) == before
    assert sorted(os.listdir(Path.cwd())) == cwd


def test_sql_reads_no_file(capsys, tmp_path, trace):
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's own secret")
    for query in (f"SELECT * FROM read_text('{secret}')", f"SELECT * FROM glob('{tmp_path}/*')",
                  f"SELECT * FROM read_csv('{secret}')", f"SELECT * FROM '{secret}'",
                  f"SELECT * FROM read_json('{trace}')", "SELECT * FROM read_text('/etc/passwd')",
                  f"SELECT * FROM sniff_csv('{secret}')"):
        rc, out, err = cli_run(capsys, "sql", trace, query, "--json")
        assert rc == 2 and "secret" not in out + err.replace(str(secret), ""), (query, out, err)
        assert err.count("\n") == 1


def test_copy_to_a_fifo_does_not_hang(tmp_path, trace):
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "perflab", "sql", str(trace), f"COPY /* FROM */ (SELECT 1) TO '{fifo}'"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_out_writes_the_result_under_the_rule_for_outputs(capsys, tmp_path, trace):
    import duckdb

    query = "SELECT name, count(*) AS n, sum(dur_ns)::BIGINT AS ns, avg(dur_ns) AS mean FROM kernels GROUP BY 1 ORDER BY 1"
    rc, out, _ = cli_run(capsys, "sql", trace, query, "--json")
    doc = json.loads(out)
    assert doc["types"] == ["VARCHAR", "BIGINT", "BIGINT", "DOUBLE"] and not doc["more_rows"]
    for name in ("r.csv", "r.json", "r.parquet"):
        rc, _, err = cli_run(capsys, "sql", trace, query, "--out", tmp_path / name)
        assert rc == 0 and f"wrote {tmp_path / name}" in err
    assert (tmp_path / "r.csv").read_text().splitlines() == ["name,n,ns,mean"] + [",".join(map(str, r)) for r in doc["rows"]]
    assert json.loads((tmp_path / "r.json").read_text()) == doc
    con = duckdb.connect()
    assert con.execute(f"SELECT * FROM '{tmp_path / 'r.parquet'}'").fetchall() == [tuple(r) for r in doc["rows"]]
    assert [str(t) for _, t, *_ in con.execute(f"SELECT * FROM '{tmp_path / 'r.parquet'}'").description] == doc["types"]

    existing = tmp_path / "r.csv"
    before = existing.read_bytes()
    assert "exists: pass --force" in _one_line_refusal(capsys, "sql", trace, query, "--out", existing)
    assert existing.read_bytes() == before
    assert "never writes over its input" in _one_line_refusal(capsys, "sql", trace, query, "--out",
                                                              trace.with_suffix(".json"), "--force")
    os.mkfifo(tmp_path / "p.csv")
    assert "a FIFO, not a regular file" in _one_line_refusal(capsys, "sql", trace, query, "--out",
                                                             tmp_path / "p.csv", "--force")
    assert ".csv, .json or .parquet" in _one_line_refusal(capsys, "sql", trace, query, "--out", tmp_path / "r.txt")
    assert not (tmp_path / "r.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".perflab-")]


def test_limit_fetches_only_what_it_shows(capsys, trace):
    """A row past the limit would raise if it were computed: --limit 5 must stop fetching there."""
    query = "SELECT CASE WHEN i < 20000000 THEN i ELSE error('fetched too far') END AS i FROM range(40000000) t(i)"
    rc, out, err = cli_run(capsys, "sql", trace, query, "--limit", "5")
    assert rc == 0, err
    assert "more not fetched" in out and "│ 4 │" in out and "│ 5 │" not in out
    rc, out, _ = cli_run(capsys, "sql", trace, query, "--limit", "3", "--json")
    assert rc == 0 and json.loads(out)["rows"] == [[0], [1], [2]] and json.loads(out)["more_rows"] is True


def test_spills_go_to_a_private_folder_removed_with_the_connection(trace):
    """DuckDB's default spill folder is .tmp in the working folder: a file the user did not ask for."""
    import gc
    import tempfile

    from perflab.analysis.reports.sql_views import open_db

    db = open_db(trace)
    (spill,), = db.query("SELECT current_setting('temp_directory')")[1]
    assert Path(spill).is_dir() and Path(spill).parent == Path(tempfile.gettempdir())
    del db
    gc.collect()
    assert not Path(spill).exists()
