"""What the doctor says, rank by rank, on recorded multi-GPU puzzles: the planted cause first on the slow
ranks, gone on the fix. No GPU needed (it reads the recorded per-rank traces).

    record.py multigpu-doctor [IDS...] [--root DIR] [--jsonl FILE]

--root: a recording's folder of <NN-slug>/artifacts/ (`record.py puzzle --out DIR`), default the catalog; ids:
default every multi-GPU puzzle of the catalog. One JSON line per puzzle (stdout, and appended to --jsonl): per variant and rank the doctor's ids
with gains, its comm-below-roof / pipeline-bubble evidence when present, and the verdicts
planted_first_on (ranks of slow where the planted id comes first) and planted_on_fix (ranks of the solution
that still report it). A puzzle without recorded ranks says so. Exit 0 when every puzzle read had its
planted id first on some slow rank and on no fixed rank, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import recorders.common  # noqa: F401  (this tree's src first)
from perflab.puzzles.engine import catalog  # noqa: E402
from perflab.trace.kineto import load_ranks  # noqa: E402

SHOWN = ("comm-below-roof", "pipeline-bubble", "comm-not-overlapped", "load-imbalance")


def _variant(folder: Path) -> dict:
    from perflab.doctor import diagnose_trace

    ranks = load_ranks(folder)
    out = {}
    for t in ranks:
        rep = diagnose_trace(ranks, rank=t.rank)
        out[t.rank] = {"ids": [[f.id, f.gain_pct] for f in rep.findings],
                       "evidence": {f.id: f.evidence for f in rep.findings if f.id in SHOWN}}
    return out


def check(p, root: Path | None) -> dict:
    arts = (root / p.folder.name / "artifacts") if root else p.artifacts
    planted = p.check.planted if p.check else None
    row: dict = {"puzzle": p.id, "planted": planted, "artifacts": str(arts)}
    for variant in ("slow", "solution"):
        folder = arts / f"{variant}.ranks"
        row[variant] = _variant(folder) if folder.is_dir() else None
    if row["slow"] is None:
        row["verdict"] = "not recorded"
        return row
    row["planted_first_on"] = [r for r, d in row["slow"].items() if d["ids"] and d["ids"][0][0] == planted]
    row["planted_on_fix"] = [r for r, d in (row["solution"] or {}).items() if planted in [i for i, _ in d["ids"]]]
    ok = bool(row["planted_first_on"]) and not row["planted_on_fix"] and row["solution"] is not None
    row["verdict"] = "ok" if ok else "doctor disagrees"
    return row


def multi_gpu(puzzles: list) -> list[str]:
    """The ids of the catalog's puzzles that run on more than one GPU."""
    return [p.id for p in puzzles if p.requirements.gpus > 1]


def main(argv: list[str], prog: str = "record.py multigpu-doctor") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*", help="puzzle ids (default: every multi-GPU puzzle)")
    ap.add_argument("--root", type=Path, help="a recording folder of <NN-slug>/artifacts/ (default: the catalog)")
    ap.add_argument("--jsonl", type=Path, help="append one JSON line per puzzle")
    args = ap.parse_args(argv)
    puzzles = catalog.load_catalog()
    good = True
    for pid in args.ids or multi_gpu(puzzles):
        p = catalog.find(puzzles, pid)
        if args.root and not (args.root / p.folder.name).is_dir():
            row = {"puzzle": p.id, "verdict": f"not in {args.root}"}
        else:
            row = check(p, args.root)
        good &= row["verdict"] in ("ok", f"not in {args.root}", "not recorded")
        line = json.dumps(row, default=str)
        print(line)
        if args.jsonl:
            with args.jsonl.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
    return 0 if good else 1
