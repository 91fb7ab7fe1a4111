"""The order in which a Triton GEMM's programs walk the output tiles: grouped, GROUP rows of tiles at a time,
column by column within the group, so that the programs running together share rows of A and columns of B in
L2 (the ordering of Triton's matmul tutorial). Shared by the async-copy-pipeline puzzle's kernel and
proto/warp_specialization.py."""
from __future__ import annotations

from perflab.workloads.triton_optional import jit, tl


@jit
def grouped_tile(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
    """(row, column) of the BM x BN output tile that program `pid` computes, for an M x N output."""
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    in_group = GROUP * num_n
    first_m = (pid // in_group) * GROUP
    group_m = min(num_m - first_m, GROUP)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    return pid_m, pid_n
