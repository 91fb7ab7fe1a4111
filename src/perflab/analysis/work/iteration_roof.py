"""Each serving iteration against its speed of light, from the model's description (analysis/work/model_config.py).

An iteration over T tokens (P prefilling, D decoding requests) must at least move the weights it reads, the KV cache
its decoding requests attend over and the KV it writes, and do its FLOPs: its speed of light is the longer of
bytes / memory bandwidth and FLOPs / the peak of the weights' path. Its time is its GPU time on the clock that paces
it (analysis/steps/iterations.py). A batch-1 decode iteration reads every weight once: weight bytes over the HBM
bandwidth is its floor, and its time against that says how close the decode runs to its roof, whatever kernels
(graph replays, custom kernels) do the work. Pure: no torch.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.steps.iterations import Iterations
from perflab.analysis.work.ceilings import DeviceCeilings
from perflab.analysis.work.model_config import ModelConfig


def iteration_roofs(it: Iterations, model: ModelConfig, c: DeviceCeilings) -> dict | None:
    """Per iteration: bytes, FLOPs, speed of light, time and % of roof; per kind (decode, prefill or mixed) their
    medians; the whole: sum of speed of light over sum of time. None without the GPU's bandwidth."""
    if not c.known:
        return None
    peak, path = c.flops_roof(model.path)
    pf, dc = it.prefill_tokens.astype(np.float64), it.decode_tokens.astype(np.float64)
    reqs = np.where(it.decode_requests >= 0, it.decode_requests, it.decode_tokens).astype(np.float64)
    known = (pf >= 0) & (dc >= 0)
    tokens = np.where(known, pf + dc, 0.0)
    square = np.where(it.prefill_square >= 0, it.prefill_square, -1).astype(np.float64) \
        if it.prefill_square.size else np.full(len(it), -1.0)
    nbytes = np.array([model.weight_bytes_read(t) + model.kv_bytes_read(r) + model.kv_bytes_written(t)
                       for t, r in zip(tokens, reqs)])
    flops = np.array([model.flops(t, r, s if s >= 0 else None) for t, r, s in zip(tokens, reqs, square)])
    t_mem = nbytes / c.dram * 1e6
    t_math = flops / peak * 1e6 if peak else np.zeros(len(it))
    sol = np.maximum(t_mem, t_math)
    time = it.time_us
    ok = known & (tokens > 0) & (time > 0)
    pct = np.where(ok, 100.0 * sol / np.where(time > 0, time, 1.0), np.nan)
    kind = it.kinds
    rows = [{"i": int(i), "kind": str(kind[i]), "prefill_tokens": int(pf[i]), "decode_tokens": int(dc[i]),
             "time_ms": round(float(time[i]) / 1e3, 4), "sol_ms": round(float(sol[i]) / 1e3, 4),
             "bound": "memory" if t_mem[i] >= t_math[i] else "compute", "gb": round(float(nbytes[i]) / 1e9, 4),
             "tflop": round(float(flops[i]) / 1e12, 5), "pct_of_roof": round(float(pct[i]), 1)}
            for i in np.flatnonzero(ok).tolist()]
    by_kind = {}
    for k in ("decode", "mixed", "prefill"):
        sel = ok & (kind == k)
        if sel.any():
            by_kind[k] = {"iterations": int(sel.sum()), "time_ms_p50": round(float(np.median(time[sel])) / 1e3, 4),
                          "sol_ms_p50": round(float(np.median(sol[sel])) / 1e3, 4),
                          "pct_of_roof_p50": round(float(np.median(pct[sel])), 1),
                          "bound": "memory" if np.median(t_mem[sel]) >= np.median(t_math[sel]) else "compute"}
    total_time, total_sol = float(time[ok].sum()), float(sol[ok].sum())
    return {"model": model.to_dict(), "ceilings": {"dram_gbps": round(c.dram / 1e9, 1), "path": path,
                                                  "peak_tflops": round(peak / 1e12, 1) if peak else None,
                                                  "source": c.source},
            "priced_iterations": int(ok.sum()), "iterations": len(it),
            "priced_time_pct": round(100.0 * total_time / float(time[time > 0].sum()), 1) if (time > 0).any() else 0.0,
            "pct_of_roof": round(100.0 * total_sol / total_time, 1) if total_time > 0 else None,
            "sol_ms_total": round(total_sol / 1e3, 4), "time_ms_total": round(total_time / 1e3, 4),
            "by_kind": by_kind, "per_iteration": rows[:200]}
