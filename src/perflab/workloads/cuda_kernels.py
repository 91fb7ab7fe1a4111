"""CUDA C++ kernels for the kernel puzzles: compiled at run time by NVRTC through CuPy's RawKernel
and launched on torch tensors (zero-copy CuPy views made once, in setup).

CuPy launches on its current stream, the legacy default stream, which torch also uses by default:
kernels and torch ops of a step stay ordered and torch.cuda.synchronize() waits for both.
Kernel scalars must be numpy scalars of the C type (np.int32 for int, np.int64 for long long).
"""
from __future__ import annotations

from typing import Any


def cupy_module() -> Any:
    try:
        import cupy
    except ImportError:
        from perflab.errors import PerflabError

        raise PerflabError("this kernel puzzle needs CuPy (pip install cupy-cuda12x or cupy-cuda13x)") from None
    return cupy


def kernel(source: str, name: str, options: tuple[str, ...] = ()) -> Any:
    """A RawKernel named `name` (an extern "C" __global__ function of `source`); compiled on first launch."""
    return cupy_module().RawKernel(source, name, options=tuple(options))


def view(tensor: Any) -> Any:
    """A zero-copy CuPy array over a CUDA torch tensor (make it once: the conversion may synchronize)."""
    return cupy_module().asarray(tensor)


def kernel_state(x: Any, out: Any, source: str, name: str, **more: Any) -> dict:
    """A kernel puzzle's state: its input `x` and output `out` (CUDA torch tensors, or CPU ones in a smoke run),
    their CuPy views `x_cu` and `out_cu`, and the kernel `name` of `source`; `more` joins as it is."""
    return {"x": x, "out": out, "x_cu": view(x), "out_cu": view(out), "kernel": kernel(source, name), **more}
