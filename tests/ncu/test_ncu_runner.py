import gzip
import os
import stat

import pytest

from test_ncu_fixtures import csv as fixture_csv, report as fixture_report
from perflab.__main__ import main
from perflab.errors import PerflabError
from perflab.toolkit import ncu_runner
from perflab.trace.nsight_compute import ncu_tool

FAKE_NCU = """#!/bin/sh
echo "$@" >> "{log}"
case "$*" in
  *--query-metrics*) printf 'Device GH100\\ngpu__time_duration   Counter  ns  duration\\ndram__bytes_read  Counter byte x\\n';;
  *--import*) cat "{csv}";;
  *) while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
     cp "{rep}" "$out.ncu-rep"; echo "==PROF== done";;
esac
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    rep = tmp_path / "fixture.ncu-rep"
    rep.write_bytes(gzip.decompress(fixture_report("bank_conflicts").read_bytes()))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "ncu-args.log"
    script = bindir / "ncu"
    script.write_text(FAKE_NCU.format(log=log, csv=fixture_csv("bank_conflicts"), rep=rep))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_find_ncu_on_path(fake_ncu):
    assert ncu_runner.find_ncu().name == "ncu"


def test_no_ncu_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_tool, "NCU_GLOBS", (str(tmp_path / "none" / "*" / "ncu"),))
    with pytest.raises(PerflabError, match="not found on PATH or under /opt/nvidia/nsight-compute"):
        ncu_runner.find_ncu()


def test_command_never_touches_clocks_and_filters_metrics():
    metrics = ncu_runner.filter_metrics(("gpu__time_duration.sum", "made__up.sum"), {"gpu__time_duration"})
    assert metrics == ["gpu__time_duration.sum"]
    assert ncu_runner.filter_metrics(("a.sum",), None) == ["a.sum"]
    cmd = ncu_runner.build_command(ncu_runner.Path("ncu"), ncu_runner.Path("out/x"), ["python", "s.py", "--n", "3"],
                                   kernel="gemm", launch_count=2, launch_skip=1, metrics=metrics)
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:gemm" and cmd[-4:] == ["python", "s.py", "--n", "3"]
    assert "--nvtx" in cmd and cmd[cmd.index("--launch-skip") + 1] == "1"


def test_parse_query_metrics():
    text = "Device GH100\nMetric Name   Metric Type\ndram__bytes   Counter  byte  # of bytes\n  sm__throughput  Throughput %\n"
    assert ncu_runner.parse_query_metrics(text) == {"dram__bytes", "sm__throughput"}


def test_perflab_ncu_profiles_exports_and_diagnoses(fake_ncu, tmp_path, capsys):
    out = tmp_path / "prof"
    rc = main(["ncu", "--kernel", "tile", "--launch-count", "1", "--out", str(out), "--name", "run1", "--json",
               "--", "python", "script.py", "--size", "8"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert (out / "run1.ncu-rep").exists() and (out / "run1.csv").exists()
    assert '"id": "bank-conflicts"' in printed
    calls = fake_ncu.read_text().splitlines()
    profile_call = next(c for c in calls if " -o " in f" {c} ")
    assert "--clock-control none" in profile_call and "--set full" in profile_call
    assert profile_call.endswith("python script.py --size 8") and "regex:tile" in profile_call
    assert "--metrics gpu__time_duration.sum,dram__bytes_read.sum" in profile_call  # filtered by the query
    assert any("--import" in c and "--page raw --csv" in c for c in calls)


def test_perflab_ncu_without_program_is_an_error(fake_ncu, capsys):
    assert main(["ncu"]) == 2
    assert "nothing to profile" in capsys.readouterr().err


def test_perflab_ncu_without_ncu_exits_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_tool, "NCU_GLOBS", ())
    assert main(["ncu", "--", "python", "x.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perflab: error: Nsight Compute (ncu) not found") and err.count("\n") == 1
