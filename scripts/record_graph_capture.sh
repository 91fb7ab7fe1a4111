#!/usr/bin/env bash
# On the GPU machine, from the repo root, after `source scripts/device_env.sh` (with .whl carried), in ONE call:
#   bash scripts/record_graph_capture.sh
# Records torch.profiler traces whose window holds a CUDA graph's capture as well as its replays
# (scripts/record_stack_traces.py: graphed_decode_capture, block_module_reduce_overhead_cold,
# hf_static_compiled_cold), runs the doctor on each, and says how many replays were priced from their capture
# (analysis/steps/graph_capture.py). Everything lands packed in $OUT/graph_capture.tgz; the traces go to
# tests/data/stacks/ (manifest.json -> manifest.capture.json) as fixtures for tests/doctor/test_graph_capture.py.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-400}
W=/tmp/graph_capture
rm -rf "$W"; mkdir -p "$W" "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$W/gpu.txt" 2>&1
timeout $(( BUDGET + 60 )) python3 scripts/record_stack_traces.py --out "$W" --budget-s "$BUDGET" \
  graphed_decode_capture block_module_reduce_overhead_cold hf_static_compiled_cold 2>&1 \
  | grep -v USDT | tee "$W/record.log" | tail -20
for f in "$W"/*.trace.json.gz; do
  [ -e "$f" ] || continue
  base=${f%.trace.json.gz}
  timeout 120 perflab doctor "$f" > "$base.doctor.txt" 2>&1
  timeout 120 perflab doctor --json "$f" > "$base.doctor.json" 2> "$base.doctor.err"
done
timeout 300 python3 - "$W" > "$W/capture_summary.json" 2> "$W/capture_summary.err" <<'PY'
import json, sys
from pathlib import Path

from perflab.analysis.steps.graph_capture import captures
from perflab.analysis.work.op_work import op_work
from perflab.analysis.steps.windows import analysis_windows
from perflab.trace import kineto

out = {}
for path in sorted(Path(sys.argv[1]).glob("*.trace.json.gz")):
    trace = kineto.load(path)
    caps = captures(trace)
    work = op_work(trace, analysis_windows(trace))
    out[path.name] = {"captures": [int(c.launches.size) for c in caps], "replays": work.graph_replays,
                      "kernel_us": work.kernel_us, "modelled_us": work.modelled_us,
                      "unmodelled": {k: {"us": v["us"], "kernels": v["kernels"]} for k, v in work.unmodelled.items()}}
print(json.dumps(out, indent=1))
PY
cat "$W/capture_summary.json"; head -c 1500 "$W"/*.doctor.txt
tar -czf "$OUT/graph_capture.tgz" -C /tmp graph_capture
ls -la "$W" "$OUT"
