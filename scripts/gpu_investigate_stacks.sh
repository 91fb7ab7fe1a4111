#!/usr/bin/env bash
# One short single-GPU call, from the repo root, .whl carried:
#   source scripts/device_env.sh && bash scripts/gpu_investigate_stacks.sh
# `perflab investigate` (level 1 and one kernel under Nsight Compute) on a CUDA-graphed decode, a compiled
# module in reduce-overhead mode and HF generate with a static cache + torch.compile; logs in $OUT.
set -u
OUT=${OUT:-/tmp/out}
i=0
for args in "examples/stacks/graphed_decode.py --steps 600" \
            "examples/stacks/compiled_block.py --as module --mode reduce-overhead --iters 3000" \
            "examples/stacks/hf_generate.py --cache static --compile --calls 8"; do
  i=$((i + 1))
  ( time timeout ${PER_RUN:-72} perflab investigate --memory never --kernels 1 --ncu-timeout 25 --timeout 45 \
      --out /tmp/inv$i -- python3 $args ) > "$OUT/investigate_$i.log" 2>&1
  grep -E "^▶|finding:|evidence:|speed of light:|Not judged|\[done|\[failed|real" "$OUT/investigate_$i.log" | head -12
done
