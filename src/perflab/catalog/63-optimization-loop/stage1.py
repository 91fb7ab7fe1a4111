"""optimization-loop: stage 1, after the first fix (the atomics).

The fix for `atomic-contention`: reduce inside each block first and add to the output once per block.
The grid is sized to the GPU (4 blocks per SM) and each block walks over the vector in tiles of 256
values: its threads load a tile into shared memory (coalesced), then thread 0 adds the 256 values to the
block's running sum, and at the end thread 0 adds that sum to the output: 528 atomics on an H100
instead of 64 M.

Re-profiled, the kernel has a new top finding: the additions, the bulk of the executed instructions,
run on one lane of one warp while the other 31 lanes (and the block's other 7 warps, at the barrier)
wait.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([1] fp32, the sum).
"""
from __future__ import annotations

from perflab.workloads.cuda_kernels import kernel
from perflab.workloads.sum_reduction import launch, new_state

KERNEL_SRC = r"""
extern "C" __global__ void reduce_sum_serial(const float* __restrict__ x, float* __restrict__ out, long long n) {
  __shared__ float tile[256];                               // blockDim.x == 256
  float block_sum = 0.0f;                                   // thread 0's running sum
  for (long long base = (long long)blockIdx.x * 256; base < n; base += (long long)gridDim.x * 256) {
    long long i = base + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;                // one element per thread, coalesced
    __syncthreads();
    if (threadIdx.x == 0)
      for (int j = 0; j < 256; ++j) block_sum += tile[j];   // one lane adds the whole tile
    __syncthreads();                                        // before the next tile overwrites it
  }
  if (threadIdx.x == 0) atomicAdd(out, block_sum);          // one atomic per block
}
"""


def setup(device: str, seed: int) -> dict:
    return new_state(device, seed, kernel(KERNEL_SRC, "reduce_sum_serial"))


def step(state: dict):
    return launch(state, state["blocks"])   # 4 blocks per SM
