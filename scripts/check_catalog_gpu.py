#!/usr/bin/env python3
"""Check every puzzle's fix checker on the GPU machine: each solution must pass, each starter must fail.

    python3 scripts/check_catalog_gpu.py [IDS...] [--seed N]

Prints a summary table; exit 0 when all puzzles behave, 1 when one does not, 2 on bad input.
(The same run as `record_artifacts.py --check-only`: nothing is written.)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record_artifacts  # noqa: E402

if __name__ == "__main__":
    sys.exit(record_artifacts.main(["--check-only", *sys.argv[1:]]))
