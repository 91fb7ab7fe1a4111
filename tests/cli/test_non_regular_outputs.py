"""Every writer writes only to a regular file or a new path: a device node, FIFO, socket or a symlink to one
is refused with one line (exit 2), --force or not; a read-only or full destination is one line naming the
path the user gave. The FIFOs and device nodes are made here in tmp_path, never the machine's /dev."""
from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import cli_run
from perflab.errors import PerflabError
from perflab.outputs import check_folder, write_output
from perflab.trace.builders import synthetic

REPO = Path(__file__).resolve().parents[2]
NCU_CSV = REPO / "tests" / "data" / "ncu" / "memory_bound_scalar.csv"


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _device(path: Path) -> Path:
    try:  # /dev/null's numbers: even a writer that got through would harm nothing
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def _socket(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return path


def _link_to(make, folder: Path, name: str) -> Path:
    target = make(folder / f"real-{name}")
    link = folder / name
    link.symlink_to(target)
    return link


@pytest.fixture(params=["fifo", "device", "socket", "link-fifo", "link-device"])
def special(request, tmp_path):
    """A function name -> a non-regular path of that name in tmp_path, and the word the refusal uses."""
    kind = request.param
    make = {"fifo": _fifo, "device": _device, "socket": _socket}

    def build(name: str) -> Path:
        if kind.startswith("link-"):
            return _link_to(make[kind[5:]], tmp_path, name)
        return make[kind](tmp_path / name)
    return build, {"fifo": "a FIFO", "device": "a character device", "socket": "a socket",
                   "link-fifo": "a symlink to a FIFO", "link-device": "a symlink to a character device"}[kind]


def _unchanged(path: Path, mode: int) -> None:
    assert path.is_symlink() or not stat.S_ISREG(os.lstat(path).st_mode)
    assert stat.S_IFMT(os.stat(path).st_mode) == mode


def test_write_output_refuses_what_is_not_a_regular_file(special):
    build, kind = special
    out = build("r.html")
    mode = stat.S_IFMT(os.stat(out).st_mode)
    for force in (False, True):
        with pytest.raises(PerflabError, match=f"{kind}, not a regular file"):
            write_output(out, "x", force=force)
    _unchanged(out, mode)


def test_a_run_folder_with_a_fifo_where_a_trace_goes_is_refused(tmp_path):
    _fifo(tmp_path / "trace.json")
    with pytest.raises(PerflabError, match="a FIFO"):
        check_folder(tmp_path, force=True, holds=("*.json",))


@pytest.fixture
def trace(tmp_path) -> Path:
    return synthetic.host_bound(steps=3).write(tmp_path / "t.json")


def _refused(capsys, *args, why: str) -> None:
    rc, _, err = cli_run(capsys, *args)
    assert rc == 2 and why in err and err.count("\n") == 1, err


def test_every_cli_writer_refuses_a_special_file_with_force(capsys, tmp_path, trace, special):
    build, kind = special
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    roof_in = Path(shutil.copy(NCU_CSV, tmp_path / "k.csv"))
    other = synthetic.gpu_bound(steps=3).write(tmp_path / "g.json")
    cases = [("doctor", trace, "--html", build("d.html")),
             ("diff", trace, other, "--html", build("diff.html")),
             ("diff", trace, other, "--plot", build("diff.png")),
             ("memory", "convert", snap, build("snap.json")),
             ("roofline", roof_in, "--out", build("roof.png")),
             ("bench", "--quick", "--out", build("ceilings.json")),
             ("sql", trace, "SELECT name FROM kernels", "--out", build("q.csv"))]
    for args in cases:
        target = next(a for a in reversed(args) if isinstance(a, Path))
        mode = stat.S_IFMT(os.stat(target).st_mode)
        _refused(capsys, *args, "--force", why=f"is {kind}, not a regular file")
        _unchanged(target, mode)


def test_sql_out_follows_the_rule_for_outputs(capsys, tmp_path, trace):
    out = tmp_path / "k.csv"
    out.write_text("mine")
    query = "SELECT name FROM kernels ORDER BY 1"
    _refused(capsys, "sql", trace, query, "--out", out, why="exists: pass --force")
    assert out.read_text() == "mine"
    rc, _, err = cli_run(capsys, "sql", trace, query, "--out", out, "--force")
    assert rc == 0 and f"wrote {out}" in err
    assert out.read_text().splitlines()[0] == "name" and len(out.read_text().splitlines()) > 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".perflab-")]
    _refused(capsys, "sql", trace, query, "--out", trace, "--force", why="never writes over its input")
    _refused(capsys, "sql", trace, "ATTACH 'x.db' AS x", why="DuckDB's sandbox")
    assert not (Path.cwd() / "x.db").exists()
    rc, _, _ = cli_run(capsys, "sql", trace, "SELECT 1 AS a", "--out", tmp_path / "new.parquet")
    assert rc == 0 and (tmp_path / "new.parquet").read_bytes()[:4] == b"PAR1"


def test_a_full_or_read_only_destination_is_one_line_naming_the_users_path(capsys, tmp_path, trace, monkeypatch):
    import tempfile

    def read_only(*a, dir=None, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(Path(dir) / ".perflab-x"))

    out = tmp_path / "r.html"
    with monkeypatch.context() as m:
        m.setattr(tempfile, "mkstemp", read_only)
        rc, _, err = cli_run(capsys, "doctor", trace, "--html", out)
    assert rc == 2 and err == f"perflab: error: cannot write {out}: Read-only file system\n"

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(Path, "write_bytes", full)
        rc, _, err = cli_run(capsys, "doctor", trace, "--html", out)
    assert rc == 2 and err == f"perflab: error: cannot write {out}: No space left on device (the disk is full)\n"
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".perflab-")]


@contextlib.contextmanager
def _tmpfs(folder: Path, options: str):
    folder.mkdir()
    try:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
    except FileNotFoundError:
        pytest.skip("no mount command")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_real_read_only_and_a_real_full_filesystem(capsys, tmp_path, trace):
    with _tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        rc, _, err = cli_run(capsys, "doctor", trace, "--html", ro / "r.html")
        assert rc == 2 and err == f"perflab: error: cannot write {ro / 'r.html'}: Read-only file system\n", err
        rc, _, err = cli_run(capsys, "sql", trace, "SELECT 1", "--out", ro / "k.csv")
        assert rc == 2 and f"cannot write {ro / 'k.csv'}" in err and ".perflab-" not in err, err
    with _tmpfs(tmp_path / "full", "size=8k") as full:
        rc, _, err = cli_run(capsys, "doctor", trace, "--html", full / "r.html")
        assert rc == 2 and f"cannot write {full / 'r.html'}: No space left on device" in err, err
        assert err.count("\n") == 1 and not list(full.iterdir())
