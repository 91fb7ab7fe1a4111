#!/usr/bin/env bash
# On the GPU machine, from the repo root (issue 18's check):
#   source scripts/device_env.sh >/dev/null && bash scripts/verify_investigate_gpu.sh $OUT
# Runs `perflab investigate` on three programs that need different levels, then each level by hand with the
# commands the reports print, and packs everything (folders, reports, progress, wall times, a manifest) into
# $OUT/investigate.tgz; tests/data/investigate/ holds what the CPU tests read of it.
#   host-bound     examples/tiny_gpt_inference.py                                 (level 1: system)
#   kernel         puzzle 14-operator-hotspot's slow workload, one step per call  (level 2: its fp32 head GEMM)
#   memory         examples/keep_outputs.py: every batch's logits kept on the GPU (level 3: near capacity)
set -u -o pipefail
OUT=${1:?give the output folder}
W=${INV_WORK:-/tmp/inv}
rm -rf "$W" && mkdir -p "$W"
python3 - "$W/manifest.json" <<'PY'
import json, platform, subprocess, sys, datetime, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                     text=True).stdout.strip().split(", ")
from perflab.toolkit.ncu_runner import find_ncu
ncu = find_ncu()
ver = subprocess.run([str(ncu), "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
json.dump({"gpu": smi[0], "driver": smi[1] if len(smi) > 1 else None, "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(), "ncu": ver[0] if ver else str(ncu),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "bash scripts/verify_investigate_gpu.sh $OUT"}, open(sys.argv[1], "w"), indent=1)
PY
inv() {
  local name=$1; shift
  local t0; t0=$(date +%s%N)
  perflab investigate --out "$W/$name" --json --html "$W/$name.html" "$@" > "$W/$name.json" 2> "$W/$name.progress"
  local rc=$?
  echo "{\"name\": \"$name\", \"rc\": $rc, \"wall_s\": $(( ($(date +%s%N) - t0) / 1000000 ))e-3}" >> "$W/walls.jsonl"
  perflab doctor "$W/$name" > "$W/$name.txt" 2>&1
  tail -n 3 "$W/$name.progress"; head -n 2 "$W/$name.txt"
}
inv host-bound -- python3 examples/tiny_gpt_inference.py
inv kernel --marker step -- python3 examples/run_workload.py src/perflab/catalog/14-operator-hotspot/workload.py --steps 20
inv memory -- python3 examples/keep_outputs.py
python3 scripts/investigate_by_hand.py "$W" host-bound kernel memory
tar czf "$OUT/investigate.tgz" -C "$W" .
ls -la "$OUT"
