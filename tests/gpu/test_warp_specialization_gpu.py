"""warp-specialization (catalog 69) on the GPU: Triton compiles the solution's K loop into producer and consumer
warpgroups (setmaxnreg in its PTX, 12 warps per block) and leaves the slow one in one instruction stream,
and both compute the same product (tests/gpu/test_kernel_puzzles_gpu.py compares every variant's output)."""
import pytest

from perflab.workloads import siblings

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def compiled(warp_specialize: bool, warps: int):
    w = siblings.load(None, "69-warp-specialization")
    state = w.make_state("cuda", 1)
    a, b, c = state["a"], state["b"], state["out"]
    (m, k), n = a.shape, b.shape[0]
    kernel = w.matmul_tma[(w.triton.cdiv(m, w.BM) * w.triton.cdiv(n, w.BN),)](
        a, b, c, m, n, k, BM=w.BM, BN=w.BN, BK=w.BK, GROUP=w.GROUP, STAGES=w.STAGES, WS=warp_specialize,
        num_warps=warps)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), (a.float() @ b.float().T), rtol=2e-2, atol=0.5)
    return kernel


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability(0) < (9, 0),
                    reason="warp specialization with TMA and wgmma needs Hopper (sm_90)")
def test_only_the_solution_is_split_into_producer_and_consumer_warpgroups():
    slow, fixed = compiled(False, 8), compiled(True, 4)
    assert "setmaxnreg" not in slow.asm["ptx"] and "wgmma" in slow.asm["ptx"]
    assert "setmaxnreg" in fixed.asm["ptx"] and "mbarrier" in fixed.asm["ptx"]
