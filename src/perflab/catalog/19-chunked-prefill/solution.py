"""chunked-prefill: the reference solution.

Same model, engine, requests and answers; every request gets the same per-token scores (within bf16
rounding: a prompt prefilled in chunks runs other GEMM shapes than a whole one). Only the schedule changes:
a token budget per forward. Every forward carries every slot's decode row and at most one prefill chunk of
`engine.chunk` (512) prompt tokens, so a long prompt is prefilled over several forwards that also decode,
instead of one 4,096-token forward during which every running request waits.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "19-chunked-prefill")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, LENGTH_SEED, lengths, arrivals, _build, busy, free_slots = (
    _w.SIZE, _w.SMOKE_SIZE, _w.LENGTH_SEED, _w.lengths, _w.arrivals, _w._build, _w.busy,
    _w.free_slots)


setup = _w.setup   # the same engine and request stream as workload.py


def serve(engine) -> None:
    """Chunked prefill: one request's prompt at a time, one chunk per forward, riding along with the decodes."""
    filling = None                                   # (request, slot) whose prompt is being prefilled
    while busy(engine):
        if filling is None:
            waiting, free = engine.waiting(), free_slots(engine)
            if waiting and free:
                engine.release(free[0])
                filling = (waiting[0], free[0])
        if filling is None:
            engine.decode()
            continue
        engine.mixed(*filling)                       # every slot's decode row + the next chunk of the prompt
        if engine.prefilled[filling[0]] == engine.prompt_len:
            filling = None


def step(state: dict):
    return state["engine"].serve(serve)
