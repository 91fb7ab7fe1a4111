#!/usr/bin/env bash
# Record the multi-GPU puzzles (catalog 70-73, [requirements] gpus = 2) on a machine with 2+ GPUs
# (kind nvidia-h200-x2), then run the multi-GPU gpu tests. From the repo root:
#   source scripts/device_env.sh && bash scripts/record_multigpu_puzzles.sh [IDS...]
# Each puzzle is recorded by scripts/record_artifacts.py (no --force) under `timeout`; the workers
# run under torchrun (perflab.puzzles.evidence.multirank). Everything lands in $OUT/mgp.tgz: rec/<NN-slug>/artifacts
# (copy back with `cp -r rec/* src/perflab/catalog/`), logs, torchrun logs and rank results, gpu tests.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
W=$OUT/mgp
mkdir -p "$W/logs"
IDS=${*:-straggler exposed-allreduce nccl-timeline tp-scaling-knee}
TESTS=${TESTS:-1}                          # 0: skip the gpu tests
START=$(date +%s); BUDGET=${BUDGET:-380}   # seconds for everything, the packing included
t() { local want=$1 rem=$(( START + BUDGET - $(date +%s) - 10 )); (( rem < want )) && want=$rem; (( want < 1 )) && want=1; echo $want; }
log() { echo "== $(date -u +%T) +$(( $(date +%s) - START ))s $*" | tee -a "$W/steps.log"; }
export PERFLAB_DIST_LOGS=$W/logs NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

log "topology"
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())";
  env | grep -E '^NCCL_'; } > "$W/topology.txt" 2>&1
cat "$W/topology.txt"

for id in $IDS; do
  log "record $id"
  timeout $(t 110) python3 scripts/record_artifacts.py --out "$W/rec" "$id" > "$W/rec_$id.log" 2>&1
  echo "exit $?" >> "$W/rec_$id.log"; grep -v USDT "$W/rec_$id.log" | tail -12
done

if [ "$TESTS" != 0 ]; then
log "gpu tests"
timeout $(t 150) python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_multigpu_puzzles_gpu.py \
  tests/gpu/test_multigpu_gpu.py 2>&1 | tee "$W/pytest_gpu.log" | tail -15
fi

log "pack"
tar -czf "$OUT/mgp.tgz" -C "$OUT" mgp && ls -la "$OUT"
