"""Speed of light: how long each op's work would take at the GPU's ceilings, against how long it took.

An op's speed-of-light time is max(FLOPs / compute roof of its path, bytes / DRAM bandwidth): the larger term
names what bounds it (compute or memory). `pct_of_roof` = speed-of-light time / actual time: 100 % is at the
roof. Summed per op family and per step. A step cannot beat its speed of light, so an op that appears to is
either served from cache (a memory-bound op whose bytes fit in L2, running faster than DRAM allows) or a sign
that the work model counted work the op does not do; both are capped at the actual time and listed, never
hidden. Pure: a function of the op work model and the ceilings.
"""
from __future__ import annotations

from collections import defaultdict

from perflab.analysis.work.ceilings import DeviceCeilings
from perflab.analysis.work.op_work import OpGroup, OpWork

OVER_ROOF = 1.05      # an op this much faster than its roof is over it (timer and clock noise below that)
MIN_L2_BYTES = 4e6    # every GPU of the last decade has at least this much L2 (T4, RTX 3070: 4 MB)
AT_ROOF_PCT = 80.0    # at or above this share of the roof an op runs at its speed of light


def _over_roof(g: OpGroup, c: DeviceCeilings, bound: str, roof_path: str) -> str:
    """Why an op ran faster than its roof: "cache" (memory-bound and its bytes fit in L2), "aliased" (it would
    not be over if its equal operands were one tensor, as in x * x), "measured" (above a measured ceiling but
    under the datasheet peak: the bench ran hotter or at a lower clock), "model" (above the datasheet peak too:
    the work model counts work the op does not do)."""
    if bound == "memory" and g.bytes / max(g.calls, 1) <= (c.l2_bytes or MIN_L2_BYTES):
        return "cache"
    if bound == "memory" and g.call_aliased_bytes is not None and c.dram and \
            g.call_aliased_bytes * g.calls / c.dram * 1e6 <= OVER_ROOF * g.time_us:
        return "aliased"
    peak = c.peak.get("dram" if bound == "memory" else roof_path)
    if peak:
        rate = (g.bytes if bound == "memory" else g.flops) / (g.time_us * 1e-6)
        if rate <= OVER_ROOF * peak:
            return "measured"
    return "model"


def op_sol(g: OpGroup, c: DeviceCeilings) -> dict:
    """One op group against the roofs: sol_us, bound, achieved rates, pct_of_roof, and `over_roof` when the
    group appears faster than its roof ("cache", "measured" or "model")."""
    t = g.time_us
    mem_us = g.bytes / c.dram * 1e6 if c.dram else None
    roof, roof_path = c.flops_roof(g.path) if g.path != "memory" else (None, "memory")
    cmp_us = g.flops / roof * 1e6 if roof and g.flops else 0.0
    out = {"tflops": g.flops / t * 1e-6 if t > 0 else None, "gbps": g.bytes / t * 1e-3 if t > 0 else None}
    if mem_us is None:
        return {**out, "sol_us": None, "bound": None, "pct_of_roof": None}
    sol = max(mem_us, cmp_us)
    bound = "compute" if cmp_us > mem_us else "memory"
    over = None
    if t > 0 and sol > OVER_ROOF * t:
        over = _over_roof(g, c, bound, roof_path)
        sol = t
    return {**out, "sol_us": sol, "bound": bound, "roof_path": roof_path if bound == "compute" else "dram",
            "pct_of_roof": 100.0 * sol / t if t > 0 else None, **({"over_roof": over} if over else {})}


def speed_of_light(work: OpWork, c: DeviceCeilings, *, steps: int = 1, step_us: float | None = None) -> dict:
    """Per op group, per family and per step. Times in the result are per step (µs, ms)."""
    steps = max(steps, 1)
    ops = []
    families: dict[str, dict] = defaultdict(lambda: {"time_us": 0.0, "sol_us": 0.0, "flops": 0.0, "bytes": 0.0,
                                                    "ops": 0, "kernels": 0})
    over: list[dict] = []
    for g in work.groups:
        s = op_sol(g, c)
        row = {**g.to_dict(), **{k: v for k, v in s.items()}}
        row["time_us"] = g.time_us / steps
        row["calls_per_step"] = g.calls / steps
        if s["sol_us"] is not None:
            row["sol_us"] = s["sol_us"] / steps
            row["gap_us"] = max(0.0, row["time_us"] - row["sol_us"])
        ops.append(row)
        fam = families[g.family]
        fam["time_us"] += g.time_us / steps
        fam["sol_us"] += (s["sol_us"] or 0.0) / steps
        fam["flops"] += g.flops / steps
        fam["bytes"] += g.bytes / steps
        fam["ops"] += g.calls / steps
        fam["kernels"] += g.kernels / steps
        if "over_roof" in s:
            over.append({"op": g.name, "dims": g.dims, "why": s["over_roof"], "time_us": g.time_us / steps,
                         "bytes": g.bytes / steps, "flops": g.flops / steps})
    for fam in families.values():
        t = fam["time_us"]
        fam["pct_of_roof"] = 100.0 * fam["sol_us"] / t if c.known and t > 0 else None
        fam["gap_us"] = max(0.0, t - fam["sol_us"]) if c.known else None
        fam["tflops"] = fam["flops"] / t * 1e-6 if t > 0 else None
        fam["gbps"] = fam["bytes"] / t * 1e-3 if t > 0 else None
    modelled = work.modelled_us / steps
    sol = sum(f["sol_us"] for f in families.values())
    step = {
        "flops": sum(f["flops"] for f in families.values()), "bytes": sum(f["bytes"] for f in families.values()),
        "modelled_gpu_us": modelled, "gpu_us": work.kernel_us / steps,
        "unmodelled_gpu_us": work.unmodelled_us / steps,
        "coverage_pct": 100.0 * work.modelled_us / work.kernel_us if work.kernel_us > 0 else 0.0,
        "sol_us": sol if c.known else None, "step_us": step_us,
        "pct_of_roof": 100.0 * sol / modelled if c.known and modelled > 0 else None,
    }
    ops.sort(key=lambda r: -(r.get("gap_us") if r.get("gap_us") is not None else r["time_us"]))
    return {
        "ceilings": c.to_dict(),
        "step": step,
        "families": dict(sorted(families.items(), key=lambda kv: -kv[1]["time_us"])),
        "ops": ops,
        "unmodelled": {k: {"us": v["us"] / steps, "kernels": v["kernels"] / steps,
                           "names": {n[:160]: us / steps for n, us in v["names"].items()}}
                       for k, v in work.unmodelled.items()},
        "over_roof": over,
        "shapes_recorded": work.shapes_recorded,
    }


def step_sentence(sol: dict) -> str:
    """'this step moves X GB and does Y TFLOP: at speed of light it takes A ms; it takes B ms'."""
    st = sol["step"]
    if st["sol_us"] is None:
        return (f"this step moves {st['bytes'] / 1e9:,.3f} GB and does {st['flops'] / 1e12:,.3f} TFLOP in its modelled "
                f"ops; no ceilings are known for {sol['ceilings']['device'] or 'this GPU'}, so no speed of light")
    cover = "" if st["coverage_pct"] >= 99.5 else f" (the {st['coverage_pct']:.0f}% of GPU time the model prices)"
    return (f"this step moves {st['bytes'] / 1e9:,.3f} GB and does {st['flops'] / 1e12:,.3f} TFLOP{cover}: at speed of "
            f"light that takes {st['sol_us'] / 1e3:,.3f} ms; its GPU time there is {st['modelled_gpu_us'] / 1e3:,.3f} ms"
            + (f" and the step takes {st['step_us'] / 1e3:,.3f} ms" if st.get("step_us") else ""))


def summarized(sol: dict, top: int = 25) -> dict:
    """The speed-of-light analysis as the doctor's JSON carries it: the step, the families, the `top` ops by gap."""
    keep = ("op", "dims", "dtypes", "family", "path", "calls_per_step", "time_us", "sol_us", "gap_us", "bound",
            "pct_of_roof", "tflops", "gbps", "flops", "bytes", "kernel", "grid", "block", "over_roof", "notes")
    return {"schema_note": "times per step in µs; pct_of_roof = speed-of-light time / actual time",
            "ceilings": sol["ceilings"], "step": sol["step"], "sentence": step_sentence(sol),
            "families": sol["families"], "ops": [{k: r[k] for k in keep if k in r} for r in sol["ops"][:top]],
            "unmodelled": sol["unmodelled"], "over_roof": sol["over_roof"], "shapes_recorded": sol["shapes_recorded"]}
