"""optimization-loop: the slow workload (step 0 of the loop).

The sum of a 256 MB fp32 vector (64 M values), written as a CUDA kernel. One thread per element, and
every thread adds its element to the single output word with a global atomicAdd: 64 M atomics on one
address, which lives in one L2 slice; its atomic unit serializes them while the rest of the GPU waits.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([1] fp32, the sum).
"""
from __future__ import annotations

from perflab.workloads.cuda_kernels import kernel
from perflab.workloads.sum_reduction import N, THREADS, launch, new_state

KERNEL_SRC = r"""
extern "C" __global__ void reduce_sum_atomic(const float* __restrict__ x, float* __restrict__ out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, x[i]);                  // TODO: 64 M atomics on one word. Reduce first, add once.
}
"""


def setup(device: str, seed: int) -> dict:
    return new_state(device, seed, kernel(KERNEL_SRC, "reduce_sum_atomic"))


def step(state: dict):
    return launch(state, (N + THREADS - 1) // THREADS)   # one thread per element


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """A new vector, drawn as setup draws it."""
    from perflab.workloads import fresh, sum_reduction

    fresh.redraw(state, sum_reduction.make_input, seed, "x")
