#!/usr/bin/env bash
# One call on the single-GPU machine (nvidia-h200), from the repo root, `.whl` carried (scripts/fetch_device_wheels.sh
# here first: it now fetches the cluster's and HTA's wheels too, 17 MB in all):
#   bash scripts/gpu_benchmark_investigate_and_ranks.sh $OUT
# At most about 7.7 minutes: every part has its own limit and the whole stops by TOTAL_S (default 460 s).
#   1. setup: the carried wheels, the trace reader's C scanner built for this Python (else msgspec reads), versions
#   2. investigate before/after (GPU, ncu): benchmarks/investigate_one_pass.py within INV_S (default 200 s): each
#      program alone, the earlier walk (a run per kernel, --set full, level 3 on its own) and today's (one ncu run,
#      the doctor set, level 3 from level 1's run); programs in order until the budget is spent (a reduce-overhead
#      compiled block with 2 kernels, keep_outputs.py whose level 3 is needed, then a graphed decode, ...)
#   3. scale-out (the CPUs): benchmarks/multirank_workers.py, 256 ranks at 4 MB then 40 MB per rank with 1, 2, 4, 8
#      and 16 Dask workers of a local cluster, then HTA 0.5.0 on the 4 MB job, in what is left (a size that cannot
#      finish is replaced by the largest that can, and the output says so)
# Writes to $OUT (at most 8 files): summary.txt (everything printed), investigate.json, multirank.json, and
# one_pass.tgz (the walks' folders without their .ncu-rep files, logs, environment).
set -u -o pipefail
OUT=${1:?give the output folder}
TOTAL_S=${TOTAL_S:-460}
INV_S=${INV_S:-200}
T0=$(date +%s)
W=/tmp/one-pass
rm -rf "$W" && mkdir -p "$W"
elapsed() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(elapsed) s] $*" | tee -a "$W/summary.txt"; }

log "setup"
source scripts/device_env.sh > "$W/env.log" 2>&1 || { cat "$W/env.log"; exit 1; }
INC=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
CC=$(command -v cc || command -v gcc || echo cc)
if [ -f "$INC/Python.h" ] && "$CC" -O2 -fPIC -shared -I"$INC" src/perflab/trace/torch_profiler/native/kineto_scan.c \
     -o "src/perflab/trace/torch_profiler/_kineto_scan$EXT" 2>> "$W/env.log"; then
  log "trace reader: C scanner built for $EXT"
elif [ -f ".whl/_kineto_scan$EXT" ]; then
  cp ".whl/_kineto_scan$EXT" src/perflab/trace/torch_profiler/ && log "trace reader: C scanner carried (built for $EXT)"
else
  log "trace reader: no C scanner (no Python.h, no cc, none carried): msgspec reads every block"
fi
python3 -c 'from perflab.trace.torch_profiler import kineto_native as n; print("C scanner in use:", n.available())' \
  2>&1 | tee -a "$W/summary.txt"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  python3 -c 'import torch, dask, distributed, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "dask", dask.__version__)'
  python3 -c 'import hta; print("hta", hta.__file__)' 2>&1 | tail -1
  python3 -c 'from perflab.toolkit.ncu_runner import find_ncu; import subprocess; n = find_ncu(); print(n, subprocess.run([str(n), "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])'
} >> "$W/env.log" 2>&1
tail -n 8 "$W/env.log" | tee -a "$W/summary.txt"

log "investigate: before and after, against the program alone (budget ${INV_S} s)"
timeout $((INV_S + 60)) python3 benchmarks/investigate_one_pass.py --out "$W/investigate" --budget-s "$INV_S" \
  2>&1 | tee -a "$W/summary.txt"

LEFT=$(( TOTAL_S - $(elapsed) - 20 ))
log "scale-out: 256 ranks, 1-16 workers, then HTA (budget ${LEFT} s)"
if [ "$LEFT" -gt 60 ]; then
  timeout "$LEFT" python3 benchmarks/multirank_workers.py --out "$W/multirank" --ranks 256 --mb 4 40 \
    --workers 1 2 4 8 16 --hta --phases 16 --budget-s $((LEFT - 10)) --jobs /tmp/one-pass-jobs 2>&1 | tee -a "$W/summary.txt"
else
  log "scale-out skipped: ${LEFT} s left"
fi
rm -rf /tmp/one-pass-jobs

log "packing"
cp "$W/summary.txt" "$OUT/summary.txt"
[ -f "$W/investigate/results.json" ] && cp "$W/investigate/results.json" "$OUT/investigate.json"
[ -f "$W/multirank/results.json" ] && cp "$W/multirank/results.json" "$OUT/multirank.json"
find "$W" -name '*.ncu-rep' -delete
find "$W" -type f -size +4M -printf 'left out of one_pass.tgz (over 4 MB): %p %s bytes\n' -delete | tee -a "$W/summary.txt"
cp "$W/summary.txt" "$OUT/summary.txt"
tar czf "$OUT/one_pass.tgz" -C "$W" . && ls -la "$OUT"
echo "done in $(elapsed) s"
