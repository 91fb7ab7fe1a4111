"""zero-copy prototype: standardize a feature column that lives in pinned host memory,
y = (x - mean) / std (two-pass variance: mean, then the sum of squared deviations, then scale).

slow     zero-copy: the three kernels read x straight from mapped pinned host memory (UVA: the pinned
         pointer is valid on the device), so x crosses PCIe three times, once per pass.
fast     copy first: one cudaMemcpyAsync of x into a device buffer (PCIe once), then the same three
         kernels read it from HBM (~50x the PCIe bandwidth).
The sweep also runs the one-pass case (`-r1`: only the sum): x read once, where zero-copy should win
(it saves the extra pass through HBM, the copy's launch and its buffer), most clearly for small x.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

NAME = "standardize_sum"
VARIANTS = ("slow", "fast")
_B = {"64K": 64 << 10, "1M": 1 << 20, "16M": 16 << 20, "256M": 256 << 20}
SIZES = {f"{label}-r{p}": {"nbytes": nbytes, "passes": p} for p in (1, 3) for label, nbytes in _B.items()}
DEFAULT = "256M-r3"
TOL = (1e-4, 1e-4)
THREADS, BLOCKS_PER_SM = 256, 8

SOURCE = r"""
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
    import cupy

    ptr = t.data_ptr()
    attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
    if not getattr(attrs, "hostPointer", 0) or not getattr(attrs, "devicePointer", 0):
        raise RuntimeError("the pinned tensor is not mapped into the device's address space")
    return int(attrs.devicePointer)


def setup(device: str, seed: int, nbytes: int, passes: int) -> dict:
    import cupy
    import torch

    n = nbytes // 4
    gen = torch.Generator().manual_seed(int(seed))
    x_host = (torch.randn(n, generator=gen) * 3 + 1.5).pin_memory()
    x_dev = torch.empty(n, device=device)
    mod = cupy.RawModule(code=SOURCE)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    out = torch.empty(n, device=device) if passes == 3 else torch.empty(1, device=device, dtype=torch.float64)
    return {"x_host": x_host, "x_dev": x_dev, "host_ptr": device_pointer(x_host), "n4": n // 4, "passes": passes,
            "acc": torch.zeros(2, device=device, dtype=torch.float64), "out": out,
            "grid": (min(sms * BLOCKS_PER_SM, max(1, n // 4 // THREADS)),),
            "k": {name: mod.get_function(name) for name in ("standardize_sum", "standardize_sqdev", "standardize_scale")}}


def _passes(state: dict, xptr: int):
    k, g, t = state["k"], state["grid"], (THREADS,)
    n4, acc = np.int64(state["n4"]), np.uint64(state["acc"].data_ptr())
    x = np.uint64(xptr)
    state["acc"].zero_()
    k["standardize_sum"](g, t, (x, n4, acc))
    if state["passes"] == 1:
        state["out"].copy_(state["acc"][:1])
        return state["out"]
    k["standardize_sqdev"](g, t, (x, n4, acc))
    k["standardize_scale"](g, t, (x, n4, acc, np.uint64(state["out"].data_ptr())))
    return state["out"]


def run(state: dict, variant: str):
    if variant == "slow":
        return _passes(state, state["host_ptr"])
    state["x_dev"].copy_(state["x_host"], non_blocking=True)
    return _passes(state, state["x_dev"].data_ptr())


def main_kernel(state: dict, variant: str):
    """The first pass (the sum) alone: from host memory (slow) or from the device copy (fast)."""
    xptr = state["host_ptr"] if variant == "slow" else state["x_dev"].data_ptr()
    if variant != "slow":
        state["x_dev"].copy_(state["x_host"], non_blocking=True)
    state["acc"].zero_()
    state["k"]["standardize_sum"](state["grid"], (THREADS,), (np.uint64(xptr), np.int64(state["n4"]),
                                                              np.uint64(state["acc"].data_ptr())))


def reference(state: dict):
    x = state["x_host"].to(state["x_dev"].device).double()
    if state["passes"] == 1:
        return x.sum().reshape(1)
    return ((x - x.mean()) / x.std(correction=0)).float()


def notes(state: dict) -> dict:
    nbytes = state["n4"] * 16
    return {"bytes": nbytes, "passes": state["passes"], "pcie_bytes": {"slow": state["passes"] * nbytes, "fast": nbytes}}


if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
