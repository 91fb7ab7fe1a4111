#!/usr/bin/env bash
# Record catalog 69-warp-specialization (issue 28) on one H100 and check it, in one device call of at most
# BUDGET seconds (default 560). From the repo root:
#   source scripts/device_env.sh && bash scripts/record_warp_specialization.sh
# 1. scripts/record_artifacts.py warp-specialization: torch.profiler traces and ncu reports (+ raw-page CSV)
#    of slow and solution, and the fix check (solution must pass at >= 1.15x CI low with compute-bound gone
#    from its ncu report, starter must fail): its interleaved timings become measurements.json. No --force:
#    nothing is written unless the check comes out right (--keep-failed keeps the check folders).
# 2. The doctor on the recorded slow and solution reports (compute-bound must lead on slow only).
# 3. The recording copied into this tree's catalog folder, then the CPU tests that read it (questions,
#    planted finding first on slow and gone on the fix, replay, stall samples per instruction) and the gpu test.
# 4. In the time left: scripts/check_catalog_gpu.py warp-specialization, a second check with a fresh seed.
# Traces over 1 MB are cut with scripts/trim_trace.py. Everything lands in $OUT/ws and, packed, $OUT/ws.tgz:
#   ws/rec/69-warp-specialization/artifacts -> src/perflab/catalog/69-warp-specialization/artifacts
#   ws/checks.jsonl                         -> docs/catalog-checks/<date>-h100-issue28-warp-specialization.jsonl
#   ws/steps.log, record.log, doctor.txt, tests.log, check.log, gpu.txt, failed/ (only if the check failed)
set -u -o pipefail
OUT=${OUT:-/tmp/out}
W=$OUT/ws
ART=$W/rec/69-warp-specialization/artifacts
mkdir -p "$W"
START=$(date +%s); BUDGET=${BUDGET:-560}
left() { echo $(( START + BUDGET - $(date +%s) - 10 )); }   # seconds left, the packing kept aside
log() { echo "== $(date -u +%T) +$(( $(date +%s) - START ))s $*" | tee -a "$W/steps.log"; }

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  ls -d /opt/nvidia/nsight-compute* 2>&1; } > "$W/gpu.txt" 2>&1
cat "$W/gpu.txt"

log "record"
timeout $(( $(left) - 60 )) python3 scripts/record_artifacts.py warp-specialization --out "$W/rec" \
  --jsonl "$W/checks.jsonl" --keep-failed "$W/failed" 2>&1 | grep -v USDT > "$W/record.log"
echo "record exit ${PIPESTATUS[0]}" >> "$W/record.log"
tail -20 "$W/record.log"

if [ -f "$ART/measurements.json" ]; then
  for t in "$ART"/*.trace.json.gz; do
    if [ "$(stat -c %s "$t")" -gt 1000000 ]; then
      python3 scripts/trim_trace.py "$t" "$t.trim.gz" --from-ms 0 --to-ms 2000 && mv "$t.trim.gz" "$t"
    fi
  done
  du -ab "$ART" | tee -a "$W/steps.log"

  log "doctor on the recorded reports"
  for v in slow solution; do
    echo "--- $v"; python3 -m perflab doctor "$ART/$v.ncu-rep.gz" 2>&1 | head -14
  done > "$W/doctor.txt" 2>&1
  cat "$W/doctor.txt"

  log "CPU tests on the recording, gpu test"
  rm -rf src/perflab/catalog/69-warp-specialization/artifacts
  cp -r "$ART" src/perflab/catalog/69-warp-specialization/artifacts
  timeout $(( $(left) / 2 )) python3 -m pytest -q -p no:cacheprovider -k "warp" tests/catalog/test_puzzle_ncu.py \
    tests/catalog/test_puzzle_catalog.py tests/catalog/test_warp_specialization_puzzle.py tests/ncu/test_ncu_tensor_pipe_waits.py \
    > "$W/tests.log" 2>&1
  echo "cpu tests exit $?" >> "$W/tests.log"
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_warp_specialization_gpu.py \
    >> "$W/tests.log" 2>&1
  echo "gpu test exit $?" >> "$W/tests.log"
  tail -8 "$W/tests.log"
else
  log "no artifacts written: see record.log and failed/"
fi

L=$(left)
if (( L > 150 )); then
  log "second check ($L s)"
  timeout $L python3 scripts/check_catalog_gpu.py warp-specialization --jsonl "$W/checks.jsonl" 2>&1 \
    | grep -v USDT > "$W/check.log"
  echo "check exit ${PIPESTATUS[0]}" >> "$W/check.log"
  tail -12 "$W/check.log"
else
  log "second check not run: $L s left"
fi

log "check rows"
python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r['puzzle'], r.get('gpu'), 'ok' if r.get('ok') else 'WRONG', r['verdict'],
          'speed-up %.3f (CI %.3f-%.3f, bar %s)' % (r['point'], r['ci_low'], r['ci_high'], r['bar']) if r.get('point') else '',
          'starter CI low %.3f' % r['starter_ci_low'] if r.get('starter_ci_low') else '', r.get('solution_found'))
" "$W/checks.jsonl" 2>&1 | tee -a "$W/steps.log"
tar -czf "$OUT/ws.tgz" -C "$OUT" ws && ls -la "$OUT" && rm -rf "$W"
