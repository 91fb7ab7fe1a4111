#!/usr/bin/env bash
# Record the parallelism puzzles of issue 25 (catalog 74-77, [requirements] gpus = 2) and the interconnect
# sweep on a machine with 2 GPUs (kind nvidia-h100-x2 / nvidia-h200-x2), in one call of at most BUDGET
# seconds (default 235). From the repo root:
#   source scripts/device_env.sh && bash scripts/record_multigpu_puzzles_issue25.sh [IDS...]
# Puzzles, in priority order (pipeline-bubble unbucketed-allreduce ring-attention expert-skew), by
# scripts/record_artifacts.py (no --force: a puzzle whose solution does not pass or whose starter does
# not fail is not written; --keep-failed keeps its check folders); no new puzzle starts after
# PUZZLE_BUDGET seconds (default BUDGET - 70). Then, in the time left, the interconnect sweep
# (scripts/record_interconnect_sweep.py: all-reduce busbw, NCCL default / NCCL_P2P_DISABLE=1 /
# NCCL_ALGO=Ring / Tree). Everything lands in $OUT/mgp and, packed, $OUT/mgp.tgz:
#   mgp/rec/<NN-slug>/artifacts     -> cp -r rec/* src/perflab/catalog/
#   mgp/checks.jsonl                -> docs/catalog-checks/<date>-h100x2-issue25.jsonl
#   mgp/interconnect.json           -> docs/multigpu/interconnect.json
#   mgp/topology.txt, steps.log, rec.log, logs/ (torchrun logs, rank results), failed/
set -u -o pipefail
OUT=${OUT:-/tmp/out}
W=$OUT/mgp
mkdir -p "$W/logs"
IDS=${*:-pipeline-bubble unbucketed-allreduce ring-attention expert-skew}
START=$(date +%s); BUDGET=${BUDGET:-235}
PUZZLE_BUDGET=${PUZZLE_BUDGET:-$(( BUDGET - 70 ))}
left() { echo $(( START + BUDGET - $(date +%s) - 8 )); }   # seconds left, the packing kept aside
log() { echo "== $(date -u +%T) +$(( $(date +%s) - START ))s $*" | tee -a "$W/steps.log"; }
export PERFLAB_DIST_LOGS=$W/logs NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

log "topology"
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi nvlink -s 2>&1 | head -40;
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())";
  env | grep -E '^NCCL_'; } > "$W/topology.txt" 2>&1
head -20 "$W/topology.txt"

log "record $IDS"
timeout $(left) python3 scripts/record_artifacts.py $IDS --out "$W/rec" --jsonl "$W/checks.jsonl" \
  --keep-failed "$W/failed" --budget-s "$PUZZLE_BUDGET" 2>&1 | grep -v USDT > "$W/rec.log"
echo "record exit ${PIPESTATUS[0]}" >> "$W/rec.log"
tail -25 "$W/rec.log"

L=$(left)
if (( L > 20 )); then
  log "interconnect sweep ($L s)"
  timeout $L python3 scripts/record_interconnect_sweep.py --out "$W/interconnect.json" --gpus 2 \
    --budget-s $(( L - 5 )) 2>&1 | grep -v "NCCL INFO" | tail -8 | tee -a "$W/steps.log"
else
  log "interconnect sweep not run: $L s left"
fi

log "pack"
tar -czf "$OUT/mgp.tgz" -C "$OUT" mgp && ls -la "$OUT"
