#!/usr/bin/env bash
# On the GPU machine, from the repo root, .whl carried (one single-GPU call, about 6 minutes):
#   source scripts/device_env.sh && bash scripts/gpu_serving_checks.sh
# 1. tests/gpu/test_serving_traces_gpu.py: a serving loop with vLLM-style annotations (whole and chunked prefills),
#    a reduce-overhead block and an HF static-cache generate under perflab profile, fp32 attention; each run's log,
#    trace and doctor JSON -> $OUT/serving.tgz
# 2. the recompilation puzzle recorded and checked (scripts/record_puzzles.sh) -> $OUT/rec.tgz
set -u -o pipefail
OUT=${OUT:-/tmp/out}
A=/tmp/serving
rm -rf "$A"; mkdir -p "$A"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$A/gpu.txt" 2>&1
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])" >> "$A/gpu.txt"
PERFLAB_GPU_ARTIFACTS=$A timeout "${B1:-330}" python3 -m pytest -m gpu -q -rA -p no:cacheprovider \
  tests/gpu/test_serving_traces_gpu.py 2>&1 | grep -v USDT | tee "$A/pytest.log" | tail -40
tar -czf "$OUT/serving.tgz" -C /tmp serving
BUDGET=${B2:-200} bash scripts/record_puzzles.sh recompilation
