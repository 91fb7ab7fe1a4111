"""One-time costs per new shape: a host op whose first call with each new input shape is slow and whose later
calls with a shape already seen are fast (a cuDNN/cuBLAS plan built, a kernel autotuned or compiled for each
shape: HF generate's attention grows its KV length by one each token, so every token is a new shape).

Calls are grouped by signature (Input Dims, Input type, Concrete Inputs, as record_shapes records them). A call
is slow at >= SLOW_RATIO x the median of the later calls of its own signature (of all repeating calls when its
signature does not repeat: the steady state) and
at least SLOW_MIN_US. The op pays per shape when it has at least two slow calls and nearly all of them are the
first call of their signature. Pure: no torch.
"""
from __future__ import annotations

import numpy as np

from perflab.trace.model import CPU_OP, Trace

SLOW_RATIO = 10.0
SLOW_MIN_US = 1_000.0
FIRST_SHARE = 0.8      # share of the slow calls that must be the first of their shape


def new_shape_costs(trace: Trace, name: str, within=None) -> dict | None:
    """{op, shapes, new_shapes, calls, first_ms (median of the slow first calls), steady_ms, one_time_ms} or None.
    `within`: a Windows object; calls outside its windows are left out."""
    if name not in trace.names:
        return None
    rows = np.flatnonzero((trace.kind == CPU_OP) & (trace.name == trace.names.index(name)))
    if within is not None:
        rows = rows[within.contains(trace.ts[rows])]
    if rows.size < 3 or (trace.shape[rows] < 0).all():
        return None
    rows = rows[np.argsort(trace.ts[rows], kind="stable")]
    sig = np.stack([trace.shape[rows], trace.dtype[rows], trace.concrete[rows]], axis=1)
    _, first_at, which = np.unique(sig, axis=0, return_index=True, return_inverse=True)
    first = np.zeros(rows.size, dtype=bool)
    first[first_at] = True
    dur = trace.dur[rows].astype(float)
    if first.all():
        return None   # no shape repeats: no steady state to compare with
    steady = float(np.median(dur[~first]))
    # each call against the steady state of its own shape (a longer shape, a prefill, is slower every time)
    own = np.full(first_at.size, steady)
    for k in np.unique(which[~first]).tolist():
        own[k] = float(np.median(dur[~first & (which == k)]))
    base = np.maximum(own[which], 1e-9)
    slow = (dur >= SLOW_RATIO * base) & (dur >= SLOW_MIN_US)
    if (slow & first).sum() < 2 or (slow & first).sum() < FIRST_SHARE * slow.sum():
        return None
    paid = slow & first
    return {"op": name, "calls": int(rows.size), "shapes": int(first.sum()), "new_shapes": int(paid.sum()),
            "first_ms": round(float(np.median(dur[paid])) / 1e3, 2),
            "first_range_ms": [round(float(dur[paid].min()) / 1e3, 2), round(float(dur[paid].max()) / 1e3, 2)],
            "steady_ms": round(steady / 1e3, 3), "one_time_ms": round(float(dur[paid].sum()) / 1e3, 1),
            "repeated_calls": int((~first).sum())}


def words(c: dict) -> str:
    lo, hi = c["first_range_ms"]
    span = f"{lo:,.0f}-{hi:,.0f} ms" if hi - lo >= 1 else f"{hi:,.0f} ms"
    return (f"{c['op']} pays a one-time cost per new input shape: {c['new_shapes']} of the {c['shapes']} distinct "
            f"shapes it saw in the window took {span} on their first call ({c['one_time_ms']:,.0f} ms in all), while "
            f"its {c['repeated_calls']} calls with a shape seen before take a median {c['steady_ms']:.2f} ms "
            "(the steady state once every shape has been seen)")
