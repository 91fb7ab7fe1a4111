"""The doctor set (toolkit/ncu_metrics.py): what `perflab investigate` asks Nsight Compute for instead of `--set full`.

On every full-set report in the repository (H100 fixtures and the catalog's recordings): the kernel doctor looks up
no metric outside the set, and the report cut down to the set (its metrics, the warp-stall family of WarpStateStats,
the source counters of SourceCounters, the raw page's identity columns) gets the very same diagnosis. A rule that
starts reading another metric fails here until the set names it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from perflab.toolkit.ncu_metrics import DOCTOR_SECTIONS, DOCTOR_SET, SOURCE_METRICS, STALL_FAMILY, doctor_metrics

ROOT = Path(__file__).resolve().parents[2]
REPORTS = sorted([*ROOT.glob("tests/data/ncu/*.csv"), *ROOT.glob("tests/data/investigate/*/*.csv"),
                  *ROOT.glob("src/perflab/catalog/*/artifacts/*.ncu-rep.gz")])
IDENTITY = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
            "Grid Size", "Device", "CC"}
STALLS = re.compile(STALL_FAMILY)


def collected(name: str) -> bool:
    return name in IDENTITY or name in SOURCE_METRICS or name in doctor_metrics() or bool(STALLS.match(name))


class LookUps(dict):
    """A kernel's metrics that remember which names were looked up (iteration is the stall family's reading)."""

    seen: set[str] = set()

    def get(self, key, default=None):
        LookUps.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        LookUps.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        LookUps.seen.add(key)
        return super().__contains__(key)


def diagnosis(profile) -> dict:
    from perflab.doctor.ncu import diagnose_profile

    d = diagnose_profile(profile).to_dict()
    for k in d["analyses"]["kernels"]:
        k.pop("ncu_rules", None)   # ncu's own guided analysis beside ours: it comes with the sections, decides nothing
    d["analyses"].pop("ncu_rules_note", None)
    return d


def test_there_are_full_set_reports_to_check():
    assert len(REPORTS) >= 40


@pytest.mark.parametrize("path", REPORTS, ids=[f"{p.parent.name}/{p.name}" for p in REPORTS])
def test_a_report_cut_to_the_doctor_set_gets_the_same_diagnosis(path):
    from perflab.trace.ncu import load

    full, cut = load(path), load(path)
    for k in full.kernels:
        k.metrics = LookUps(k.metrics)
    for k in cut.kernels:
        k.metrics = {n: v for n, v in k.metrics.items() if collected(n)}
    LookUps.seen = set()
    assert diagnosis(cut) == diagnosis(full)
    outside = sorted(n for n in LookUps.seen if not collected(n))
    assert not outside, f"the kernel doctor reads metrics the doctor set does not collect: {outside}"


def test_the_doctor_set_is_sections_not_the_full_set(tmp_path):
    from perflab.toolkit.ncu_runner import build_command

    cmd = build_command(Path("ncu"), tmp_path / "r", ["python", "app.py"], kernel="^(a|b)$", section_set=DOCTOR_SET,
                        launch_count=3, launch_skip=7, metrics=list(doctor_metrics()), kill=True)
    assert "--set" not in cmd and [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"] == list(DOCTOR_SECTIONS)
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:^(a|b)$" and cmd[cmd.index("--metrics") + 1].split(",") == \
        list(doctor_metrics())
    assert (cmd[cmd.index("--launch-skip") + 1], cmd[cmd.index("--launch-count") + 1]) == ("7", "3")
    full = build_command(Path("ncu"), tmp_path / "r", ["python", "app.py"], section_set="full")
    assert full[full.index("--set") + 1] == "full" and "--section" not in full
