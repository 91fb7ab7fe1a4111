"""scripts/device_tree.py: recorded data left out of a device call's tree and tracked again after, exactly; run in a
throwaway git repository (never this checkout's index)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_tree.py"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="no git")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def tool(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(repo / "scripts" / "device_tree.py"), *args], cwd=repo,
                          capture_output=True, text=True)


@pytest.fixture()
def repo(tmp_path):
    r = tmp_path / "r"
    for rel, size in [("src/perflab/catalog/01-a/artifacts/slow.trace.json.gz", 300_000),
                      ("src/perflab/catalog/01-a/workload.py", 100), ("tests/data/ncu/x.ncu-rep.gz", 200_000),
                      ("tests/data/stacks/y.trace.json.gz", 100_000), ("tests/test_a.py", 50)]:
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_bytes(b"x" * size)
    (r / "scripts").mkdir()
    shutil.copy(SCRIPT, r / "scripts" / "device_tree.py")
    git(r, "init", "-q")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    (r / ".git" / "info" / "exclude").write_text("/.whl/\n")
    return r


def travelling(repo: Path) -> set[str]:
    return set(git(repo, "ls-files").split()) | set(git(repo, "ls-files", "-o", "--exclude-standard").split())


def test_slim_leaves_the_recorded_data_out_and_restore_tracks_it_again(repo):
    before = travelling(repo)
    assert tool(repo, "slim").returncode == 0
    left = travelling(repo)
    assert left == {"src/perflab/catalog/01-a/workload.py", "tests/test_a.py", "scripts/device_tree.py"}
    assert (repo / "tests" / "data" / "ncu" / "x.ncu-rep.gz").stat().st_size == 200_000   # on disk, untouched
    assert tool(repo, "slim").returncode == 2                                             # not twice
    assert tool(repo, "restore").returncode == 0
    assert travelling(repo) == before and git(repo, "status", "--porcelain") == ""
    assert (repo / ".git" / "info" / "exclude").read_text() == "/.whl/\n"


def test_slim_refuses_an_index_with_staged_changes(repo):
    (repo / "tests" / "test_a.py").write_text("changed")
    git(repo, "add", "tests/test_a.py")
    p = tool(repo, "slim")
    assert p.returncode == 2 and "staged" in p.stderr and p.stderr.count("\n") == 1
    assert git(repo, "diff", "--cached", "--name-only").split() == ["tests/test_a.py"]
