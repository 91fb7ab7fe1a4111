#!/usr/bin/env bash
# One single-GPU call, from the repo root, .whl carried (about 8 minutes):
#   source scripts/device_env.sh && bash scripts/gpu_stacks_and_serving.sh
# 1. tests/gpu/test_compiled_stacks_gpu.py (scripts/gpu_compiled_stacks.sh): profile/investigate on compiled and
#    graphed programs -> $OUT/compiled_stacks.tgz
# 2. `perflab profile` on HF generate: eager, static cache, static cache + compile -> $OUT/hf_profiles.tgz
# 3. the serving puzzles recorded and checked (chunked-prefill, continuous-batching) -> $OUT/rec.tgz
set -u -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET=${B1:-185} bash scripts/gpu_compiled_stacks.sh 2>&1 | tail -30
H=/tmp/hf_profiles; rm -rf $H; mkdir -p $H
for v in "dynamic:" "static:--cache static" "compiled:--cache static --compile"; do
  name=${v%%:*}; args=${v#*:}
  ( time timeout 75 perflab profile --steps 10 --warmup 5 --out $H/$name -- python3 examples/stacks/hf_generate.py $args --calls 4 ) \
    > $H/$name.log 2>&1
  tail -12 $H/$name.log
done
tar -czf "$OUT/hf_profiles.tgz" -C /tmp hf_profiles
BUDGET=${B3:-150} bash scripts/record_puzzles.sh chunked-prefill continuous-batching 2>&1 | tail -30
ls -la "$OUT"
