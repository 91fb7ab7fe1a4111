"""serving-trace: the reference solution.

Same model, engine, scheduler, requests and answers; every request gets the same per-token scores (within bf16
rounding: a prompt prefilled in chunks runs other GEMM shapes than a whole one). Only the token budget changes: an
iteration prefills at most CHUNK (512) prompt tokens, so a 4,096-token prompt is prefilled over 8 iterations that
also decode every running request, instead of one iteration during which they all wait (vLLM:
`--enable-chunked-prefill` with a `--max-num-batched-tokens` of a few hundred tokens).
"""
from __future__ import annotations

from perflab.workloads import siblings, sizes

_w = siblings.load(__file__, "31-serving-trace")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, LENGTH_SEED, lengths, arrivals, serve = (
    _w.SIZE, _w.SMOKE_SIZE, _w.LENGTH_SEED, _w.lengths, _w.arrivals, _w.serve)
CHUNK, SMOKE_CHUNK = 512, 4   # an eighth of the prompt: 8 iterations per prompt, fewer than the 10 between arrivals


def setup(device: str, seed: int) -> dict:
    return _w.build(device, seed, chunk=SMOKE_CHUNK if sizes.smoke(device) else CHUNK)


def step(state: dict):
    return state["engine"].serve(serve)
