#!/usr/bin/env bash
# On the GPU machine, from the repo root, in one call (about 3 minutes):
#   source scripts/device_env.sh && bash scripts/gpu_compiled_stacks.sh
# Runs tests/gpu/test_compiled_stacks_gpu.py: `perflab investigate` and `perflab profile` on a torch.compile'd
# block (function default, module reduce-overhead, module max-autotune) and on a CUDA-graphed decode. Each run's
# output, trace and the pytest log land packed in $OUT/compiled_stacks.tgz (unpack into tests/data/stacks/gpu-run/
# to read them; the traces are the fixtures' successors).
set -u -o pipefail
OUT=${OUT:-/tmp/out}
A=/tmp/compiled_stacks
rm -rf "$A"; mkdir -p "$A" "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u +%FT%TZ
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} > "$A/environment.txt" 2>&1
PERFLAB_GPU_ARTIFACTS=$A timeout ${BUDGET:-185} python3 -m pytest -m gpu -q -p no:cacheprovider -rA \
  tests/gpu/test_compiled_stacks_gpu.py 2>&1 | grep -v USDT | tee "$A/pytest.log" | tail -25
tar -czf "$OUT/compiled_stacks.tgz" -C /tmp compiled_stacks
ls -la "$A"
