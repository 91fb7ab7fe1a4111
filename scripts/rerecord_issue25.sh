#!/usr/bin/env bash
# Re-record the multi-GPU puzzles changed after issue 25's 4 x H200 checks (2026-11-27): 71 straggler (batch
# 16384), 72 tp-scaling-knee (bf16 atol 0.15), 74 pipeline-bubble (16 micro-batches, bar 1.10), 77 expert-skew
# (bar 1.12). One call on a 2-GPU machine (nvidia-h100-x2 / nvidia-h200-x2), at most BUDGET s (default 200):
#   source scripts/device_env.sh && bash scripts/rerecord_issue25.sh [IDS...]
# scripts/record_artifacts.py as in record_multigpu_puzzles_issue25.sh (no --force: a puzzle whose solution
# does not pass or whose starter does not fail is not written; --keep-failed keeps its check folders). One
# file comes back: $OUT/rerecord25.tgz, holding rerecord25/{rec/<NN-slug>/artifacts, checks.jsonl, rec.log,
# topology.txt, steps.log, logs/, failed/}.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
W=$OUT/rerecord25
mkdir -p "$W/logs"
IDS=${*:-pipeline-bubble expert-skew straggler tp-scaling-knee}
START=$(date +%s); BUDGET=${BUDGET:-200}
left() { echo $(( START + BUDGET - $(date +%s) - 10 )); }   # seconds left, the packing kept aside
log() { echo "== $(date -u +%T) +$(( $(date +%s) - START ))s $*" | tee -a "$W/steps.log"; }
export PERFLAB_DIST_LOGS=$W/logs NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

log "topology"
{ nvidia-smi -L; nvidia-smi topo -m;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())";
  env | grep -E '^NCCL_'; } > "$W/topology.txt" 2>&1

log "record $IDS"
timeout $(left) python3 scripts/record_artifacts.py $IDS --out "$W/rec" --jsonl "$W/checks.jsonl" \
  --keep-failed "$W/failed" --budget-s $(( BUDGET - 40 )) 2>&1 | grep -v USDT > "$W/rec.log"
echo "record exit ${PIPESTATUS[0]}" >> "$W/rec.log"
tail -20 "$W/rec.log"

log "pack"
tar -czf "$OUT/rerecord25.tgz" -C "$OUT" rerecord25 && rm -rf "$W" && ls -la "$OUT"
