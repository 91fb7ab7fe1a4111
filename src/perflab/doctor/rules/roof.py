"""Is the busy time well spent? Findings from the speed of light of the trace's ops (analysis/work/speed_of_light.py).

Each op's work (FLOPs, bytes, from its recorded shapes) against the GPU's ceilings gives the time it would take
at the roof. Where the GPU's time is far above that, the ops that lose the most are named with the id that
explains them, in this order (an op explained once is not counted again):
- `dequant-overhead`: narrow weights (fp8/int8/int4) widened in separate passes before their matmuls;
- `unfused-elementwise`: back-to-back memory-bound ops over one tensor (attention written out by hand included);
- `no-tensor-cores`: matmuls and convolutions on the FP32 SIMT path;
- `small-grid`: ops far below their roof whose kernels launch fewer blocks than the GPU has SMs;
- `below-roof`: the rest far below the roof, which the trace alone cannot explain (Nsight Compute can).
Gains come from the speed-of-light gap: today's time minus the time of the better version at ATTAINABLE of its roof,
as a share of the step; below-roof's ceiling has its ops at the GPU's peak (fix_bounds.ops_at_peak), and it states
no floor: the trace cannot say what holds the ops back, so not how much of the gap a fix closes.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.work.estimate import speedup_of_gain
from perflab.analysis.work.tensor_paths import tensor_paths
from perflab.doctor.context import Context
from perflab.doctor.tensor_core_fix import tensor_core_fix
from perflab.doctor.finding import Finding
from perflab.doctor.fix_bounds import dequant_range, fused_one_pass, ops_at_peak
from perflab.doctor.on_path import critical_saving
from perflab.doctor.registry import rule, significant as _finding
from perflab.trace.model import KERNEL

ATTAINABLE = 0.8        # a well-written kernel reaches about this share of its roof
REACH_SHARE = 0.05      # an op under this share of its path's compute-bound time sets no reachable roof
DATASHEET_FLOOR = 0.5   # a datasheet compute peak is taken as reachable to at least this share (reachable())
FAR_BELOW_PCT = 50.0    # an op under this share of its roof is far from its speed of light
TINY_SOL_US = 1.0       # a call whose work takes less than this at the roof costs a kernel's fixed time, not work


def ready(ctx: Context) -> bool:
    """The speed of light can be judged: shapes were recorded and the GPU's ceilings are known."""
    return ctx.op_work.shapes_recorded and ctx.ceilings.known and ctx.op_work.modelled_us > 0


def unjudged_why(ctx: Context) -> str:
    """Why the speed of light cannot be judged, naming what would let it be (ready(ctx) is False)."""
    work = ctx.op_work
    if work.kernel_us > 0 and (why := replay_why(ctx, work.kernel_us)):
        replayed = work.unmodelled["graph_replay"]["us"]
        return f"{100 * replayed / work.kernel_us:.0f}% of its GPU time is {why}"
    if not work.shapes_recorded:
        return "the trace has no op shapes (profile with record_shapes=True)"
    if not ctx.ceilings.known:
        return f"no ceilings are known for {ctx.ceilings.device or 'this GPU'} (run `perflab bench` on it)"
    return "no kernel could be tied to an op with shapes"


def replay_why(ctx: Context, of_us: float) -> str | None:
    """`replayed from CUDA graphs, unpriced: why, and how to record a trace that prices them` when unpriced replayed
    kernels hold at least half of `of_us`; None otherwise."""
    from perflab.analysis.steps.graph_capture import replay_note

    work = ctx.op_work
    replayed = work.unmodelled.get("graph_replay", {}).get("us", 0.0)
    if of_us <= 0 or replayed < 0.5 * of_us:
        return None
    note = replay_note(work.graph_replays) or "the trace ties them to no op"
    return f"replayed from CUDA graphs, unpriced: {note}"


def covers(ctx: Context) -> bool:
    """The work model prices most of the GPU's time: the name-based kernel rules (rules/trace_kernel.py) defer."""
    return ready(ctx) and ctx.op_work.modelled_us >= 0.5 * ctx.op_work.kernel_us


def _sol_us(ctx: Context, flops: float, nbytes: float, path: str) -> float:
    c = ctx.ceilings
    roof, _ = c.flops_roof(path) if path != "memory" else (None, path)
    return max(nbytes / c.dram if c.dram else 0.0, flops / roof if roof and flops else 0.0) * 1e6


def _op_line(ctx: Context, g, sol: dict | None = None) -> dict:
    t = g.time_us / ctx.n_steps
    row = {"op": g.name, "dims": g.dims[:120], "kernel": g.kernel[:100], "calls_per_step": g.calls / ctx.n_steps,
           "time_us_per_step": round(t, 2)}
    if sol is not None:
        row.update({"sol_us_per_step": round(sol["sol_us"], 2), "pct_of_roof": round(sol["pct_of_roof"] or 0, 1),
                    "bound": sol["bound"], "tflops": round(sol["tflops"] or 0, 2), "gbps": round(sol["gbps"] or 0, 1)})
        if g.grid > 0:
            row.update({"grid_blocks": g.grid, "block_threads": g.block})
    return row


def _sol_by_group(ctx: Context) -> dict[int, dict]:
    """Speed-of-light rows per op group index (the sol analysis lists them sorted by gap, with op and dims)."""
    by_key = {(r["op"], r["dims"], r["dtypes"], r["path"]): r for r in ctx.sol["ops"]}
    return {i: by_key.get((g.name, g.dims, g.dtypes, g.path)) for i, g in enumerate(ctx.op_work.groups)}


def _math_bound(ctx: Context, g) -> bool:
    """Its FLOPs on its own path outlast its bytes at the roofs: tensor cores can speed it up (not a GEMV's bytes)."""
    roof, dram = ctx.ceilings.flops_roof(g.path)[0], ctx.ceilings.dram
    return not (roof and dram) or g.flops / roof >= g.bytes / dram


def _kernel_rows(ctx: Context, idx) -> list[int]:
    return [r for i in idx for r in ctx.op_work.groups[i].rows]


def dequant(ctx: Context, used: set[int]) -> list[Finding]:
    groups = ctx.op_work.groups
    casts = [i for i, g in enumerate(groups) if g.cast_from_narrow]
    widths = {groups[i].weight_numel: groups[i].weight_itemsize for i in casts}
    mms = [i for i, g in enumerate(groups) if g.family == "matmul" and not g.weight_narrow and g.weight_numel in widths]
    if not casts or not mms:
        return []
    # the passes over the widened weight: scaling, and further casts (fp8 -> fp32 -> x scale -> bf16)
    scales = [i for i, g in enumerate(groups) if i not in casts and (
        (g.family == "elementwise" and g.largest_numel in widths) or (g.family == "cast" and g.weight_numel in widths))]
    ops = casts + scales + mms
    today = sum(groups[i].time_us for i in ops)
    fused = moved = weights = 0.0
    for i in mms:
        g = groups[i]
        narrow = widths[g.weight_numel]
        per_call = g.call_bytes - g.weight_numel * (g.weight_itemsize - narrow)
        fused += g.calls * _sol_us(ctx, g.flops / g.calls, per_call, g.path)
        moved += g.calls * g.weight_numel * g.weight_itemsize
        weights += g.calls * g.weight_numel
    moved += sum(groups[i].bytes for i in casts + scales)
    gap, on_path = critical_saving(ctx, _kernel_rows(ctx, ops), max(today - fused / ATTAINABLE, 0.0))
    used.update(ops)
    narrow_width = min(widths.values())
    return _finding(
        "dequant-overhead", ctx.share(max(gap, 0.0)),
        f"Every step {weights / ctx.n_steps / 1e6:,.0f} M weight elements stored at {narrow_width:g} byte(s) are widened "
        f"in separate passes before their matmuls: those ops move {moved / weights:.1f} bytes per weight element where "
        f"a matmul that reads the narrow weights moves {narrow_width:g}. They take {today / ctx.n_steps / 1e3:.2f} ms of "
        f"the {ctx.step_ms:.2f} ms step; fused, their speed of light is {fused / ctx.n_steps / 1e3:.3f} ms.",
        {"dequant_ops_per_step": sum(groups[i].calls for i in casts + scales) / ctx.n_steps,
         "matmuls_per_step": sum(groups[i].calls for i in mms) / ctx.n_steps,
         "bytes_per_weight_element_today": round(moved / weights, 2), "bytes_per_weight_element_fused": narrow_width,
         "time_ms_per_step": today / ctx.n_steps / 1e3, "fused_sol_ms_per_step": fused / ctx.n_steps / 1e3,
         "dequant_time_pct": ctx.share(sum(groups[i].time_us for i in casts + scales)),
         "ops": [_op_line(ctx, groups[i]) for i in (casts + scales + mms)[:6]], "ceilings": ctx.ceilings.source, **on_path,
         **dequant_range(ctx, groups, casts + scales, mms, widths, today, ctx.share(max(gap, 0.0)))},
        "Never materialize the wide weights: a matmul that loads the narrow weights and dequantizes in registers "
        "(torchao's int8/int4/fp8 weight-only configs with torch.compile, gemlite, Marlin/Machete, a Triton GEMV), "
        "or keep the weights in the compute dtype if memory allows.",
        [ctx.event(groups[i].first_kernel_row) for i in (casts + mms)[:5]],
    )


def chains(ctx: Context, used: set[int]) -> list[Finding]:
    found = [c for c in ctx.fusable if not set(c.calls) & used]
    if not found:
        return []
    today = fused = moved = fused_bytes = 0.0
    attention = [c for c in found if c.attention]
    for c in found:
        today += c.time_us
        fused += _sol_us(ctx, c.flops, c.fused_bytes, c.path)
        moved += c.bytes
        fused_bytes += c.fused_bytes
    # the point: one fused pass over the bytes at the attainable share of the roof; the floor: each chain as long as
    # its longest op today (a fused kernel over a tensor moves no more than the op reading and writing all of it)
    one_pass = sum(_sol_us(ctx, c.flops, fused_one_pass(c, ctx.op_work.groups), c.path) for c in found)
    rows, point = [r for c in found for r in c.rows], max(today - one_pass / ATTAINABLE, 0.0)
    removed = min(sum(max(c.time_us - float(ctx.trace.dur[c.rows].max()), 0.0) for c in found), point)
    floor = {"speedup_at_least": round(speedup_of_gain(ctx.share(critical_saving(ctx, rows, removed)[0])), 2)}
    gap, on_path = critical_saving(ctx, rows, point)
    for c in found:
        used.update(c.calls + c.matmul_calls)
    n = ctx.n_steps
    groups = ctx.op_work.groups
    longest = max(found, key=lambda c: c.time_us)
    what = (f"{len(attention) / n:.0f} attention(s) per step written out op by op (scores, scaling, masking, "
            f"softmax as separate kernels) make the [.., S, S] scores tensor ({attention[0].numel / 1e6:,.1f} M elements) "
            "go to memory and back between every op" if attention else
            f"{len(found) / n:.0f} chain(s) per step of memory-bound ops over one tensor "
            f"({longest.numel / 1e6:,.1f} M elements) re-read what the previous op wrote")
    fix = ("Use one fused attention: torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient "
           "kernels never write the scores), or torch.compile the block." if attention else
           "Fuse the chain into one kernel: torch.compile (or a custom Triton kernel), in-place ops where allowed, "
           "and keep intermediates out of memory.")
    return _finding(
        "unfused-elementwise", ctx.share(max(gap, 0.0)),
        f"{what}: these ops move {moved / n / 1e9:,.2f} GB per step where one fused kernel would move "
        f"{fused_bytes / n / 1e9:,.2f} GB; they take {today / n / 1e3:.2f} ms per step, fused their speed of light "
        f"is {fused / n / 1e3:.3f} ms.",
        {"chains_per_step": len(found) / n, "attention_written_out_per_step": len(attention) / n,
         "mean_chain_length": sum(len(c.calls) for c in found) / len(found),
         "bytes_per_step_gb": moved / n / 1e9, "fused_bytes_per_step_gb": fused_bytes / n / 1e9,
         "time_ms_per_step": today / n / 1e3, "fused_sol_ms_per_step": fused / n / 1e3,
         "longest_chain": [groups[g].name for g in longest.calls][:12], "ceilings": ctx.ceilings.source,
         "one_pass_sol_ms_per_step": one_pass / n / 1e3, **floor, **on_path},
        fix, [ctx.event(r) for r in longest.rows[:6]],
    )


def no_tensor_cores(ctx: Context, used: set[int]) -> list[Finding]:
    groups = ctx.op_work.groups
    sols = _sol_by_group(ctx)
    # matrix work: matmuls, convolutions and attention (two matmuls) in fp32 run on the SIMT units, whatever
    # roof their own path has: the roof they are judged against is the tensor cores'
    simt = [i for i, g in enumerate(groups) if i not in used and g.family in ("matmul", "conv", "attention")
            and g.path == "fp32" and _math_bound(ctx, g)]
    if not simt:
        return []
    paths = tensor_paths(ctx.trace)  # what the GPU in the trace has (a V100: fp16 only)
    target = next((p for p in paths if p in ctx.ceilings.compute), None)
    fix = tensor_core_fix(ctx.trace)
    if target is None or fix is None:
        return []   # a GPU with no tensor-core path
    today = sum(groups[i].time_us for i in simt)
    tc = sum(_sol_us(ctx, groups[i].flops, groups[i].bytes, target) for i in simt)
    best, tc_best = target, tc   # the fix's bf16 path (half the bytes, the bf16 roof) where the GPU has one
    if target == "tf32" and "bf16" in ctx.ceilings.compute and "bf16" in paths:
        best, tc_best = "bf16", sum(_sol_us(ctx, groups[i].flops, groups[i].bytes / 2, "bf16") for i in simt)
    floor = ({"speedup_at_least": round(speedup_of_gain(ctx.share(max(today - tc / ATTAINABLE, 0.0))), 2)}
             if best != target else {})
    gap, on_path = critical_saving(ctx, _kernel_rows(ctx, simt), max(today - tc_best / ATTAINABLE, 0.0))
    used.update(simt)
    flops = sum(groups[i].flops for i in simt)
    n = ctx.n_steps
    return _finding(
        "no-tensor-cores", ctx.share(gap),
        f"Matrix math runs on the FP32 SIMT path: {flops / n / 1e12:,.2f} TFLOP per step at "
        f"{flops / today * 1e-6:,.1f} TFLOP/s ({today / n / 1e3:.2f} ms); on the {target} tensor-core roof "
        f"({ctx.ceilings.compute[target] / 1e12:,.0f} TFLOP/s) its speed of light is {tc / n / 1e3:.3f} ms"
        + (f", in bf16 (the fix's other path) {tc_best / n / 1e3:.3f} ms." if best != target else "."),
        {"simt_gemm_time_pct": ctx.share(today), "tflops_achieved": flops / today * 1e-6,
         "tensor_roof_tflops": ctx.ceilings.compute[target] / 1e12, "tensor_path": target,
         "fix_path": best, "fix_sol_ms_per_step": tc_best / n / 1e3, **floor,
         "ops": [_op_line(ctx, groups[i], sols.get(i)) for i in simt[:5]], "ceilings": ctx.ceilings.source, **on_path},
        fix + ("; attention in fp32 has no tensor-core kernel: in bf16/fp16, scaled_dot_product_attention runs "
               "the flash or cuDNN kernels." if any(groups[i].family == "attention" for i in simt) else ""),
        [ctx.event(groups[i].first_kernel_row) for i in simt[:5]],
    )


def ncu_command(ctx: Context, g) -> str | None:
    """The `perflab ncu` call that profiles this op's longest kernel in a steady step; None for a copy."""
    trace = ctx.trace
    rows = np.asarray([r for r in g.rows if trace.kind[r] == KERNEL and trace.name_of(r) == g.kernel], dtype=np.int64)
    if not rows.size:
        return None   # memcpy / memset rows: Nsight Compute profiles kernels only
    return kernel_ncu_command(ctx, rows)


def kernel_ncu_command(ctx: Context, rows: np.ndarray) -> str:
    """The `perflab ncu` call that profiles one of these launches (one kernel's) in a steady step
    (analysis/ncu/ncu_plan.py: ncu's filter on the function name, the launches before it counted from the program's
    start)."""
    from perflab.analysis.ncu.ncu_plan import launch_plan, steady_launch

    return launch_plan(ctx.trace, steady_launch(ctx.trace, rows)).perflab_command(ctx.trace.meta.get("program"))


def reachable(ctx: Context) -> dict[str, float]:
    """Per compute roof that is a datasheet figure (no `perflab bench` measurement of it on this GPU): the share
    of that peak taken as reachable. A datasheet peak alone is no reachable roof (bf16 GEMMs at 45 % of MI300X's
    1,307 TFLOP/s were `below-roof`, high): the share is what the trace's own compute-bound ops on that path
    reach at best (ops holding at least REACH_SHARE of the path's time), at least DATASHEET_FLOOR (a kernel under
    half of a dense datasheet peak is far below what vendor libraries reach: perflab bench measured 68-77 % of
    the H100 SXM's bf16, fp8 and tf32 peaks, catalog/68-below-roof/artifacts/ceilings.json), at most ATTAINABLE."""
    sources = ctx.ceilings.sources
    by_path: dict[str, list[dict]] = {}
    for r in ctx.sol["ops"]:
        path = r.get("roof_path")
        if r.get("bound") == "compute" and r.get("pct_of_roof") and not sources.get(path, "").startswith("measured"):
            by_path.setdefault(path, []).append(r)
    out = {}
    for path, rows in by_path.items():
        total = sum(r["time_us"] for r in rows)
        best = max((r["pct_of_roof"] for r in rows if r["time_us"] >= REACH_SHARE * total), default=None)
        if best is not None:
            out[path] = min(ATTAINABLE, max(DATASHEET_FLOOR, best / 100))
    return out


def step_gap_us(ctx: Context) -> float:
    """GPU time per step above the reachable roofs (each op against ATTAINABLE of its roof, or for a datasheet
    compute roof the share of it that reachable() finds)."""
    reach = reachable(ctx)
    gap = 0.0
    for r in ctx.sol["ops"]:
        if r.get("sol_us") is None:
            continue
        frac = reach.get(r.get("roof_path"), ATTAINABLE) if r.get("bound") == "compute" else ATTAINABLE
        gap += max(0.0, r["time_us"] - r["sol_us"] / frac)
    return gap


def below_roof(ctx: Context, used: set[int]) -> list[Finding]:
    groups = ctx.op_work.groups
    sols = _sol_by_group(ctx)
    sms = ctx.ceilings.sms or _sms(ctx)
    reach = reachable(ctx)
    small, far = [], []
    for i, g in enumerate(groups):
        s = sols.get(i)
        if i in used or s is None or s.get("sol_us") is None or s.get("pct_of_roof") is None:
            continue
        frac = reach.get(s.get("roof_path"), ATTAINABLE) if s["bound"] == "compute" else ATTAINABLE
        if s["pct_of_roof"] >= FAR_BELOW_PCT * frac / ATTAINABLE or not (g.flops or g.bytes):
            continue  # at the (reachable) roof, or nothing to judge (a memset of unrecorded size)
        gap = s["time_us"] - s["sol_us"] / frac
        if gap <= 0:
            continue
        narrow = bool(sms) and 0 < g.grid < sms
        if s["sol_us"] * ctx.n_steps / max(g.calls, 1) < TINY_SOL_US and not narrow:
            continue  # too little work per call for Nsight Compute to find a limiter: fusion is the answer
        (small if narrow else far).append((gap, i, s))
    out: list[Finding] = []
    for fid, items in (("small-grid", small), ("below-roof", far)):
        if not items:
            continue
        items.sort(key=lambda x: -x[0])
        gap = sum(x[0] for x in items)
        top_gap, top, s = items[0]
        g = groups[top]
        lines = [_op_line(ctx, groups[i], s_) for _, i, s_ in items[:5]]
        cmd = ncu_command(ctx, g)
        where = (f"{g.name} {g.dims[:60]} runs at {s['pct_of_roof']:.0f}% of its {s['bound']} roof "
                 f"({_rate(s)}; {s['time_us']:.1f} µs per step where its work needs {s['sol_us']:.1f} µs)")
        if fid == "small-grid":
            summary = (f"{len(items)} op(s) run far below their roof with grids smaller than the GPU "
                       f"({sms} SMs): {where}, launching {g.grid} blocks of {g.block} threads: most SMs have nothing "
                       "to run.")
            fix = ("Give each launch more parallel work: batch the small ops together (larger batch, grouped GEMMs, "
                   "torch.compile to fuse them), split the work finer (more, smaller blocks; split-K), or run "
                   "independent ops side by side on streams." + (f" To confirm on the kernel: {cmd}" if cmd else ""))
        else:
            summary = (f"{len(items)} op(s) run far below their speed of light and the trace cannot say why: {where}.")
            fix = (f"Profile the kernel with Nsight Compute to see which unit holds it back: {cmd} "
                   "(then `perflab doctor` on the report)." if cmd else
                   "The op is a device copy, not a kernel, so Nsight Compute cannot profile it: check whether the "
                   "copy is needed at all.")
        basis = _roof_basis(ctx, s, reach)
        saved, on_path = critical_saving(ctx, _kernel_rows(ctx, [i for _, i, _ in items]), gap * ctx.n_steps)
        if basis:
            summary += f" Roof: {basis}."
        out += _finding(fid, ctx.share(saved), summary,
                        {"ops_far_below_roof": len(items), "gap_ms_per_step": gap / 1e3, "sms": sms, "ops": lines,
                         "ncu_command": cmd, "ceilings": ctx.ceilings.source, "roof_basis": basis, **on_path,
                         **ops_at_peak(ctx, [(groups[i], s_["time_us"]) for _, i, s_ in items])},
                        fix, [ctx.event(groups[i].first_kernel_row) for _, i, _ in items[:5]])
        used.update(i for _, i, _ in items)
    return out


def _roof_basis(ctx: Context, s: dict, reach: dict[str, float]) -> str | None:
    """How the gap of a compute-bound op was measured when its roof is a datasheet figure."""
    path = s.get("roof_path")
    if s.get("bound") != "compute" or path not in reach:
        return None
    return (f"no measured {path} ceiling on this GPU (perflab bench measures it), so the gap is against "
            f"{100 * reach[path]:.0f}% of the datasheet peak ({ctx.ceilings.compute.get(path, 0) / 1e12:,.0f} TFLOP/s), "
            f"what this trace's own {path} ops reach at best and at least half of it")


def _rate(s: dict) -> str:
    if s["bound"] == "compute":
        return f"{s['tflops']:,.1f} TFLOP/s"
    return f"{s['gbps']:,.0f} GB/s"


def _sms(ctx: Context) -> int | None:
    props = ctx.trace.meta.get("device_properties") or []
    counts = [p.get("numSms") for p in props if isinstance(p.get("numSms"), int)]
    return counts[0] if counts else None


@rule
def speed_of_light(ctx: Context) -> list[Finding]:
    if not ready(ctx):
        return []
    used: set[int] = set()
    out: list[Finding] = []
    for part in (dequant, chains, no_tensor_cores, below_roof):
        out += part(ctx, used)
    return out


def after_system_causes(findings: list[Finding], idle_pct: float) -> list[Finding]:
    """`below-roof` never ranks above a larger system cause. While the GPU waits `idle_pct` of the step (on the
    host, syncs, copies), faster kernels lengthen the wait before they shorten the step: where that wait, or a
    system finding's own gain, is at least the below-roof gain, the below-roof finding follows the system ones
    (its severity and gain unchanged, its evidence saying why it moved). Order otherwise as ranked."""
    system = [f for f in findings if f.level == "system" and f.severity != "info"]
    if not system:
        return findings
    larger = max(idle_pct, max(f.gain_pct for f in system))
    moved = [f for f in findings if f.id == "below-roof" and f.gain_pct <= larger
             and any(findings.index(s) > findings.index(f) for s in system)]
    if not moved:
        return findings
    rest = [f for f in findings if all(f is not m for m in moved)]
    last = max(i for i, f in enumerate(rest) if any(f is s for s in system))
    for f in moved:
        f.evidence["ranked_after_system_causes"] = (
            f"the GPU waits {idle_pct:.0f}% of the step and the system findings above hold up to {larger:.0f}%: "
            "faster kernels shorten the step only once the GPU no longer waits")
    return rest[:last + 1] + moved + rest[last + 1:]
