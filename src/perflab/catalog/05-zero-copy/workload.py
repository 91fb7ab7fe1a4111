"""zero-copy: the slow workload.

Standardize a feature column, y = (x - mean) / std, in three passes, one CUDA kernel each: the sum (for the
mean), the sum of squared deviations (for the variance), then the scale. The column, 64M fp32 (256 MB),
lives in pinned host memory, and the kernels read it there: a pinned tensor is mapped into the GPU's
address space (unified virtual addressing), so its pointer is valid in a kernel and no copy is ever
launched. That is zero-copy. The result y is written to device memory.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([N] fp32 on the GPU).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import cupy_module, kernel

NBYTES = 256 << 20                 # the column: 64M fp32
N = NBYTES // 4
THREADS, BLOCKS_PER_SM = 256, 8    # grid-stride loops over float4, 8 blocks per SM

KERNEL_SRC = r"""
__device__ __forceinline__ void block_add(float v, double* total) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  __shared__ float warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    double s = threadIdx.x < (blockDim.x >> 5) ? (double)warp_sums[threadIdx.x] : 0.0;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (threadIdx.x == 0) atomicAdd(total, s);
  }
}

extern "C" __global__ void standardize_sum(const float4* __restrict__ x, long long n4, double* acc) {
  float s = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = x[i];
    s += (v.x + v.y) + (v.z + v.w);
  }
  block_add(s, &acc[0]);
}

extern "C" __global__ void standardize_sqdev(const float4* __restrict__ x, long long n4, double* acc) {
  const float mean = (float)(acc[0] / (4.0 * n4));
  float s = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = x[i];
    float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
    s += (a * a + b * b) + (c * c + d * d);
  }
  block_add(s, &acc[1]);
}

extern "C" __global__ void standardize_scale(const float4* __restrict__ x, long long n4, const double* acc,
                                             float4* __restrict__ y) {
  const float mean = (float)(acc[0] / (4.0 * n4));
  const float rstd = (float)(1.0 / sqrt(acc[1] / (4.0 * n4)));
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = x[i];
    y[i] = make_float4((v.x - mean) * rstd, (v.y - mean) * rstd, (v.z - mean) * rstd, (v.w - mean) * rstd);
  }
}
"""


def device_pointer(t) -> int:
    """The device address of a pinned host tensor: with unified addressing it is the host address; ask
    the runtime anyway (cudaPointerGetAttributes) so a platform without UVA fails loudly here."""
    ptr = t.data_ptr()
    attrs = cupy_module().cuda.runtime.pointerGetAttributes(ptr)
    if not getattr(attrs, "hostPointer", 0) or not getattr(attrs, "devicePointer", 0):
        raise RuntimeError("the pinned tensor is not mapped into the device's address space")
    return int(attrs.devicePointer)


def make_column(device: str, seed: int):
    """The feature column in pinned host memory (drawn on the device, which is fast, then copied over once)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))
    x = torch.randn(N, generator=gen, device=device) * 3 + 1.5
    host = torch.empty(N, dtype=torch.float32, pin_memory=True)
    host.copy_(x)
    return host


def reference_state(state: dict):
    """What every variant computes, in float64 from the same column, rounded to fp32."""
    x = state["x_host"].to(state["out"].device).double()
    return ((x - x.mean()) / x.std(correction=0)).float()


def setup(device: str, seed: int) -> dict:
    import torch

    x_host = make_column(device, seed)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return {"x_host": x_host, "host_ptr": device_pointer(x_host), "n4": N // 4,
            "acc": torch.zeros(2, device=device, dtype=torch.float64), "out": torch.empty(N, device=device),
            "grid": (min(sms * BLOCKS_PER_SM, max(1, N // 4 // THREADS)),),
            "sum": kernel(KERNEL_SRC, "standardize_sum"), "sqdev": kernel(KERNEL_SRC, "standardize_sqdev"),
            "scale": kernel(KERNEL_SRC, "standardize_scale")}


def passes(state: dict, xptr: int):
    """The three passes over the column at device address xptr; y into state["out"]."""
    g, t = state["grid"], (THREADS,)
    x, n4, acc = np.uint64(xptr), np.int64(state["n4"]), np.uint64(state["acc"].data_ptr())
    state["acc"].zero_()
    state["sum"](g, t, (x, n4, acc))
    state["sqdev"](g, t, (x, n4, acc))
    state["scale"](g, t, (x, n4, acc, np.uint64(state["out"].data_ptr())))
    return state["out"]


def step(state: dict):
    return passes(state, state["host_ptr"])   # TODO: every pass reads x where it lives: how often does it cross?


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x_host",)


def refill(state: dict, seed: int) -> None:
    """A new column, drawn as setup draws it (on the device, then into the same pinned buffer)."""
    state["x_host"].copy_(make_column(str(state["out"].device), seed))
