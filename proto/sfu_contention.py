"""sfu-contention prototype: a learned pair potential V(r) = sum_k w_k exp(-gamma (r - mu_k)^2), K Gaussians
on a uniform grid of centres mu_k = k * DELTA, evaluated for millions of pair distances r.

slow     one exp per (distance, centre): K MUFU.EX2 per element (ex2.approx, already the fast intrinsic).
         The special-function unit (the XU pipe: 16 results per clock per SM, an eighth of the FMA
         pipe's 128) is the limit; every other unit waits for it.
precise  the same with libm's precise expf (more FMA instructions around the same one MUFU per exp):
         shows that "fast math" is not the cure when the SFU is the limit.
fast     the same sum with 3 exps per block of 16 centres: exp(-g(u - D)^2) = exp(-g u^2) * exp(2gDu - gD^2),
         and the ratio itself changes by the constant exp(-2gD^2) from one centre to the next, so inside a
         block each term is the previous one times a ratio (2 FMULs on the FMA pipe) instead of an exp.
         Same result to ~1e-6 relative (products of at most 8 factors).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

NAME = "pair_potential"
VARIANTS = ("slow", "fast", "precise")
SIZES = {"2M-K128": {"n": 2 << 20, "k": 128}, "8M-K128": {"n": 8 << 20, "k": 128},
         "8M-K64": {"n": 8 << 20, "k": 64}, "32M-K128": {"n": 32 << 20, "k": 128}}
DEFAULT = "8M-K128"
TOL = (1e-4, 1e-5)
CUTOFF = 6.0        # distances in [0, CUTOFF)
BLOCK = 16          # centres per recurrence block (fast variant): 3 exps per 16 terms
THREADS = 256
LOG2E = 1.4426950408889634


def params(k: int) -> dict:
    """The model: K centres on [0, CUTOFF], width = 2 grid steps, weights fixed (a trained model's)."""
    delta = CUTOFF / (k - 1)
    sigma = 2.0 * delta
    gamma = 1.0 / (2.0 * sigma * sigma)
    w = np.random.default_rng(1234).standard_normal(k).astype(np.float32) / math.sqrt(k / 8)
    return {"k": k, "delta": delta, "gamma": gamma, "w": w}


def _f(x: float) -> str:
    return f"{np.float32(x)!r}".replace("np.float32(", "").rstrip(")") + "f"


def direct(name: str, term: str, comment: str) -> str:
    """One exp per (distance, centre): the slow variants, with `term` the exp of -gamma u^2."""
    return f"""extern "C" __global__ void {name}(const float* __restrict__ r, float* __restrict__ out, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = r[i], acc = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {{
    float u = x - k * DELTA;
    acc = fmaf(W[k], {term}, acc);   // {comment}
  }}
  out[i] = acc;
}}
"""


def source(p: dict) -> str:
    k, d, g = p["k"], p["delta"], p["gamma"]
    weights = ", ".join(_f(v) for v in p["w"])
    c = -g * LOG2E                       # exp(-g u^2) = 2^(c u^2)
    a = 2.0 * g * d * LOG2E              # ratio up:   exp( 2 g D u - g D^2) = 2^( a u + b)
    b = -g * d * d * LOG2E               # ratio down: exp(-2 g D u - g D^2) = 2^(-a u + b)
    q = math.exp(-2.0 * g * d * d)       # each ratio changes by this factor per centre
    return f"""
#define K {k}
#define BLOCK {BLOCK}
#define DELTA {_f(d)}
__constant__ float W[K] = {{{weights}}};
__device__ __forceinline__ float ex2(float x) {{ float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }}

{direct("pair_potential_direct", "ex2(" + _f(c) + " * u * u)", "one MUFU.EX2 per term")}
{direct("pair_potential_precise", "expf(" + _f(-g) + " * u * u)", "libm expf: ~1 ulp, the same one MUFU.EX2 inside")}
extern "C" __global__ void pair_potential_recurrence(const float* __restrict__ r, float* __restrict__ out, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = r[i], acc = 0.f;
#pragma unroll
  for (int m = BLOCK / 2; m < K; m += BLOCK) {{               // block [m - BLOCK/2, m + BLOCK/2 - 1]
    float u = x - m * DELTA;
    float t = ex2({_f(c)} * u * u);                          // term m
    float up = ex2(fmaf({_f(a)}, u, {_f(b)}));               // term m+1 / term m
    float dn = ex2(fmaf({_f(-a)}, u, {_f(b)}));              // term m-1 / term m
    acc = fmaf(W[m], t, acc);
    float tu = t, td = t;
#pragma unroll
    for (int j = 1; j <= BLOCK / 2; ++j) {{
      td *= dn; dn *= {_f(q)};
      acc = fmaf(W[m - j], td, acc);
      if (j < BLOCK / 2) {{ tu *= up; up *= {_f(q)}; acc = fmaf(W[m + j], tu, acc); }}
    }}
  }}
  out[i] = acc;
}}
"""


KERNELS = {"slow": "pair_potential_direct", "precise": "pair_potential_precise", "fast": "pair_potential_recurrence"}


def setup(device: str, seed: int, n: int, k: int) -> dict:
    import cupy
    import torch

    p = params(k)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    r = torch.rand(n, generator=gen, device=device) * CUTOFF
    out = torch.empty_like(r)
    mod = cupy.RawModule(code=source(p))
    return {"r": r, "out": out, "n": n, "p": p, "r_cu": cupy.asarray(r), "out_cu": cupy.asarray(out),
            "kernels": {v: mod.get_function(name) for v, name in KERNELS.items()}}


def main_kernel(state: dict, variant: str):
    n = state["n"]
    state["kernels"][variant](((n + THREADS - 1) // THREADS,), (THREADS,), (state["r_cu"], state["out_cu"], np.int32(n)))
    return state["out"]


run = main_kernel


def reference(state: dict):
    """float64 sum, in chunks (a [chunk, K] matrix at a time)."""
    import torch

    p = state["p"]
    mu = torch.arange(p["k"], device=state["r"].device, dtype=torch.float64) * p["delta"]
    w = torch.as_tensor(p["w"], device=state["r"].device, dtype=torch.float64)
    out = torch.empty(state["n"], dtype=torch.float64, device=state["r"].device)
    for s in range(0, state["n"], 1 << 18):
        u = state["r"][s:s + (1 << 18)].double()[:, None] - mu[None, :]
        out[s:s + (1 << 18)] = torch.exp(-p["gamma"] * u * u) @ w
    return out.float()


def notes(state: dict) -> dict:
    k = state["p"]["k"]
    return {"mufu_per_element": {"slow": k, "precise": k, "fast": 3 * k // BLOCK},
            "xu_bound_ms_at_16_per_clk_per_sm_1755mhz": state["n"] * k / (132 * 16 * 1.755e9) * 1e3}


if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
