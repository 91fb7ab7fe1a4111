#!/usr/bin/env bash
# One call on a 2-GPU machine: the multi-GPU puzzles' slow vs fix at other sizes (scripts/multigpu_variants.py),
# with the NCCL streams at normal and at high priority and with one hardware queue, then the gpu-marked
# multi-GPU tests. From the repo root, after `source scripts/device_env.sh`:
#   bash scripts/multigpu_variants.sh
# Writes $OUT/variants/{topology.txt,normal.json,high_priority.json,one_queue.json,*.log,pytest.log}.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/variants; mkdir -p "$W"
export NCCL_NVLS_ENABLE=0
TR="python3 -m torch.distributed.run --standalone --nproc-per-node 2"
{ nvidia-smi -L; nvidia-smi topo -m; python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"; } > "$W/topology.txt" 2>&1
timeout 200 $TR scripts/multigpu_variants.py --json "$W/normal.json" 2>&1 | grep -v -i warn > "$W/normal.log"; tail -20 "$W/normal.log"
TORCH_NCCL_HIGH_PRIORITY=1 timeout 120 $TR scripts/multigpu_variants.py --only 70-,73-,76- --json "$W/high_priority.json" 2>&1 | grep -v -i warn > "$W/high_priority.log"; tail -12 "$W/high_priority.log"
CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 90 $TR scripts/multigpu_variants.py --only 70-,73- --json "$W/one_queue.json" 2>&1 | grep -v -i warn > "$W/one_queue.log"; tail -10 "$W/one_queue.log"
[ -n "${SKIP_TESTS:-}" ] || timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_multigpu_gpu.py tests/gpu/test_multigpu_puzzles_gpu.py 2>&1 | tail -30 > "$W/pytest.log"; cat "$W/pytest.log"
