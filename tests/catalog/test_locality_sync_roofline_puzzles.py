"""Kernel puzzles 60-62 (l2-locality, inter-sm-sync, roofline-practice): their puzzle.toml, the roofline
analyses against measured ceilings (puzzles/questions/roofline.py), and the shipped H100 recordings
replayed: every question computed and graded (right answers right, wrong ones wrong), the doctor's top
finding on the slow Nsight Compute report is the planted id and the planted finding is gone from the
solution's, through the CLI too. Everything here reads recorded files; the kernels themselves run in
tests/gpu/test_kernel_puzzles_gpu.py on the device.
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import shipped_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, replay

from perflab.puzzles.evidence import ncu as ncu_evidence
from perflab.puzzles import questions
ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "src" / "perflab" / "catalog"
DATA = Path(__file__).resolve().parents[1] / "data" / "ncu"
CEILINGS = DATA / "ceilings_h100_full.json"
PUZZLES = {"l2-locality": "60-l2-locality", "inter-sm-sync": "61-inter-sm-sync",
           "roofline-practice": "62-roofline-practice"}


def puzzle(pid: str):
    return catalog.find(catalog.load_catalog([catalog.BUILTIN]), pid)


def recorded(pid: str) -> bool:
    return ncu_evidence.has(CATALOG / PUZZLES[pid] / "artifacts", "slow")


RECORDED = [pid for pid in PUZZLES if recorded(pid)]


# --- puzzle.toml ------------------------------------------------------------------------------------

@pytest.mark.parametrize("pid", PUZZLES)
def test_puzzle_toml_contract(pid):
    from perflab.doctor.finding import TAXONOMY_IDS

    folder = PUZZLES[pid]
    d = tomllib.loads((CATALOG / folder / "puzzle.toml").read_text(encoding="utf-8"))
    assert d["id"] == pid == folder.split("-", 1)[1] and d["order"] == 10 * int(folder[:2])
    assert d["taxonomy"] and all(t in TAXONOMY_IDS for t in d["taxonomy"])
    assert d["check"]["planted"] == d["taxonomy"][0] and d["check"]["speedup"] >= 1.5
    assert "ncu" in d["tools"] and d["requirements"]["packages"] == ["cupy"] and d["seeds"]
    assert len(d["hints"]) >= 3 and all(len(h) > 40 for h in d["hints"])
    for variant in ("workload", "solution", "starter"):
        assert shipped_file(CATALOG / folder, variant).is_file()
    starter = shipped_file(CATALOG / folder, "starter").read_text()
    assert "TODO" in starter and "your copy to fix" in starter


def test_l2_locality_register_tiles_compute_the_slow_formula():
    """solution.py's kernel walk (a thread per column of a tile of rows, the frames of three rows in
    registers), replayed with numpy on a small clip, gives the slow kernel's formula at every pixel."""
    np = pytest.importorskip("numpy")
    T, H, W, rows = 8, 12, 3, 4
    v = np.random.default_rng(0).random((T, H, W))
    wt = [0.05, 0.15, 0.4, 0.15, 0.05]
    slow = np.zeros_like(v)
    for t in range(T):
        for y in range(H):
            acc = sum(wt[k + 2] * v[min(max(t + k, 0), T - 1), y] for k in range(-2, 3))
            slow[t, y] = acc + 0.1 * (v[t, max(y - 1, 0)] + v[t, min(y + 1, H - 1)])
    fixed, loads = np.full_like(v, np.nan), np.zeros((T, H), dtype=int)
    for y0 in range(0, H, rows):
        prev, cur = v[:, max(y0 - 1, 0)].copy(), v[:, y0].copy()
        loads[:, max(y0 - 1, 0)] += 1
        loads[:, y0] += 1
        for y in range(y0, y0 + rows):
            nxt = v[:, min(y + 1, H - 1)].copy()
            loads[:, min(y + 1, H - 1)] += 1
            for t in range(T):
                acc = sum(wt[k + 2] * cur[min(max(t + k, 0), T - 1)] for k in range(-2, 3))
                fixed[t, y] = acc + 0.1 * (prev[t] + nxt[t])
            prev, cur = cur, nxt
    np.testing.assert_allclose(fixed, slow, rtol=1e-12)
    assert loads.sum() <= T * H * (rows + 2) / rows  # each row loaded once, plus two halo rows per tile
    src = (CATALOG / PUZZLES["l2-locality"] / "solution.py").read_text()
    assert "prev[f] = cur[f]; cur[f] = next[f];" in src and "#define NT 8" in src and "T == 8" in src


# --- the roofline analyses ---------------------------------------------------------------------------

def roofline_recording(folder: Path, slow: list[str], solution: list[str], ceilings: bool = True) -> replay.Evidence:
    """An artifacts folder whose <variant>.csv.gz holds the given real H100 fixture kernels, one report each."""
    import csv
    import io

    from perflab.trace.ncu import load

    folder.mkdir(parents=True, exist_ok=True)
    for variant, names in (("slow", slow), ("solution", solution)):
        kernels = [k for name in names for k in load(DATA / f"{name}.csv").kernels]
        # the reports' columns and units differ: write the union of the metrics in base units
        columns = ["ID", "Kernel Name"] + sorted({m for k in kernels for m in k.metrics} - {"ID", "Kernel Name"})
        buf = io.StringIO()
        w = csv.writer(buf, quoting=csv.QUOTE_ALL)
        w.writerow(columns)
        w.writerow([""] * len(columns))
        for i, k in enumerate(kernels):
            cells = {"ID": str(i), "Kernel Name": k.full_name}
            cells.update({m: repr(v) if isinstance(v, float) else str(v) for m, v in k.metrics.items()
                          if m not in cells})
            w.writerow([cells.get(c, "") for c in columns])
        with gzip.open(ncu_evidence.csv_file(folder, variant), "wt", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
    if ceilings:
        shutil.copyfile(CEILINGS, folder / "ceilings.json")
    return replay.Evidence(folder, "zz-roofline")


def test_roofline_point_uses_the_recorded_measured_ceilings(tmp_path):
    from perflab.analysis.work.roofline import ceilings_from, place
    from perflab.puzzles.questions import roofline as qr
    from perflab.trace.ncu import load

    ev = roofline_recording(tmp_path / "art", ["gemm_bf16_torch", "v_gemv"], ["v_gemv"])
    ceil = ceilings_from(json.loads(CEILINGS.read_text()))
    assert ceil.dram.value == pytest.approx(3046.249e9) and ceil.compute["bf16"].value == pytest.approx(763.295e12)
    gemm = place(load(DATA / "gemm_bf16_torch.csv").kernels[0], ceil)
    got = qr.roofline_point(ev, kernel="nvjet", field="intensity")
    assert got.value == pytest.approx(gemm.intensity) and got.value > 250
    ridge = qr.roofline_point(ev, kernel="nvjet", field="ridge")
    assert ridge.value == pytest.approx(763.295e12 / 3046.249e9)  # measured bf16 roof / measured DRAM roof
    assert qr.roofline_point(ev, kernel="nvjet", field="bound").value == "compute"
    gemv = qr.roofline_point(ev, kernel="gemv", field="pct_of_roof")
    k = load(DATA / "v_gemv.csv").kernels[0]
    bytes_ = k.get("dram__bytes_read.sum") + k.get("dram__bytes_write.sum")
    assert gemv.value == pytest.approx(100 * bytes_ / k.duration_s / 3046.249e9, abs=0.06)
    assert qr.roofline_point(ev, kernel="gemv", field="bound").value == "memory"
    tflops = qr.roofline_point(ev, kernel="nvjet", field="flops_per_s", scale=1e-12)
    assert tflops.value == pytest.approx(gemm.flops_per_s / 1e12)
    assert gemm.pct_of_roof > 90  # the cuBLAS GEMM at the measured bf16 roof (82 % of the datasheet's)


def test_roofline_furthest_names_the_lowest_kernel_and_grades_text(tmp_path):
    from perflab.puzzles.questions import roofline as qr

    ev = roofline_recording(tmp_path / "art", ["gemm_bf16_torch", "v_reduce", "v_matmul_naive", "v_gemv"],
                            ["v_gemv"])
    got = qr.roofline_furthest(ev)
    assert got.value == "matmul_naive" and set(got.alternatives) == {
        "reduce_sum_vec4", "gemv_warp_per_row", "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"}
    q = puzzle("roofline-practice").find_question("furthest")
    assert questions.grade(q, "matmul_naive", got).correct and questions.grade(q, "naive", got).correct
    assert not questions.grade(q, "gemv_warp_per_row", got).correct
    assert not questions.grade(q, "ma", got).correct  # too short to single anything out


def test_roofline_analyses_fail_in_one_line(tmp_path):
    from perflab.puzzles.questions import roofline as qr

    ev = roofline_recording(tmp_path / "art", ["v_gemv"], ["v_gemv"], ceilings=False)
    with pytest.raises(PerflabError, match=r"no measured ceilings in .*ceilings.json"):
        qr.roofline_point(ev, kernel="gemv", field="intensity")
    (ev.folder / "ceilings.json").write_text("{not json")
    with pytest.raises(PerflabError, match="no measured ceilings"):
        qr.roofline_furthest(ev)
    shutil.copyfile(CEILINGS, ev.folder / "ceilings.json")
    with pytest.raises(PerflabError, match="roofline field 'speed' is not one of"):
        qr.roofline_point(ev, kernel="gemv", field="speed")
    with pytest.raises(PerflabError, match="no kernel matching 'nvjet'"):
        qr.roofline_point(ev, kernel="nvjet", field="intensity")
    assert "roofline_point" in questions.ANALYSES and "roofline_furthest" in questions.ANALYSES


# --- the shipped recordings --------------------------------------------------------------------------

def wrong_answer(q, computed) -> str:
    if q.type == "number":
        return str(float(computed.value) * 2.0 + 1.0)
    if q.type == "choice":
        return next(c for c in q.choices if c.lower() != str(computed.value).lower())
    if q.type == "taxonomy":
        return "host-sync" if computed.value != "host-sync" else "launch-overhead"
    return "no-such-kernel"


@pytest.mark.parametrize("pid", RECORDED)
def test_recording_answers_grade_right_and_wrong(pid):
    p = puzzle(pid)
    ev = replay.recording(p)
    assert "H100" in ev.manifest()["gpu"]
    for q in p.questions:
        computed = questions.compute(q, ev)
        assert questions.grade(q, str(computed.value), computed).correct, q.key
        assert not questions.grade(q, wrong_answer(q, computed), computed).correct, q.key


@pytest.mark.parametrize("pid", RECORDED)
def test_doctor_on_the_shipped_reports(pid):
    from perflab.doctor.ncu import diagnose_ncu

    p = puzzle(pid)
    slow = diagnose_ncu(p.artifacts / "slow.csv.gz")
    assert slow.findings[0].id == p.check.planted and slow.findings[0].severity in ("high", "medium")
    fixed = {f.id: f.severity for f in diagnose_ncu(p.artifacts / "solution.csv.gz").findings}
    assert fixed.get(p.check.planted) not in ("high", "medium"), fixed
    m = replay.recording(p).measurements()
    assert m["speedup"]["ci_low"] >= p.check.speedup
    assert m["check"]["solution"]["passed"] and not m["check"]["starter"]["passed"]


@pytest.mark.parametrize("pid", RECORDED)
def test_cli_doctor_and_answer_on_the_recording(pid, capsys):
    from perflab.__main__ import main

    p = puzzle(pid)
    assert main(["doctor", str(p.artifacts / "slow.ncu-rep.gz"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"]["kind"] == "ncu" and report["findings"][0]["id"] == p.check.planted
    ev = replay.recording(p)
    q = next(q for q in p.questions if q.analysis == "ncu_top_id")
    assert main(["answer", pid, "-a", f"{q.key}={questions.compute(q, ev).value}"]) == 0
    assert "1/1 right" in " ".join(capsys.readouterr().out.split())
    assert main(["answer", pid, "-a", f"{q.key}=not-an-id"]) == 2


@pytest.mark.skipif("roofline-practice" not in RECORDED, reason="roofline-practice not recorded yet")
def test_roofline_practice_recording_tells_the_story():
    """Slow: GEMM compute-bound, the other three memory-bound, the GEMV furthest below its roof; the fix
    brings the GEMV near the DRAM roof and leaves the other kernels where they were."""
    from perflab.puzzles.questions import roofline as qr

    p = puzzle("roofline-practice")
    ev = replay.recording(p)
    slow = {pt.name: pt for pt in qr.roofline_model(ev, "slow").points}
    fixed = {pt.name: pt for pt in qr.roofline_model(ev, "solution").points}
    assert len(slow) == len(fixed) == 4
    gemm = next(pt for n, pt in slow.items() if re.search("nvjet|gemm|xmma|cutlass", n))
    assert gemm.bound == "compute" and gemm.path == "tensor_bf16"
    assert [slow[n].bound for n in ("rl_gelu", "rl_rowsumsq", "rl_scores")] == ["memory"] * 3
    assert qr.roofline_furthest(ev, "slow").value == "rl_scores"
    gemv_fixed = next(pt for n, pt in fixed.items() if n.startswith("rl_scores"))
    assert gemv_fixed.pct_of_roof > 2 * slow["rl_scores"].pct_of_roof and gemv_fixed.pct_of_roof > 60
    readme = (p.folder / "README.md").read_text(encoding="utf-8")
    assert "![" in readme and "roofline.png" in readme and (p.folder / "roofline.png").is_file()


@pytest.mark.skipif("roofline-practice" not in RECORDED, reason="roofline-practice not recorded yet")
def test_perflab_roofline_plots_the_shipped_reports(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from perflab.__main__ import main

    art = puzzle("roofline-practice").artifacts
    out = tmp_path / "roofline.png"
    assert main(["roofline", str(art / "slow.csv.gz"), str(art / "solution.csv.gz"), "--ceilings",
                 str(art / "ceilings.json"), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rl_scores" in capsys.readouterr().out
