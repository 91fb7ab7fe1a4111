"""The command line of the programs a recording runs on one variant file (ncu_target, marked_steps,
loop_target): the file, the device and the seed. Only argparse is imported: those programs stay light."""
from __future__ import annotations

import argparse
from pathlib import Path


def parser(doc: str, device: str = "cuda") -> argparse.ArgumentParser:
    """FILE (the variant), --device and --seed; the program adds what else it takes."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--device", default=device)
    ap.add_argument("--seed", type=int, default=0)
    return ap
