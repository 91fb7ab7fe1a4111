"""sfu-contention: the slow workload.

A learned pair potential V(r) = sum_k w_k exp(-gamma (r - mu_k)^2): K = 128 Gaussians on a uniform grid of
centres mu_k = k * DELTA over [0, CUTOFF], their weights fixed (a trained model's), evaluated for N pair
distances r per step, one thread per distance. Each term takes one exp, written as exp2 through the
hardware instruction ex2.approx (MUFU.EX2, the fast intrinsic already): 128 of them per distance.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([N] fp32).
"""
from __future__ import annotations

import math

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

N, K = 8 << 20, 128          # distances per step, Gaussian terms
CUTOFF = 6.0                 # distances in [0, CUTOFF)
THREADS = 256
LOG2E = 1.4426950408889634


def params(k: int = K) -> dict:
    """The model: K centres on [0, CUTOFF], width = 2 grid steps, weights fixed (a trained model's)."""
    delta = CUTOFF / (k - 1)
    sigma = 2.0 * delta
    gamma = 1.0 / (2.0 * sigma * sigma)
    w = np.random.default_rng(1234).standard_normal(k).astype(np.float32) / math.sqrt(k / 8)
    return {"k": k, "delta": delta, "gamma": gamma, "w": w}


def f32(x: float) -> str:
    """x as a CUDA float literal, exactly the float32 the host rounds it to."""
    return f"{np.float32(x)!r}".replace("np.float32(", "").rstrip(")") + "f"


def preamble(p: dict) -> str:
    """What every variant's kernel source starts with: the model as constants and the exp2 instruction."""
    weights = ", ".join(f32(v) for v in p["w"])
    return f"""
#define K {p["k"]}
#define DELTA {f32(p["delta"])}
__constant__ float W[K] = {{{weights}}};
__device__ __forceinline__ float ex2(float x) {{ float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }}
"""


PARAMS = params()
C = -PARAMS["gamma"] * LOG2E                 # exp(-gamma u^2) = 2^(C u^2)

KERNEL_SRC = preamble(PARAMS) + f"""
extern "C" __global__ void pair_potential_direct(const float* __restrict__ r, float* __restrict__ out, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = r[i], acc = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {{
    float u = x - k * DELTA;
    acc = fmaf(W[k], ex2({f32(C)} * u * u), acc);   // TODO: one MUFU.EX2 per term, K per distance: which unit runs it?
  }}
  out[i] = acc;
}}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return torch.rand(N, generator=gen, device=device) * CUTOFF


def reference_state(state: dict):
    """What every variant computes: the float64 sum, a [chunk, K] matrix at a time, rounded to fp32."""
    import torch

    r, p = state["r"], PARAMS
    mu = torch.arange(p["k"], device=r.device, dtype=torch.float64) * p["delta"]
    w = torch.as_tensor(p["w"], device=r.device, dtype=torch.float64)
    out = torch.empty(r.numel(), dtype=torch.float64, device=r.device)
    for s in range(0, r.numel(), 1 << 18):
        u = r[s:s + (1 << 18)].double()[:, None] - mu[None, :]
        out[s:s + (1 << 18)] = torch.exp(-p["gamma"] * u * u) @ w
    return out.float()


def setup(device: str, seed: int) -> dict:
    import torch

    r = make_input(device, seed)
    out = torch.empty_like(r)
    return {"r": r, "out": out, "r_cu": view(r), "out_cu": view(out),
            "kernel": kernel(KERNEL_SRC, "pair_potential_direct")}


def step(state: dict):
    state["kernel"](((N + THREADS - 1) // THREADS,), (THREADS,), (state["r_cu"], state["out_cu"], np.int32(N)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("r",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "r")
