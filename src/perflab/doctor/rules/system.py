"""System-level rules: is the GPU kept busy, and if not, what holds it back.

Every gain is the share of the analysed step time the fix could give back, estimated from the
evidence: idle time attributed to the cause (analysis.idle.gaps), or copy/communication time that
compute does not hide. Copy time that overlapping could hide belongs to no-overlap; h2d-copy /
d2h-copy keep what would remain. Rules that name a specific cause come before the generic ones they
refine (pageable-memcpy before no-overlap and h2d-copy before memcpy), so equal gains keep that
order (rank is a stable sort).
"""
from __future__ import annotations

import numpy as np

from perflab.doctor.context import Context
from perflab.doctor.rules.cuda_fixes import fix as fix_for
from perflab.doctor.finding import Finding
from perflab.doctor.fix_bounds import host_time_removed, per_item_batched, per_item_packed, step_us, wait_removed
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding
from perflab.doctor.rules.evidence import idle_evidence as _idle_evidence





def _rate(count: float, steps: int) -> str:
    """'3x per step', or '1x in 10 steps' when it happens less than once per step."""
    if steps <= 0:
        return f"{count:.0f}x"
    per_step = count / steps
    if per_step >= 0.95 or count == 0:
        return f"{per_step:.0f}x per step"
    return f"{count:.0f}x in {steps} steps"


@rule
def host_sync(ctx: Context) -> list[Finding]:
    """The floor: the host no longer blocks in the syncs (their wait leaves its timeline) and the GPU no longer idles
    after them (the gain), fix_bounds.host_time_removed. No ceiling: a read kept on the device can take with it the
    GPU work that only computed the value read (a check per layer made once per step), and without tensor
    identities the trace cannot tell that work from the step's own, so neither the GPU's busy time nor its launch
    calls bound what remains."""
    gain = ctx.gaps.pct("sync")
    sync = ctx.gaps.sync
    if not sync.get("draining_syncs"):
        return []
    names = ctx.syncs["names"]
    what = ", ".join(f"{n} {_rate(c, len(ctx.windows.steps))}" for n, c in list(names.items())[:3])
    total = ctx.syncs["per_step"] * ctx.n_steps
    return _finding(
        "host-sync", gain,
        f"The host blocks on the GPU {_rate(total, len(ctx.windows.steps))} ({what}); each time the GPU "
        f"queue drains and the GPU waits for the host to restart it: ~{gain:.0f}% of step time.",
        {**_idle_evidence(ctx), "syncs_per_step": ctx.syncs["per_step"], "sync_wait_pct": ctx.syncs["wait_pct"],
         "draining_syncs": sync["draining_syncs"], "gpu_idle_after_syncs_pct": ctx.share(sync["bubble_us"]),
         "sync_names": names, **host_time_removed(ctx, gain, ctx.syncs["wait_pct"] / 100.0 * step_us(ctx))},
        fix_for(ctx, "host-sync",
            "Keep values on the GPU instead of reading them on the host (.item(), .cpu(), .tolist(), printing, "
            "Python `if` on a GPU tensor); batch the reads (one .cpu() per N steps) or move them after the loop; "
            "use non_blocking copies into pinned memory with an event when the host really needs the value."),
        ctx.gaps.examples.get("sync", []),
    )


@rule
def launch_overhead(ctx: Context) -> list[Finding]:
    gain = ctx.gaps.pct("launch")
    launches = ctx.launches
    return _finding(
        "launch-overhead", gain,
        f"{launches['kernels_per_step']:.0f} kernels per step, half of them shorter than "
        f"{launches['kernel_us']['p50']:.1f} µs (mean {launches['kernel_us']['mean']:.1f} µs): "
        f"the CPU cannot launch them as fast as the GPU runs them; short gaps between kernels leave the GPU "
        f"idle ~{gain:.0f}% of step time.",
        {**_idle_evidence(ctx), "kernels_per_step": launches["kernels_per_step"],
         "mean_kernel_us": launches["kernel_us"]["mean"], "median_kernel_us": launches["kernel_us"]["p50"],
         "launch_gaps": ctx.gaps.gap_count["launch"], "launch_gap_idle_pct": gain,
         "cpu_launch_us_per_gpu_us": launches["cpu_launch_over_gpu"],
         "launch_delay_p50_us": launches["launch_delay_us"]["p50"],
         **wait_removed(ctx, gain, shrinks_work=True), **(per_item_batched(ctx, gain) or per_item_packed(ctx, gain))},
        fix_for(ctx, "launch-overhead",
            "Launch fewer, larger kernels: capture the step in a CUDA graph (torch.cuda.graphs / "
            "torch.compile(mode='reduce-overhead')), fuse small ops (torch.compile), batch more work per step; "
            "for one small kernel per work item (request, segment, layer), one persistent kernel (a grid of a few "
            "blocks per SM looping over the items) replaces the loop of launches."),
        ctx.gaps.examples.get("launch", []),
    )


@rule
def host_compute(ctx: Context) -> list[Finding]:
    from perflab.analysis.idle.host import first_call_outlier, stray_call_outlier
    from perflab.analysis.steps.shape_warmup import new_shape_costs, words

    gain = ctx.gaps.pct("host")
    ops = ctx.gaps.examples.get("host_ops", [])
    top, warmup, stray, fix_first, once, per_shape = "", None, None, "", False, None
    nsys = ctx.trace.meta.get("source") == "nsys"
    if not ops:
        top = ("; no recorded range or call holds it: it is host code between CUDA calls (NVTX ranges, or nsys's "
               "CPU sampling with --sample=process-tree, name it)" if nsys else
               "; no recorded op holds it: it is Python code between ops (with_stack=True or a sampler such as "
               "py-spy names the functions)")
    else:
        o = ops[0]
        share = min(100.0, 100.0 * o["overlap_us"] / max(ctx.gaps.by_cause.get("host", 0.0), 1e-9))
        if share >= 10:
            where = "the host is mostly inside" if share >= 50 else "the largest share of it is inside"
            top = (f"; {where} {o['name']} ({share:.0f}% of that idle time; its longest call "
                   f"takes {o['dur_us'] / 1e3:.2f} ms of CPU)")
        elif nsys:  # no range or call holds it: host code between CUDA calls, which the export cannot name
            top = (f"; no recorded range or call holds it (the top one, {o['name']}, {share:.0f}%): it is host code "
                   "between CUDA calls (NVTX ranges, or nsys's CPU sampling with --sample=process-tree, name it)")
        else:  # no op holds the idle time: it is Python between the ops, which the op list cannot name
            top = (f"; no recorded op holds it (the top one, {o['name']}, {share:.0f}%): it is Python code between "
                   "ops (with_stack=True or a sampler such as py-spy names the functions)")
        once = _runs_once(ctx, o["name"])
        per_shape = new_shape_costs(ctx.trace, o["name"], ctx.windows)
        warmup = None if per_shape else first_call_outlier(ctx.trace, o["name"])
        stray = None if warmup else stray_call_outlier(ctx.trace, o["name"])
        if o["name"].startswith("Torch-Compiled Region"):
            fix_first = ("The host time is a torch.compile'd region's own overhead (guards, its Python wrapper, one "
                         "launch per kernel): compile with mode=\"reduce-overhead\" (CUDA graphs) or give each call "
                         "more work (a larger batch). ")
    if warmup:
        top += (f". Its first call takes {warmup['first_ms']:,.0f} ms, the median of the other {warmup['calls'] - 1} "
                f"is {warmup['median_ms']:.2f} ms: warm-up (lazy initialization, autotuning, compilation) is inside the "
                "profiled window")
        fix_first += ("First profile the steady state: run a few steps before profiling, or use "
                      "torch.profiler.schedule(wait=1, warmup=2, active=3) with prof.step(); then read the trace again. ")
    if per_shape:
        top += ". " + words(per_shape)
        fix_first += ("This is a one-time cost per new shape, not steady-state work: keep shapes static (a static KV cache, "
                      "inputs padded to a few bucket sizes), warm every shape up before the measured or served run, or "
                      "pick a backend that builds no per-shape plan; then profile the steady state. ")
    if once and not warmup and not per_shape:
        top += ". It runs once in the analysed window"
        fix_first += (f"{ops[0]['name']} runs once here: if it is one-time set-up (JIT compilation, module loading, "
                      "allocation, initialization), profile the steady state instead: run a few iterations first, "
                      + ("then capture only the iterations (cudaProfilerStart/Stop around them and `nsys profile "
                         "--capture-range=cudaProfilerApi`, or --capture-range=nvtx). " if nsys else
                         "then profile with torch.profiler.schedule(wait=1, warmup=2, active=3) and prof.step(). "))
    if stray and not per_shape:
        top += (f". One of its {stray['calls']} calls takes {stray['longest_ms']:.2f} ms, the median of the others "
                f"{stray['median_ms']:.3f} ms: a thread descheduled on a busy host looks like this")
        fix_first += ("First profile again (more steps, a quieter machine): if that one stalled call goes, so does "
                      "most of this finding. ")
    return _finding(
        "host-compute", gain,
        f"CPU work keeps the GPU waiting ~{gain:.0f}% of step time{top}.",
        {**_idle_evidence(ctx), **wait_removed(ctx, gain, gaps_us=ctx.gaps.whole_gap.get("host", 0.0) / ctx.n_steps),
         "host_gap_idle_pct": gain, "host_gaps": ctx.gaps.gap_count["host"],
         "top_host_ops": [o["name"] for o in ops[:5]], **({"warmup_in_window": warmup} if warmup else {}),
         **({"top_op_calls_in_window": 1} if once else {}),
         **({"one_time_per_shape": per_shape} if per_shape else {}),
         **({"stray_call": stray} if stray else {})},
        fix_first + "Move the CPU work off the critical path: precompute it, vectorize it or run it on the GPU, or "
        "overlap it with GPU work (prepare step N+1 while step N runs; a background thread or worker). "
        "When the time is inside one framework op (a library building a plan or loading kernels for every "
        "new shape), keep shapes static (pad to fixed sizes, a static KV cache) or pick another backend.",
        ops + ctx.gaps.examples.get("host", []),
    )


def _runs_once(ctx: Context, name: str) -> bool:
    """The op holding the idle time is called once in a window without steps (a capture of one run)."""
    if ctx.windows.kind in ("steps", "step") or name not in ctx.trace.names:
        return False
    t = ctx.trace
    rows = np.flatnonzero(t.name == t.names.index(name))
    return int(np.count_nonzero(ctx.windows.contains(t.ts[rows]))) == 1


@rule
def input_pipeline(ctx: Context) -> list[Finding]:
    """The ceiling: with the batches ready, the step is no shorter than the GPU's work or the host's launch calls
    (fix_bounds.wait_removed). No floor: parallel loading moves the loader's work to workers, and how fast they
    produce batches (the host's cores, the transforms) is not in the trace of the process that waits for them."""
    gain = ctx.gaps.pct("input")
    return _finding(
        "input-pipeline", gain,
        f"The GPU waits for the DataLoader ~{gain:.0f}% of step time.",
        {**_idle_evidence(ctx), "dataloader_idle_pct": gain, "dataloader_gaps": ctx.gaps.gap_count["input"],
         **wait_removed(ctx, gain)},
        "Load data in parallel and ahead of time: DataLoader(num_workers>0, pin_memory=True, "
        "persistent_workers=True, prefetch_factor), lighter per-sample transforms, or preprocessed data.",
        ctx.gaps.examples.get("input", []),
    )


from perflab.doctor.rules import copies  # noqa: E402,F401  (the copy rules register here, in order)


@rule
def gpu_idle(ctx: Context) -> list[Finding]:
    wait, other = ctx.gaps.pct("wait"), ctx.gaps.pct("other")
    gain = wait + other
    evidence = {**_idle_evidence(ctx), "unexplained_idle_pct": other, "host_wait_idle_pct": wait,
                "queued_gap_pct": ctx.gaps.pct("queued"),
                "idle_by_cause_pct": {c: round(ctx.gaps.pct(c), 2) for c in ctx.gaps.by_cause}}
    if (behind := ctx.gaps.behind).get("us", 0.0) > 0:
        evidence.update({"queued_ahead_idle_pct": round(ctx.share(behind["us"]), 2),
                         "queued_ahead_lead_ms": round(behind["lead_ms"], 2)})
    if wait > other:  # the host thread sat in a wait (a queue, a poll for requests): no host cause to fix here
        from perflab.analysis.idle.waits import thread_waits

        names = [w["name"] for w in thread_waits(ctx.trace, ctx.windows)["top_waits"][:2]]
        evidence["host_waits"] = names
        return _finding(
            "gpu-idle", gain,
            f"The GPU is idle {100 - ctx.gpu_busy_pct:.0f}% of step time; ~{wait:.0f}% of step time its host thread "
            f"was blocked waiting ({', '.join(names)}), not computing: work arrives slower than the GPU runs it.",
            evidence,
            "Find what the host waits for: requests (a serving process under light load: more concurrent requests or "
            "larger batches fill the GPU), a producer thread or process (make it faster or start it earlier), another "
            "rank; the GPU is not the bottleneck while it waits.",
            ctx.gaps.examples.get("wait", []) + ctx.gaps.examples.get("other", []),
        )
    ahead = ""
    if ctx.share(behind.get("us", 0.0)) >= 0.5 * other > 0:
        ahead = (f" ~{ctx.share(behind['us']):.0f}% of step time the GPU sat idle after the host had launched the "
                 f"next work (a median {behind['lead_ms']:,.1f} ms before it ran): the host was ahead, not the cause; "
                 "the GPU ran work the trace does not hold (launched before profiling began, another process) or "
                 "waited on another stream or event.")
    return _finding(
        "gpu-idle", gain,
        f"The GPU is idle {100 - ctx.gpu_busy_pct:.0f}% of step time; ~{other:.0f}% of step time is idle with no "
        "host cause in the trace (waits on other streams, events or ranks, or torch.profiler's own bookkeeping)."
        + ahead,
        evidence,
        "Look at what the queued work waits for: cross-stream events, collectives on other ranks, "
        "allocator or synchronization points; then remove the dependency or overlap it.",
        ctx.gaps.examples.get("other", []) + ctx.gaps.examples.get("wait", []),
    )


def healthy(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """The single 'nothing to fix' finding: no rule found anything above low, and the busy time runs near its
    roof. Where the work model prices under half of the GPU time, a `below-roof` note that says so takes its
    place (rules/unjudged.py). Where the op work model prices the GPU time (shapes recorded, a known GPU) a step whose GPU time is
    far above its speed of light is not healthy even when every gap is small on its own; where it cannot, the
    finding says so and how to record a trace that can."""
    from perflab.doctor.rules.roof import ready, step_gap_us, unjudged_why

    if any(f.severity in ("high", "medium") for f in findings):
        return []
    from perflab.doctor.rules.unjudged import unjudged

    note = unjudged(ctx)
    if note is not None:
        return [note]   # not judged is not healthy: most of the GPU time has no price
    by_type = ctx.kernels["by_type"]
    top_type = max(by_type, key=lambda t: by_type[t]["total_us"]) if by_type else "none"
    evidence = {"gpu_busy_pct": round(ctx.gpu_busy_pct, 2), "dominant_kernel_type": top_type,
                "dominant_kernel_type_pct": round(by_type.get(top_type, {}).get("pct", 0.0), 2)}
    fix = ("Nothing at the system level: to go faster, make the dominant kernels themselves faster "
           "(Nsight Compute on the top kernels, lower precision, better algorithms).")
    summary = f"The GPU is busy {ctx.gpu_busy_pct:.0f}% of step time, mostly in {top_type} kernels: no system-level bottleneck."
    from perflab.doctor.rules.unjudged import model_priced

    roof = model_priced(ctx)
    if roof is not None and not ready(ctx):
        evidence.update({"pct_of_roof": roof["pct_of_roof"], "sol_ms": roof["sol_ms_total"],
                         "iterations_ms": roof["time_ms_total"], "model": roof["model"]["name"],
                         "ceilings": roof["ceilings"]["source"]})
        summary += (f" Its iterations run at {roof['pct_of_roof']:.0f}% of their speed of light from the model "
                    f"({roof['model']['name']}).")
    elif ready(ctx):
        st = ctx.sol["step"]
        gap = step_gap_us(ctx)   # against the reachable roofs, not a datasheet peak alone
        evidence.update({"sol_ms_per_step": round(st["sol_us"] / 1e3, 4),
                         "modelled_gpu_ms_per_step": round(st["modelled_gpu_us"] / 1e3, 4),
                         "pct_of_roof": round(st["pct_of_roof"] or 0.0, 1), "modelled_gpu_pct": round(st["coverage_pct"], 1),
                         "ceilings": ctx.ceilings.source})
        if ctx.step_pct(gap) >= 25.0:
            return []   # far from the roof in many small pieces: the low findings speak, not `healthy`
        summary += f" Its ops run at {st['pct_of_roof']:.0f}% of their speed of light ({_sol_words(ctx)})."
    else:
        why = unjudged_why(ctx)
        evidence["speed_of_light"] = f"not judged: {why}"
        summary += f" How close its kernels run to their roofs is not judged: {why}."
    roof = _gemm_roof(ctx) if top_type == "gemm" else None
    if roof and roof["tflops"] is not None:
        evidence.update({f"gemm_{k}": v for k, v in roof.items()})
        pct = roof["pct_of_ceiling"]
        if pct is not None:
            where = (f"at or above the {roof['ceiling_tflops']:,.0f} TFLOP/s measured on this GPU ({pct:.0f}%)"
                     if pct >= 100 else f"{pct:.0f}% of the {roof['ceiling_tflops']:,.0f} TFLOP/s measured on this GPU")
            summary += f" Its {roof['path']} GEMMs run at {roof['tflops']:,.0f} TFLOP/s, {where}"
            if pct >= 80:
                summary += ": at the speed of light."
            else:
                summary += "."
                fix = (f"Nothing at the system level, but the GEMMs reach only {pct:.0f}% of the "
                       "measured matmul ceiling: check their shapes (multiples of 64/128, tile quantization), "
                       "layouts and precision, and profile the top GEMMs with Nsight Compute.")
        else:
            summary += f" Its {roof['path']} GEMMs run at {roof['tflops']:,.0f} TFLOP/s ({roof['ceiling_note']})."
    return [Finding(id="healthy", severity="info", gain_pct=0.0, evidence=evidence, fix=fix, summary=summary)]


def _sol_words(ctx: Context) -> str:
    from perflab.analysis.work.speed_of_light import step_sentence

    return step_sentence(ctx.sol)


def _gemm_roof(ctx: Context) -> dict | None:
    """GEMM TFLOP/s against the ceilings saved beside the trace (a recording's folder, such as a puzzle's
    artifacts/ceilings.json), else the ones `perflab bench` saved on this machine."""
    from perflab.analysis.work.gemm_roof import gemm_vs_ceiling
    from perflab.analysis.work.saved_ceilings import measured_beside

    return gemm_vs_ceiling(ctx.trace, ctx.windows, measured_beside(ctx.trace.meta.get("path")))
