#!/usr/bin/env bash
# Record the prototypes still here (the others became catalog puzzles: proto/README.md) on the GPU machine, from the folder that holds proto/:
#   bash proto/device_run.sh OUTDIR [timing] [traces] [ncu]      (default: all three, in that order)
# timing: every prototype's size sweep (CUDA events, median of 30 after 5 warm-ups, variants interleaved,
#         outputs checked with torch.allclose) -> OUTDIR/NAME.timing.json
# ncu:    one launch of each variant's main kernel under Nsight Compute (clock control off, --set full,
#         the doctor's extra metrics) -> OUTDIR/art/NAME.VARIANT.ncu-rep.gz
set -u
OUT=${1:?usage: device_run.sh OUTDIR [phases]}
shift
PHASES=${*:-timing traces ncu}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/art"
export PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /opt/nvidia/nsight-compute/ncu 2>/dev/null | head -1)
METRICS="--metrics $(cat "$HERE/ncu_metrics.txt")"
DEADLINE=$(( $(date +%s) + ${PROTO_BUDGET_S:-215} ))   # whole run: later steps are skipped, not cut short
ONLY=${PROTO_ONLY:-.}   # a regex on prototype names: record only those
log() { echo "[$(date +%T)] $*"; }
left() {  # seconds a step may take: its own limit or what is left of the budget
  local r=$(( DEADLINE - $(date +%s) ))
  [ "$r" -gt "$1" ] && r=$1
  echo $r
}

manifest() {
  python3 - "$OUT/manifest.json" "$NCU" "$1" <<'EOF'
import datetime, json, subprocess, sys
import torch, triton, cupy
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
                      "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
ncu = subprocess.run([sys.argv[2], "--version"], capture_output=True, text=True).stdout.strip().splitlines()
p = torch.cuda.get_device_properties(0)
json.dump({"gpu": torch.cuda.get_device_name(), "cc": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
           "nvidia_smi": smi, "driver": smi.split(", ")[1] if smi.count(", ") >= 1 else None,
           "cuda": torch.version.cuda, "torch": torch.__version__, "triton": triton.__version__,
           "cupy": cupy.__version__, "python": sys.version.split()[0], "ncu": ncu[-1] if ncu else None,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "bash proto/device_run.sh OUT " + " ".join(sys.argv[3:])}, open(sys.argv[1], "w"), indent=1)
EOF
  cat "$OUT/manifest.json"
}

timing() {
  for p in warp_specialization; do
    [[ $p =~ $ONLY ]] || continue
    [ "$(left 90)" -lt 15 ] && { log "skip timing $p: out of time"; continue; }
    log "timing $p"
    timeout "$(left 90)" python3 "$HERE/$p.py" --sweep --json "$OUT/$p.timing.json" 2>&1 | tail -25
  done
}

ncu_one() {  # prototype kernel-regex variant
  local base="$OUT/art/$1.$3"
  [[ $1 =~ $ONLY ]] || return
  [ "$(left 75)" -lt 15 ] && { log "skip ncu $1 $3: out of time"; return; }
  log "ncu $1 $3"
  timeout "$(left 75)" "$NCU" --clock-control none --set full --profile-from-start off -k "regex:$2" -c 1 $METRICS -f \
    -o "$base" python3 "$HERE/$1.py" --ncu --variant "$3" > "$base.log" 2>&1
  if [ ! -f "$base.ncu-rep" ] && [ -n "$METRICS" ]; then   # an extra metric this ncu rejects: record without them
    grep -m3 "ERROR" "$base.log"
    METRICS=""
    timeout "$(left 75)" "$NCU" --clock-control none --set full --profile-from-start off -k "regex:$2" -c 1 -f \
      -o "$base" python3 "$HERE/$1.py" --ncu --variant "$3" >> "$base.log" 2>&1
  fi
  [ -f "$base.ncu-rep" ] && gzip -f "$base.ncu-rep" || { echo "no report for $1 $3"; tail -5 "$base.log"; }
}

ncu_all() {
  ncu_one warp_specialization matmul_tma slow
  ncu_one warp_specialization matmul_tma fast
}

manifest "$PHASES"
for phase in $PHASES; do
  case $phase in
    timing) timing ;;
    ncu) ncu_all ;;
    *) echo "unknown phase $phase" ;;
  esac
done
log done
