#!/usr/bin/env bash
# The multi-GPU device run (issue 8), on the nvidia-h200-x2 kind, from the repo root:
#   source scripts/device_env.sh && bash scripts/record_multigpu.sh
# Each step is guarded by `timeout`; everything lands in $OUT/multigpu.tgz (logs, per-rank traces,
# scaling.json + plot, all-reduce sweep, the gpu tests' output). Works for any GPU count: it uses
# every visible GPU (NGPU) and scales over 1,2,4,... up to NGPU.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
W=$OUT/multigpu
mkdir -p "$W"
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
COUNTS=$(python3 -c "n=$NGPU; print(','.join(str(2**i) for i in range(8) if 2**i <= n))")
EX=examples/scale_ddp_mlp.py
TR="python3 -m torch.distributed.run --standalone --nproc-per-node $NGPU"
MODEL="--hidden 4096 --layers 8 --batch 2048"
START=$(date +%s); BUDGET=${BUDGET:-315}   # seconds for everything, the packing included
t() { local want=$1 rem=$(( START + BUDGET - $(date +%s) - 12 )); (( rem < want )) && want=$rem; (( want < 1 )) && want=1; echo $want; }
log() { echo "== $(date -u +%T) $*" | tee -a "$W/steps.log"; }

log "topology ($NGPU GPUs, counts $COUNTS)"
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())";
  env | grep -E '^NCCL_' ; } > "$W/topology.txt" 2>&1
cat "$W/topology.txt"

rec() {  # rec NAME EXTRA_ARGS... : profile 4 steps of the example on every GPU, one trace per rank
  local name=$1; shift
  log "record $name"
  timeout $(t 60) perflab profile --steps 4 --warmup 4 --out "$W/traces/$name" -- $TR $EX $MODEL --steps 12 "$@" \
    > "$W/$name.log" 2>&1; echo "exit $?" >> "$W/$name.log"; tail -25 "$W/$name.log"
}
rec exposed --sync-allreduce
rec ddp
rec straggler --straggle-ms 5
for name in exposed ddp straggler; do
  timeout $(t 30) perflab doctor --json "$W/traces/$name" > "$W/doctor_$name.json" 2> "$W/doctor_$name.err"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1], [(f['id'], round(f['gain_pct'],1)) for f in d['findings']])" "$W/doctor_$name.json"
done

log "all-reduce bus bandwidth over $NGPU GPUs"
timeout $(t 45) perflab bench --allreduce --gpus "$NGPU" --out "$W/allreduce.json" 2>&1 | grep -v USDT | tee "$W/allreduce.log" | tail -20

log "scale strong $COUNTS"
timeout $(t 75) perflab scale --gpus "$COUNTS" --mode strong --out "$W/scale_strong" -- $EX $MODEL --steps 15 \
  2>&1 | grep -v USDT | tee "$W/scale_strong.log" | tail -20
log "scale weak $COUNTS"
timeout $(t 65) perflab scale --gpus "$COUNTS" --mode weak --out "$W/scale_weak" -- $EX --hidden 4096 --layers 8 --batch 512 --steps 15 \
  2>&1 | grep -v USDT | tee "$W/scale_weak.log" | tail -20
rm -rf "$W"/scale_*/n*/traces   # keep the numbers, not the scale runs' traces

log "gpu tests"
timeout $(t 120) python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_multigpu_gpu.py 2>&1 | tee "$W/pytest_gpu.log" | tail -15

log "pack"
tar -czf "$OUT/multigpu.tgz" -C "$OUT" multigpu && ls -la "$OUT"
