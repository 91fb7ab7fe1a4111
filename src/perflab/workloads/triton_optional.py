"""Triton where it is installed, else stand-ins that let a module defining Triton kernels import on a CPU-only
machine (its kernels are then never called: the workloads take their torch path there)."""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
    jit = triton.jit
except ImportError:          # no Triton here: `@jit` leaves the function as it is
    triton = tl = None

    def jit(fn=None, **_):
        return fn if fn is not None else (lambda f: f)
