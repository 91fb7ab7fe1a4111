"""Summarize the prototypes' recordings (proto/artifacts) for proto/README.md: per prototype the puzzle
size's slow and fast medians, the speed-up, and the doctor's top finding on each variant's evidence
(the ncu report; for persistent_kernel the torch.profiler trace). Runs on the CPU machine:

    python3 proto/summarize.py            # markdown table
    python3 proto/summarize.py --sweep    # every size
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ART = Path(__file__).resolve().parent / "artifacts"
EVIDENCE: dict[str, str] = {}   # prototype -> evidence suffix; default: ncu-rep.gz


def top_finding(path: Path) -> str:
    from perflab.doctor import diagnose

    if not path.exists():
        return "(not recorded)"
    report = diagnose(path)
    f = report.findings[0]
    ev = f.evidence
    unit = ev.get("limiting_unit") or ev.get("busiest_unit") or ev.get("memory_unit")
    unit = f", {unit}" if unit and f.id in ("memory-bound", "compute-bound") else ""
    return f"{f.id}{unit} ({f.severity}, {f.gain_pct:.0f} %)"


def rows(sweep: bool) -> list[str]:
    out = ["| prototype | size | slow ms | fast ms | speed-up | doctor top finding: slow / fast |",
           "|---|---|---|---|---|---|"]
    for folder in sorted(p for p in ART.iterdir() if p.is_dir()):
        timing = json.loads((folder / "timing.json").read_text())
        kind = EVIDENCE.get(folder.name, "ncu-rep.gz")
        doctor = " / ".join(top_finding(folder / f"{v}.{kind}") for v in ("slow", "fast"))
        for r in timing["rows"]:
            if "error" in r or (not sweep and r["size"] != timing["default_size"]):
                continue
            med = r["median_ms"]
            out.append(f"| {folder.name} | {r['size']} | {med['slow']:.3f} | {med['fast']:.3f} | "
                       f"{med['slow'] / med['fast']:.2f}x | {doctor if r['size'] == timing['default_size'] else ''} |")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="store_true")
    print("\n".join(rows(ap.parse_args().sweep)))
