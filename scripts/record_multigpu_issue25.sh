#!/usr/bin/env bash
# Issue 25, the multi-GPU level on real GPUs: ONE device call on a 2-GPU kind (nvidia-h100-x2 / nvidia-h200-x2;
# on a 4-GPU kind the same script scales over 1,2,4 and profiles a 4-rank straggler). From the repo root:
#   source scripts/device_env.sh && bash scripts/record_multigpu_issue25.sh
# Steps, each under `timeout` within BUDGET seconds (default 300, the packing included), NCCL_NVLS_ENABLE=0:
#   1. topology: nvidia-smi -L, nvidia-smi topo -m, versions, NCCL_* env
#   2. busbw sweeps of all_reduce, all_gather, reduce_scatter, all_to_all over every GPU (perflab bench
#      --collectives, saved with the topology; the doctor below reads them from PERFLAB_HOME)
#   3. the four multi-GPU puzzles re-recorded and checked (scripts/record_artifacts.py: solution passes,
#      starter fails; jsonl rows for docs/catalog-checks/), then the doctor rank by rank on what was recorded
#      (scripts/check_multigpu_doctor.py: planted cause first on the slow ranks, gone on the fix)
#   4. perflab scale strong and weak over 1,2[,4] GPUs (examples/scale_ddp_mlp.py), traces dropped
#   5. with 4+ GPUs: a straggler run on every GPU and the doctor on it
# Everything lands in $OUT/mg25/ and is packed into $OUT/mg25.tgz. Copy back (see docs/multigpu/README.md):
#   rec/<NN-slug>/artifacts -> src/perflab/catalog/<NN-slug>/artifacts; catalog-checks.jsonl ->
#   docs/catalog-checks/<date>-<gpu>x<n>-issue25.jsonl; collectives_*, scale_* -> docs/multigpu/<gpu>x<n>/.
# DRY=1 runs the same plumbing on a CPU (gloo, 2 processes, tiny sizes; no puzzle recording: the doctor check
# reads the catalog's artifacts).
set -u -o pipefail
OUT=${OUT:-/tmp/out}
W=$OUT/mg25
DRY=${DRY:-0}
mkdir -p "$W/logs" "$W/home"
START=$(date +%s); BUDGET=${BUDGET:-300}
t() { local want=$1 rem=$(( START + BUDGET - $(date +%s) - 8 )); (( rem < want )) && want=$rem; (( want < 1 )) && want=1; echo $want; }
log() { echo "== $(date -u +%T) +$(( $(date +%s) - START ))s $*" | tee -a "$W/steps.log"; }
export NCCL_NVLS_ENABLE=0 PERFLAB_DIST_LOGS=$W/logs PERFLAB_HOME=$W/home PYTHONUNBUFFERED=1
IDS=${IDS:-exposed-allreduce nccl-timeline tp-scaling-knee straggler}   # never recorded first
EX=examples/scale_ddp_mlp.py
if [ "$DRY" = 1 ]; then
  NGPU=2; MAXB=65536; MODEL="--hidden 64 --layers 2"; SB=64; WB=32; STEPS=4
else
  NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())"); MAXB=$((1 << 30))
  MODEL="--hidden 4096 --layers 8"; SB=2048; WB=512; STEPS=12
fi
COUNTS=$(python3 -c "n=$NGPU; print(','.join(str(2**i) for i in range(8) if 2**i <= n))")

log "1. topology ($NGPU GPUs, counts $COUNTS, dry=$DRY)"
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"
  env | grep -E '^NCCL_'; } > "$W/topology.txt" 2>&1
cat "$W/topology.txt"

log "2. collective busbw sweeps over $NGPU ranks"
timeout $(t 50) perflab bench --collectives all_reduce,all_gather,reduce_scatter,all_to_all --gpus "$NGPU" \
  --max-bytes $MAXB --plot "$W/collectives_${NGPU}gpu.png" 2>&1 | grep -v USDT | tee "$W/collectives.log" | tail -8
cp "$W/home/collectives.json" "$W/collectives_${NGPU}gpu.json" 2>/dev/null || echo "no sweep saved" | tee -a "$W/steps.log"

log "3. multi-GPU puzzles: $IDS"
if [ "$DRY" = 1 ]; then
  ROOT=()   # no GPU: the doctor check reads the catalog's recorded artifacts
else
  RT=$(t 170); RB=$(( RT > 75 ? RT - 45 : 30 ))   # start no new puzzle in the last 45 s (one takes ~40 s)
  timeout $RT python3 scripts/record_artifacts.py --out "$W/rec" --jsonl "$W/catalog-checks.jsonl" \
    --budget-s $RB --keep-failed "$W/failed" $IDS > "$W/record.log" 2>&1
  echo "exit $?" >> "$W/record.log"; grep -v USDT "$W/record.log" | tail -15
  ROOT=(--root "$W/rec")
fi
timeout $(t 40) python3 scripts/check_multigpu_doctor.py "${ROOT[@]}" --jsonl "$W/doctor_checks.jsonl" $IDS \
  > "$W/doctor_checks.log" 2>&1; echo "exit $?" >> "$W/doctor_checks.log"
python3 - "$W/doctor_checks.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    top = lambda v: {r: x["ids"][:2] for r, x in (d.get(v) or {}).items()}
    print(d["puzzle"], d["verdict"], "planted", d.get("planted"), "first on", d.get("planted_first_on"),
          "on fix", d.get("planted_on_fix"), "| slow", top("slow"), "| fix", top("solution"))
EOF

log "4. scaling over $COUNTS GPUs"
timeout $(t 60) perflab scale --gpus "$COUNTS" --mode strong --steps 5 --warmup 3 --out "$W/scale_strong" -- \
  $EX $MODEL --batch $SB --steps $STEPS 2>&1 | grep -v USDT | tee "$W/scale_strong.log" | tail -12
timeout $(t 55) perflab scale --gpus "$COUNTS" --mode weak --steps 5 --warmup 3 --out "$W/scale_weak" -- \
  $EX $MODEL --batch $WB --steps $STEPS 2>&1 | grep -v USDT | tee "$W/scale_weak.log" | tail -12
rm -rf "$W"/scale_*/n*/traces   # keep the numbers and plots, not the runs' traces

if [ "$NGPU" -ge 4 ]; then
  log "5. straggler on $NGPU ranks"
  timeout $(t 50) perflab profile --steps 4 --warmup 4 --out "$W/straggler_${NGPU}" -- python3 -m torch.distributed.run \
    --standalone --nproc-per-node "$NGPU" $EX $MODEL --batch $SB --steps 12 --straggle-ms 5 > "$W/straggler.log" 2>&1
  timeout $(t 30) perflab doctor --json "$W/straggler_${NGPU}" > "$W/doctor_straggler_${NGPU}.json" 2>> "$W/straggler.log"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print([(f['id'], round(f['gain_pct'],1)) for f in d['findings']])" \
    "$W/doctor_straggler_${NGPU}.json"
fi

log "pack"
rm -rf "$W/home/bench-tmp"
tar -czf "$OUT/mg25.tgz" -C "$OUT" mg25 && ls -la "$OUT"
log "done"
