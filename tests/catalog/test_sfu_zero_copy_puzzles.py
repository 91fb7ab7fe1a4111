"""Kernel puzzles 66-sfu-contention and 05-zero-copy (issue 20) on the CPU: what their kernels compute,
checked without a GPU. The recordings (questions, planted findings) are checked by tests/catalog/test_puzzle_ncu.py
once recorded; the kernels run on the device in tests/gpu/test_kernel_puzzles_gpu.py.

sfu-contention: the solution's recurrence (3 exps per block of 16 centres), replayed in float32 with the
constants its CUDA source holds, gives the direct sum within the check's tolerance; with nvcc at hand the
two sources compile for sm_90 and their PTX holds 128 and 24 ex2.approx per distance.
zero-copy: slow and solution steps, run on CPU tensors with the three kernels emulated by address, give
the float64 reference; the solution reads a copy made in the step, the slow one the host column.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from perflab.workloads import siblings

F = np.float32
FLOAT = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)f"


def sfu(name: str):
    return siblings.load(None, "66-sfu-contention", name)


def literals(src: str, pattern: str) -> list[float]:
    """The float literals that `pattern`'s {F} placeholders match in src, in order."""
    found = re.findall(pattern.replace("{F}", FLOAT), src)
    return [float(v) for hit in found for v in (hit if isinstance(hit, tuple) else (hit,))]


def direct_sum(r: np.ndarray, p: dict) -> np.ndarray:
    mu = np.arange(p["k"]) * p["delta"]
    return np.exp(-p["gamma"] * (r[:, None] - mu[None, :]) ** 2) @ p["w"].astype(np.float64)


def recurrence_from_source(x: np.ndarray, src: str) -> np.ndarray:
    """pair_potential_recurrence in float32, its constants read from the CUDA source (exp2 for ex2.approx)."""
    k, block = (int(re.search(rf"#define {n} (\d+)", src).group(1)) for n in ("K", "BLOCK"))
    delta = F(literals(src, r"#define DELTA {F}")[0])
    w = np.array(literals(re.search(r"W\[K\] = \{([^}]*)\}", src).group(1), r"{F}"), dtype=F)
    (c,) = literals(src, r"float t = ex2\({F} \* u \* u\)")
    (a, b), (na, nb) = (literals(src, rf"float {v} = ex2\(fmaf\({{F}}, u, {{F}}\)\)") for v in ("up", "dn"))
    q = literals(src, r"\*= {F};")
    assert len(w) == k and na == -a and nb == b and len(set(q)) == 1
    q = F(q[0])
    acc, seen = np.zeros_like(x), []
    for m in range(block // 2, k, block):
        u = x - F(m) * delta
        t = np.exp2(F(c) * u * u)
        up, dn = np.exp2(F(a) * u + F(b)), np.exp2(F(-a) * u + F(b))
        acc = acc + w[m] * t
        tu, td = t, t
        seen.append(m)
        for j in range(1, block // 2 + 1):
            td, dn = td * dn, dn * q
            acc, seen = acc + w[m - j] * td, seen + [m - j]
            if j < block // 2:
                tu, up = tu * up, up * q
                acc, seen = acc + w[m + j] * tu, seen + [m + j]
    assert sorted(seen) == list(range(k)), "every centre exactly once"
    return acc


def test_sfu_solution_recurrence_gives_the_direct_sum_within_the_check_tolerance():
    w, s = sfu("workload.py"), sfu("solution.py")
    r = np.random.default_rng(7).random(20000).astype(F) * F(w.CUTOFF)
    expected = direct_sum(r.astype(np.float64), w.PARAMS)
    got = recurrence_from_source(r, s.KERNEL_SRC)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert np.abs(got - expected).max() < 1e-5 * np.abs(expected).max()   # ~1e-6 as the prototype measured
    (c,) = literals(w.KERNEL_SRC, r"ex2\({F} \* u \* u\)")           # the slow kernel's exponent: the same model
    assert c == pytest.approx(-w.PARAMS["gamma"] * w.LOG2E, rel=1e-6)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed: the CUDA sources are compiled on the GPU")
def test_sfu_sources_compile_and_the_fix_takes_24_exps_per_distance_not_128(tmp_path):
    counts = {}
    for name, module in (("slow", sfu("workload.py")), ("fix", sfu("solution.py"))):
        cu, ptx = tmp_path / f"{name}.cu", tmp_path / f"{name}.ptx"
        cu.write_text(module.KERNEL_SRC)
        p = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", str(ptx), str(cu)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        counts[name] = ptx.read_text().count("ex2.approx")
    assert counts == {"slow": 128, "fix": 24}


# --- zero-copy -------------------------------------------------------------------------------------------

try:
    import torch
except ImportError:  # pragma: no cover - the sfu tests above need numpy only
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


def zc(name: str):
    return siblings.load(None, "05-zero-copy", name)


class Memory:
    """Device addresses -> CPU tensors, and the three kernels emulated on them (one float4 = 4 floats)."""

    def __init__(self, *tensors):
        self.at = {t.data_ptr(): t for t in tensors}
        self.reads: list[int] = []

    def x(self, ptr, n4):
        self.reads.append(int(ptr))
        return self.at[int(ptr)][: 4 * int(n4)].double()

    def kernels(self):
        def k_sum(grid, block, args):
            x, n4, acc = args
            self.at[int(acc)][0] += self.x(x, n4).sum()

        def k_sqdev(grid, block, args):
            x, n4, acc = args
            a = self.at[int(acc)]
            a[1] += ((self.x(x, n4) - a[0] / (4 * int(n4))) ** 2).sum()

        def k_scale(grid, block, args):
            x, n4, acc, y = args
            a = self.at[int(acc)]
            mean, var = a[0] / (4 * int(n4)), a[1] / (4 * int(n4))
            self.at[int(y)][: 4 * int(n4)] = ((self.x(x, n4) - mean) / var.sqrt()).float()

        return {"sum": k_sum, "sqdev": k_sqdev, "scale": k_scale}


def zero_copy_state(seed: int, n: int = 4096, with_device_copy: bool = False):
    """What setup() builds on the GPU, on CPU tensors: the column, its 'mapped' address, acc, out, kernels."""
    x_host = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3 + 1.5
    state = {"x_host": x_host, "host_ptr": x_host.data_ptr(), "n4": n // 4, "grid": (8,),
             "acc": torch.zeros(2, dtype=torch.float64), "out": torch.full((n,), float("nan"))}
    if with_device_copy:
        state["x_dev"] = torch.empty_like(x_host)
    mem = Memory(*(t for t in state.values() if isinstance(t, torch.Tensor)))
    state.update(mem.kernels())
    return state, mem


@needs_torch
@pytest.mark.parametrize("variant", ["workload.py", "solution.py"])
def test_zero_copy_steps_standardize_the_column(variant):
    state, mem = zero_copy_state(3, with_device_copy=variant == "solution.py")
    module = zc(variant)
    for _ in range(2):                                   # acc starts from zero every step
        out = module.step(state)
        torch.testing.assert_close(out, zc("workload.py").reference_state(state), rtol=1e-5, atol=1e-5)
    x_dev = state.get("x_dev")
    read_from = state["host_ptr"] if x_dev is None else x_dev.data_ptr()
    assert mem.reads == [read_from] * 6                  # three passes per step over one address
    assert x_dev is None or torch.equal(x_dev, state["x_host"])


@needs_torch
def test_zero_copy_solution_copies_the_column_in_every_step():
    state, _ = zero_copy_state(5, with_device_copy=True)
    s = zc("solution.py")
    s.step(state)
    state["x_host"].copy_(torch.rand(state["x_host"].numel()) ** 3)   # new data in the pinned buffer
    torch.testing.assert_close(s.step(state), zc("workload.py").reference_state(state), rtol=1e-5, atol=1e-5)
