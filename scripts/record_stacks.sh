#!/usr/bin/env bash
# On the GPU machine, from the repo root, after `source scripts/device_env.sh` (with .whl carried):
#   BUDGET=420 bash scripts/record_stacks.sh
# Records the stacks fixtures (scripts/record_stack_traces.py), Nsight Compute reports of two elementwise
# kernels that run at their DRAM roof (float4 SiLU, a + b), and what `perflab profile` and
# `perflab investigate` say of a compiled block. Everything lands packed in $OUT/stacks.tgz.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-420}
W=/tmp/stacks
rm -rf "$W"; mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$W/gpu.txt" 2>&1
NCU=$(command -v ncu || echo /opt/nvidia/nsight-compute/ncu)
for op in "silu:torch.nn.functional.silu(x)" "add:x + y"; do
  name=${op%%:*}; expr=${op#*:}
  timeout 60 "$NCU" --clock-control none --set full -k regex:vectorized_elementwise -c 1 -f -o "$W/roof_$name" \
    python3 -c "import torch; x=torch.randn(1<<28, device='cuda'); y=torch.randn(1<<28, device='cuda'); torch.cuda.synchronize(); $expr; torch.cuda.synchronize()" \
    > "$W/roof_$name.log" 2>&1 || echo "ncu $name failed" | tee -a "$W/errors.txt"
done
timeout $(( BUDGET / 2 )) python3 scripts/record_stack_traces.py --out "$W" --budget-s $(( BUDGET / 2 - 40 )) 2>&1 \
  | grep -v USDT | tee "$W/record.log" | tail -20
for args in "--as function --mode default" "--as module --mode reduce-overhead"; do
  tag=$(echo "$args" | tr -c 'a-z\n' '_' | tr -s _)
  ( time timeout 120 perflab profile --out "/tmp/prof$tag" -- python3 examples/stacks/compiled_block.py $args --iters 2000 ) \
    > "$W/profile$tag.log" 2>&1
  cp /tmp/prof$tag/*/trace.json.gz "$W/profile$tag.trace.json.gz" 2>/dev/null || cp /tmp/prof$tag/trace.json.gz "$W/profile$tag.trace.json.gz" 2>/dev/null
done
( time timeout 150 perflab investigate --timeout 100 --ncu-timeout 40 --out /tmp/inv -- python3 examples/stacks/compiled_block.py --iters 2000 ) \
  > "$W/investigate_block.log" 2>&1
tail -5 "$W"/profile*.log "$W"/investigate_block.log
tar -czf "$OUT/stacks.tgz" -C /tmp stacks
ls -la "$W" | head -40
