"""continuous-batching: the reference solution.

Same model, same engine, same requests, the same tokens for every request (each request's arithmetic is
the same in both schedules: the same forwards of the same shapes, row by row; see README.md). Only the
schedule changes: continuous (in-flight) batching. When a request has all its tokens, its slot takes the
next waiting request at once (that request's prefill runs before the next decode), so every decode
forward serves a full batch for as long as requests wait. Static batching ran every batch until its
longest request was done while the finished slots computed padding.
"""
from __future__ import annotations

from collections import deque

from perflab.workloads import siblings

_w = siblings.load(__file__, "18-continuous-batching")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, LENGTH_SEED, lengths, _build = _w.SIZE, _w.SMOKE_SIZE, _w.LENGTH_SEED, _w.lengths, _w._build


setup = _w.setup   # the same engine and request stream as workload.py


def serve(engine) -> None:
    """Continuous batching: refill every slot whose request is done, then one decode forward of all slots."""
    waiting = deque(range(len(engine.lengths)))

    def refill() -> None:
        for slot in range(engine.slots):
            while waiting and (engine.occupant[slot] is None or engine.finished(engine.occupant[slot])):
                engine.release(slot)
                engine.prefill(waiting.popleft(), slot)   # its first token now; it decodes with the others next

    refill()
    while any(r is not None and not engine.finished(r) for r in engine.occupant):
        engine.decode()
        refill()


def step(state: dict):
    return state["engine"].serve(serve)
