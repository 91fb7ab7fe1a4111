"""Kernel rules on where the bytes go (analysis/ncu/ncu_traffic.py): local memory (register-spill),
atomics piling onto few addresses (atomic-contention), data re-read from DRAM (l2-miss; a matrix product's
inputs re-read for want of tiling), reads from host memory over PCIe (memory-bound on the link). What each fix
saves comes from the one model of the kernel's time (analysis/ncu/kernel_time.py)."""
from __future__ import annotations

from perflab.analysis.ncu import ncu_traffic
from perflab.analysis.ncu.kernel_time import Fix
from perflab.doctor.finding import Finding
from perflab.doctor.rules.ncu_context import AT_ROOF_PCT, KernelContext, kernel_rule, make, mb, sol_gap_pct
from perflab.doctor.rules.ncu_access import reuse, reuse_fix, reuse_text, scattered


@kernel_rule
def register_spill(ctx: KernelContext) -> Finding | None:
    """Local memory, from its instructions and from its traffic: a few lane-divergent local accesses can
    move gigabytes (32 sectors each), and a report without instruction statistics still counts sectors."""
    lm = ncu_traffic.local_memory(ctx.k)
    if not lm.present or lm.share_pct < 5:
        return None
    array = lm.spill_instructions == 0  # ncu tells spills apart: local memory that is not spilled registers
    what = "a run-time-indexed local array" if array else "spilled registers"
    moved = f"{mb(lm.l1_bytes)} of local-memory traffic" if lm.l1_bytes else f"{lm.instructions:,.0f} local instructions"
    parts = [f"{p:.0f} % of {name}" for p, name in ((lm.instruction_share_pct, "memory instructions"),
                                                     (lm.l1_share_pct, "L1 sectors"), (lm.l2_share_pct, "L2 sectors"))
             if p is not None]
    fix = ("Keep the array in registers (index it only with compile-time constants: unroll the loop) or move it "
           "to shared memory." if array else
           "Cut live registers: fewer accumulators per thread, no run-time indexing of local arrays, or relax the "
           "cap (__launch_bounds__ / -maxrregcount) so the compiler can keep them in registers.")
    l1, l2 = (lm.l1_share_pct or 0.0) / 100, (lm.l2_share_pct or 0.0) / 100
    inst = ctx.m("smsp__inst_executed.sum")
    issued = min(1.0, lm.instructions / inst) if lm.instructions and inst else 0.0
    change = Fix(kept={"L1/shared": 1 - l1, "L2": 1 - l2, "DRAM": 1 - l2,
                       "LSU pipe": 1 - (lm.instruction_share_pct or 0.0) / 100, "issue slots": 1 - issued},
                 symptom_share=lm.share_pct * ctx.busiest_pct / 1e4,
                 how="the local-memory traffic gone at L1, L2 and DRAM (its share of each), the rest of the work at "
                     "the practical pace")
    return make(ctx, "register-spill", change,
                {"local_l1_bytes": lm.l1_bytes, "local_l2_bytes": lm.l2_bytes,
                 "local_share_of_memory_instructions_pct": lm.instruction_share_pct,
                 "local_share_of_l1_sectors_pct": lm.l1_share_pct, "local_share_of_l2_sectors_pct": lm.l2_share_pct,
                 "local_memory_instructions": lm.instructions, "spill_instructions": lm.spill_instructions,
                 "registers_per_thread": ctx.k.registers, "busiest_unit_pct": ctx.busiest_pct,
                 "dram_write_bytes": ctx.traffic.dram_write_bytes},
                fix, f"{moved} from {what} ({', '.join(parts)})")


MATH_PIPES = ("FMA pipe", "FP64 pipe", "tensor pipe", "XU pipe")


@kernel_rule
def atomic_contention(ctx: KernelContext) -> Finding | None:
    """Atomics piling onto a few addresses: one L2 slice takes most of the atomic sectors (or its atomic
    unit, lts__d_atomic_input_cycles_active.max, is far above the average slice), and either that unit
    is saturated or nothing else in the kernel is busy while its warps wait on memory."""
    a = ncu_traffic.atomics(ctx.k)
    if not a.present or (a.share_pct is not None and a.share_pct < 10):
        return None
    busy = ctx.busiest_pct
    st = ctx.stalls
    waits = st.share("long_scoreboard", "lg_throttle", "membar", "drain") if st else None
    hot, avg = a.hot_unit_busy_pct, a.avg_unit_busy_pct
    saturated = hot is not None and hot >= 40 and a.concentrated
    # one address's read-modify-writes wait for each other: the hot unit can be far from saturated while
    # nothing else runs and the warps wait on their atomics
    starved = busy < 30 and (a.concentrated or (waits or 0) >= 50)
    if not (saturated or starved):
        return None
    gain = hot * (1 - (avg or 0) / hot) if saturated else sol_gap_pct(busy)
    l2_sectors = ctx.m("lts__t_sectors.sum")
    atomic_l2 = min(1.0, a.l2_sectors / l2_sectors) if a.l2_sectors and l2_sectors else 0.0
    l1 = {op: ctx.m(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum") for op in ("ld", "st", "atom", "red")}
    l1_all = sum(v or 0.0 for v in l1.values())
    atomic_l1 = ((l1["atom"] or 0.0) + (l1["red"] or 0.0)) / l1_all if l1_all else (a.share_pct or 0.0) / 100
    if not starved:
        change = Fix(kept={"L2": 1 - atomic_l2, "L1/shared": 1 - atomic_l1, "LSU pipe": 1 - (a.share_pct or 0.0) / 100},
                     symptom_share=gain / 100,
                     how="the updates privatized: their serialization and their L1 and L2 traffic gone, the rest of "
                         "the work at the practical pace")
    else:
        # every unit idles while the warps wait on the atomics: what they do issue (polls, retries, the serialized
        # read-modify-writes) is the contention itself. The work left is the kernel's DRAM bytes and its math.
        work = {u: 1.0 for u in ("DRAM", "memory", *MATH_PIPES) if u in {**ctx.units.memory, **ctx.units.compute}}
        change = Fix(kept=work, only=True, symptom_share=gain / 100,
                     how="the updates privatized: nothing waits on them; the kernel's DRAM bytes and its math at the "
                         "practical pace")
    where = (f"one L2 slice takes {a.hottest_slice_pct:.0f} % of the atomic sectors" if a.hottest_slice_pct is not None
             else f"the busiest L2 slice's atomic unit runs {hot:.0f} % (average slice {avg:.1f} %)" if hot is not None
             else f"warps wait on memory {waits:.0f} % of the time")
    return make(ctx, "atomic-contention", change,
                {"atomic_instructions": a.instructions, "atomic_share_of_global_instructions_pct": a.share_pct,
                 "hottest_l2_slice_share_of_atomics_pct": a.hottest_slice_pct, "l2_slices": a.slices,
                 "hottest_l2_slice_atomic_busy_pct": hot, "average_l2_slice_atomic_busy_pct": avg,
                 "l2_updates_per_request": a.updates_per_request, "memory_wait_stall_pct": waits,
                 "lg_throttle_stall_pct": st.share("lg_throttle") if st else None,
                 "membar_stall_pct": st.share("membar") if st else None,
                 "busiest_unit_pct": busy, **ctx.stall_evidence()},
                "Spread the updates: privatize per block in shared memory (or per warp with warp-aggregated "
                "atomics / a __reduce_add_sync) and merge once per block; widen the bins or hash the addresses.",
                f"atomics serialize on a few addresses: {where}, every unit under {max(busy, 1):.0f} %")


@kernel_rule
def l2_miss(ctx: KernelContext) -> Finding | None:
    """Data re-read from DRAM: DRAM bytes clearly above the compulsory bytes (ncu_kernel.reuse: every input read
    once, every output written once). Scattered accesses make it poor-locality (ncu_kernel.access_pattern, which
    counts the re-reads too); here the accesses are dense and the data simply comes back too late for L2. A
    matrix product re-reads its inputs once per tile of the other dimension: without tiling through shared
    memory, once per output; the fix is the tiling, and the kernel then runs at its FMA (or tensor) pipe."""
    r = reuse(ctx)
    if r is None or scattered(ctx):
        return None
    t = ctx.traffic
    total, comp, hit = r["dram_bytes"], r["compulsory_bytes"], t.l2_read_hit_pct
    change = reuse_fix(ctx, r)
    ev = {"dram_bytes": total, "compulsory_bytes_est": comp, "excess_dram_bytes": total - comp,
          "l2_read_hit_pct": hit, "dram_read_bytes": t.dram_read_bytes, "dram_write_bytes": t.dram_write_bytes,
          "written_bytes": t.written_bytes, "l2_read_request_bytes": t.l2_read_request_bytes,
          "dram_throughput_pct": ctx.dram_pct, "l2_bytes": t.l2_bytes, "compulsory_estimate": r["basis"],
          **(ctx.matrix.evidence() if r["matrix"] else {})}
    found = make(ctx, "l2-miss", change, ev, reuse_text(r["matrix"]),
                 f"DRAM moves {mb(total)}, {total / comp:.1f}x the ~{mb(comp)} it must"
                 + (" (every input read once, every output written once)" if r["matrix"] else
                    " (as many bytes read as written: one input; more inputs raise it)")
                 + (f", and L2 hits only {hit:.0f} % of reads" if hit is not None else "")
                 + (": the matrix inputs are re-read from DRAM for want of tiling" if r["matrix"] else
                    ": data is re-read from DRAM"))
    return found if found.evidence["kernel_gain_pct"] >= 3 else None


SYSMEM_READ = ("lts__t_sectors_srcunit_tex_aperture_sysmem_op_read.sum",
               "lts__t_sectors_srcunit_tex_aperture_sysmem_op_read_lookup_miss.sum")
ALL_READ = "lts__t_sectors_srcunit_tex_op_read.sum"
HOST_SHARE_PCT = 50.0   # host memory gives at least half of the kernel's reads
LINK_SHARE_PCT = 50.0   # and moving those bytes at the link's ceiling takes at least half of its time


def pcie_link_bytes_per_s(ctx: KernelContext) -> float | None:
    """The GPU's PCIe link per direction: rate (MT/s per lane) x lanes / 8, less the line encoding
    (128b/130b from Gen3 on, 8b/10b before). What ncu reports of the link the GPU trained to."""
    rate = ctx.m("device__attribute_gpu_pci_ext_gpu_link_rate")
    lanes = ctx.m("device__attribute_gpu_pci_ext_gpu_link_width")
    if not rate or not lanes:
        return None
    return rate * 1e6 * lanes / 8 * (128 / 130 if rate >= 8000 else 0.8)


@kernel_rule
def host_memory_reads(ctx: KernelContext) -> Finding | None:
    """Loads served from host (system) memory: mapped pinned memory, UVA pointers to pinned tensors,
    host-resident managed memory. Each byte crosses PCIe, some 50x slower than HBM; when the link's time
    for those bytes is most of the kernel's, the link is its limit (the warps only see long loads)."""
    sectors, dur = ctx.m(*SYSMEM_READ), ctx.k.duration_s
    if not sectors or not dur:
        return None
    host = 32.0 * sectors
    total = ctx.m(ALL_READ)
    share = 100 * sectors / total if total else None
    link = pcie_link_bytes_per_s(ctx)
    link_pct = 100 * host / link / dur if link else None
    if share is None or share < HOST_SHARE_PCT or link_pct is None or link_pct < LINK_SHARE_PCT:
        return None
    measured = ctx.m("pcie__read_bytes.sum.per_second")
    unit = "PCIe (host memory)"
    at_roof = {"limiting_unit": unit, "limiting_unit_pct": link_pct} if link_pct >= AT_ROOF_PCT else {}
    dram_peak = ctx.roofs.get("dram")
    # L2 serves the host reads through its system-memory path; from device memory it carries the same bytes at
    # least as fast as DRAM delivers them
    from_dram = host / dram_peak * 1e6 if dram_peak else 0.0
    change = Fix(also_busy_us={unit: host / link * 1e6}, kept={unit: 0.0, "L2": 1 - share / 100},
                 added_us={"DRAM": from_dram, "L2": from_dram} if dram_peak else {},
                 symptom_share=min(link_pct, 100.0) / 100,
                 how="the host bytes read from device memory instead (the one copy over the link that puts them "
                     "there is not in this kernel: it pays where the data is read more than once)")
    return make(ctx, "memory-bound", change,
                {**at_roof, "memory_unit": unit, "memory_throughput_pct": link_pct, "host_read_bytes": host,
                 "host_share_of_reads_pct": share, "host_read_gbps": host / dur / 1e9, "pcie_link_gbps": link / 1e9,
                 "pcie_read_gbps_measured": measured / 1e9 if measured is not None else None,
                 "kernel_duration_us": dur * 1e6, "dram_throughput_pct": ctx.dram_pct, **ctx.stall_evidence()},
                "Keep data that is read more than once (by this kernel or by later ones) in device memory: copy it "
                "once (cudaMemcpyAsync from pinned memory, overlapped with other work on another stream where it "
                "can be) and read it there; every pass over host memory costs PCIe time (tens of GB/s against TB/s "
                "from HBM). Zero-copy pays only for data read once: a copy moves the same bytes over the same link.",
                f"{mb(host)} of its reads ({share:.0f} %) come from host memory over PCIe at {host / dur / 1e9:.0f} "
                f"GB/s, {link_pct:.0f} % of the link's {link / 1e9:.0f} GB/s: the link, not DRAM "
                f"({ctx.dram_pct:.0f} %), sets its {dur * 1e6:,.0f} us")
