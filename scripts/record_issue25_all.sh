#!/usr/bin/env bash
# Issue 25's recordings in one call on a multi-GPU kind, from the repo root, .whl carried:
#   source scripts/device_env.sh && bash scripts/record_issue25_all.sh
# Runs record_multigpu_issue25.sh (sweeps, puzzles 70-73, scaling, 4-rank straggler) and
# record_multigpu_puzzles_issue25.sh (puzzles 74-77, the interconnect sweep) into /tmp/o, which survives the
# call on a warm machine, then returns the packed results in pieces under 15 MB each (the device's limit).
set -u
REAL_OUT=$OUT
export OUT=/tmp/o
rm -rf /tmp/o; mkdir -p /tmp/o
BUDGET=${B1:-320} bash scripts/record_multigpu_issue25.sh 2>&1 | tail -60
BUDGET=${B2:-225} bash scripts/record_multigpu_puzzles_issue25.sh 2>&1 | tail -40
cd /tmp/o && for f in *.tgz; do
  if [ "$(stat -c %s "$f")" -gt 15000000 ]; then split -b 15000000 -d "$f" "$REAL_OUT/$f.part"; else cp "$f" "$REAL_OUT/"; fi
done
ls -la /tmp/o "$REAL_OUT"
