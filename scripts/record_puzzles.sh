#!/usr/bin/env bash
# Record puzzles on the GPU machine within a time budget (one device call). From the repo root:
#   source scripts/device_env.sh && BUDGET=300 bash scripts/record_puzzles.sh ID [ID...]
# e.g. the serving puzzles in one single-GPU call of at most 150 s:
#   source scripts/device_env.sh && BUDGET=150 bash scripts/record_puzzles.sh chunked-prefill continuous-batching
# scripts/record_artifacts.py records each puzzle (traces, ncu reports, timings) and checks it (the solution
# must pass, the starter must fail; nothing is written for a puzzle that does not behave: --keep-failed keeps
# its check folders). It starts no puzzle after BUDGET - 60 s; `timeout` ends the whole run at BUDGET.
# Everything lands in $OUT/rec and, packed, $OUT/rec.tgz: <NN-slug>/artifacts (unpack here, then
# `cp -r rec/* src/perflab/catalog/`),
# rec.jsonl (one check line per puzzle, as check_catalog_gpu.py prints), logs, failed/.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-300}
W=$OUT/rec
mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$W/gpu.txt" 2>&1
timeout "$BUDGET" python3 scripts/record_artifacts.py "$@" --out "$W" --jsonl "$W/rec.jsonl" \
  --keep-failed "$W/failed" --budget-s $(( BUDGET > 90 ? BUDGET - 60 : BUDGET / 2 )) 2>&1 | grep -v USDT | tee "$W/record.log" | tail -40
echo "record exit ${PIPESTATUS[0]}"
tar -czf "$OUT/rec.tgz" -C "$OUT" rec   # the device returns files two folders deep: the artifacts travel packed
