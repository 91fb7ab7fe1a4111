"""Progress and run history in SQLite (WAL), including two processes writing at once."""
import sqlite3
import subprocess
import sys
import textwrap

from perflab.puzzles.engine.progress import ProgressDB, PuzzleStatus, db_path


def test_db_lives_in_perflab_home(tmp_path):
    assert db_path() == tmp_path / "home" / "progress.sqlite3"
    with ProgressDB() as db:
        assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db_path().is_file()


def test_statuses_hints_runs_and_reset():
    keys = ["cause", "syncs"]
    with ProgressDB() as db:
        db.add_event("p1", "answer", "cause", "gpu-idle", False)
        db.add_event("p1", "answer", "cause", "host-sync", True)
        db.add_event("p1", "hint", "2")
        db.add_event("p1", "hint", "1")
        db.add_run("p1", "slow", "replay", None, 1.5)
        st = db.statuses()["p1"]
        assert st.right == {"cause"} and st.wrong == 1 and st.hints == 2 and st.runs == 1
        assert db.hints_seen("p1") == 2 and db.hints_seen("p2") == 0
        assert not st.diagnosed(keys) and st.label(keys) == ""
        db.add_event("p1", "answer", "syncs", "2", True)
        assert db.statuses()["p1"].label(keys) == "diagnosed"
        db.add_event("p1", "check", ok=False, detail={"why": "slow"})
        assert db.statuses()["p1"].label(keys) == "diagnosed"
        db.add_event("p1", "check", ok=True)
        st = db.statuses()["p1"]
        assert st.checked and st.checks == 2 and st.label(keys) == "solved"
        assert db.runs("p1")[0]["step_time_ms"] == 1.5
        db.reset()
        assert db.statuses() == {} and db.runs() == []
    assert PuzzleStatus("x", checked=True).label(keys) == "fixed"
    assert PuzzleStatus("x").label([]) == ""


WRITER = textwrap.dedent('''
    import sys, time
    from perflab.puzzles.engine.progress import ProgressDB
    name, n = sys.argv[1], int(sys.argv[2])
    start = time.time()
    for i in range(n):
        with ProgressDB() as db:          # a fresh connection each time, like separate perflab commands
            db.add_event(name, "answer", f"k{i}", str(i), i % 2 == 0)
            db.add_run(name, "slow", "live", None, float(i))
    print(start, time.time())
''')


def test_two_processes_writing_at_once_do_not_corrupt_it():
    n = 150
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, name, str(n)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    spans = [tuple(map(float, out.split())) for out, _ in outs]
    assert max(s for s, _ in spans) < min(e for _, e in spans), "the writers did not overlap"
    conn = sqlite3.connect(db_path())
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert dict(conn.execute("SELECT puzzle, COUNT(*) FROM events GROUP BY puzzle").fetchall()) == {"a": n, "b": n}
    assert dict(conn.execute("SELECT puzzle, COUNT(*) FROM runs GROUP BY puzzle").fetchall()) == {"a": n, "b": n}
    conn.close()
    with ProgressDB() as db:
        st = db.statuses()
        assert len(st["a"].right) == n // 2 and st["b"].wrong == n // 2
