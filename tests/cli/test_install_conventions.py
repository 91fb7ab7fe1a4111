"""Install and conventions: ncu-report where NVIDIA ships wheels (and the exact advice elsewhere), plots from
the README's install (one message when matplotlib is gone), --version, bash completion, the README's
commands and what the tests need."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import cli_run

REPO = Path(__file__).resolve().parents[2]
PERFLAB_BIN = Path(sys.executable).parent / "perflab"


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_ncu_report_is_a_dependency_exactly_where_wheels_exist():
    packaging = pytest.importorskip("packaging.requirements")
    from perflab.trace.ncu import NCU_REPORT, NCU_REPORT_MARKER, ncu_report_wheel

    deps = [packaging.Requirement(d) for d in _pyproject()["project"]["dependencies"]]
    ncu = next(d for d in deps if d.name == "ncu-report")
    assert str(ncu.specifier) == NCU_REPORT.split("ncu-report")[1]
    assert str(ncu.marker) == str(packaging.Requirement(f"x; {NCU_REPORT_MARKER}").marker)
    # the wheels of ncu-report 2026.3.1 on PyPI (cp37-abi3): manylinux_2_25 x86_64/aarch64, win amd64/arm64,
    # macosx_13_0 x86_64/arm64
    envs = [("CPython", "linux", "x86_64", "6.8.0", True), ("CPython", "linux", "aarch64", "6.1", True),
            ("CPython", "win32", "AMD64", "10", True), ("CPython", "win32", "ARM64", "11", True),
            ("CPython", "darwin", "arm64", "23.4.0", True), ("CPython", "darwin", "x86_64", "22.1.0", True),
            ("CPython", "darwin", "x86_64", "21.6.0", False), ("CPython", "linux", "ppc64le", "5.14", False),
            ("CPython", "freebsd14", "amd64", "14.0", False), ("PyPy", "linux", "x86_64", "6.8.0", False)]
    for impl, system, machine, release, wheel in envs:
        env = {"platform_python_implementation": impl, "sys_platform": system, "platform_machine": machine,
               "platform_release": release}
        assert ncu.marker.evaluate(env) is wheel and ncu_report_wheel(env) is wheel, env


def test_without_the_module_a_report_says_exactly_what_to_do(monkeypatch, tmp_path):
    from perflab.errors import UnreadableInput
    from perflab.trace import ncu

    rep = tmp_path / "k.ncu-rep"
    rep.write_bytes(ncu.REP_MAGIC + bytes(64))
    monkeypatch.setattr(ncu, "load_ncu_report_module", lambda: None)
    monkeypatch.setattr(ncu, "_export_with_ncu", lambda report: None)
    with pytest.raises(UnreadableInput, match=r"python3 -m pip install 'ncu-report>=2026\.3\.1'"):
        ncu.load(rep)
    monkeypatch.setattr(ncu, "_this_platform", lambda: {"platform_python_implementation": "CPython",
                                                        "sys_platform": "linux", "platform_machine": "ppc64le",
                                                        "platform_release": "5.14"})
    with pytest.raises(UnreadableInput, match=r"no ncu-report wheel for this platform \(linux ppc64le\).*"
                                              r"ncu --import k.ncu-rep --page raw --csv > k.csv.*NCU_PYTHON_PATH"):
        ncu.load(rep)


def test_the_readme_install_reads_an_ncu_rep_and_draws(capsys, tmp_path):
    """ncu-report and matplotlib come with `pip install -e .` (here: the test venv, which has both)."""
    from importlib.metadata import requires

    needs = " ".join(requires("perflab"))
    assert "matplotlib" in needs.split("extra ==")[0] and "ncu-report" in needs
    rep = REPO / "tests" / "data" / "ncu" / "bank_conflicts.ncu-rep.gz"
    rc, out, err = cli_run(capsys, "roofline", rep, "--out", tmp_path / "r.png")
    assert rc == 0 and (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG", err


HIDE_MATPLOTLIB = textwrap.dedent("""
    import sys
    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name == "matplotlib" or name.startswith("matplotlib."):
                raise ImportError("matplotlib is hidden by the test")
    sys.meta_path.insert(0, Hide())
""")
RUN_CLI = HIDE_MATPLOTLIB + "from perflab.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
SCALE_PLOT = HIDE_MATPLOTLIB + textwrap.dedent("""
    from perflab.errors import PerflabError
    from perflab.toolkit import scaling
    try:
        scaling.plot({"points": [{"step_ms": 1.0, "nproc": 1}], "mode": "strong"}, "x.png")
    except PerflabError as exc:
        print(exc)
""")


def test_every_plot_command_says_the_same_one_thing_without_matplotlib(tmp_path):
    from perflab.report.plotting import PLOTS_NEED

    trace = REPO / "src" / "perflab" / "catalog" / "02-host-sync" / "artifacts" / "slow.trace.json.gz"
    ncu_csv = REPO / "tests" / "data" / "ncu" / "bank_conflicts.csv"
    for args in (["diff", trace, trace, "--plot", tmp_path / "d.png"], ["roofline", ncu_csv, "--out", tmp_path / "r.svg"]):
        proc = subprocess.run([sys.executable, "-c", RUN_CLI, *map(str, args)], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2 and proc.stderr == f"perflab: error: {PLOTS_NEED}\n", (args, proc.stderr)
    # perflab scale draws through the same door, after its runs
    proc = subprocess.run([sys.executable, "-c", SCALE_PLOT], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.stdout.strip() == PLOTS_NEED, proc.stderr


def test_version(capsys):
    from perflab import __version__

    rc, out, _ = cli_run(capsys, "--version")
    assert rc == 0 and out == f"perflab {__version__}\n"


@pytest.mark.skipif(shutil.which("bash") is None or not PERFLAB_BIN.exists(), reason="needs bash and the perflab script")
def test_bash_completion_installs_and_completes(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{PERFLAB_BIN.parent}{os.pathsep}{os.environ['PATH']}",
           "SHELL": "/bin/bash"}
    proc = subprocess.run([str(PERFLAB_BIN), "--install-completion", "bash"], capture_output=True, text=True, env=env,
                          timeout=60)
    script = tmp_path / ".bash_completions" / "perflab.sh"
    assert proc.returncode == 0 and script.is_file(), proc.stderr
    assert str(script) in (tmp_path / ".bashrc").read_text()

    def complete(*words: str) -> list[str]:
        cmd = (f"source {script}; COMP_WORDS=({' '.join(repr(w) for w in ('perflab', *words))}); "
               f"COMP_CWORD={len(words)}; _perflab_completion perflab; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
        done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=60)
        return done.stdout.split()

    assert complete("doc") == ["doctor"]
    assert complete("memory", "") == ["convert", "record"]
    assert "--html" in complete("doctor", "--h") and "--force" in complete("memory", "convert", "--f")


def test_the_readme_says_what_the_tests_need():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    setup = ["python3 -m pip install -e . && perflab run launch-overhead",
             "python3 -m pip install -e '.[test]' torch==2.13.0 && python3 -m pytest -q"]
    assert all(cmd in readme for cmd in setup)
    assert "python3 -m pip install -q -e '.[test]' torch==2.13.0 && python3 -m pytest -q" in ci  # the same, quieter
    need = readme.split("## What the tests need")[1].split("\n## ")[0]
    for word in ("Chromium", "/usr/bin/chromium", "tests/cli/test_html_browser.py", "playwright install", "../shared"):
        assert word in need, word


def test_every_test_room_is_on_pytests_path():
    # tests share helpers across rooms by module name; a room missing from pyproject's pythonpath breaks that
    listed = set(_pyproject()["tool"]["pytest"]["ini_options"]["pythonpath"])
    rooms = {f"tests/{d.name}" for d in (REPO / "tests").iterdir() if d.is_dir() and any(d.glob("test_*.py"))}
    assert rooms <= listed, sorted(rooms - listed)
