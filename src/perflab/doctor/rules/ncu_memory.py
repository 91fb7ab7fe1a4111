"""Kernel rules on where the bytes go (analysis/ncu/ncu_traffic.py): local memory (register-spill),
atomics piling onto few addresses (atomic-contention), data re-read from DRAM (l2-miss), reads from host
memory over PCIe (memory-bound on the link)."""
from __future__ import annotations

from perflab.analysis.ncu import ncu_traffic
from perflab.doctor.finding import Finding
from perflab.doctor.rules.ncu_context import AT_ROOF_PCT, KernelContext, kernel_rule, make, mb, sol_gap_pct
from perflab.doctor.rules.ncu_kernel import global_excess, is_matmul


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
    return make(ctx, "register-spill", lm.share_pct * ctx.busiest_pct / 100,
                {"local_l1_bytes": lm.l1_bytes, "local_l2_bytes": lm.l2_bytes,
                 "local_share_of_memory_instructions_pct": lm.instruction_share_pct,
                 "local_share_of_l1_sectors_pct": lm.l1_share_pct, "local_share_of_l2_sectors_pct": lm.l2_share_pct,
                 "local_memory_instructions": lm.instructions, "spill_instructions": lm.spill_instructions,
                 "registers_per_thread": ctx.k.registers, "busiest_unit_pct": ctx.busiest_pct,
                 "dram_write_bytes": ctx.traffic.dram_write_bytes},
                fix, f"{moved} from {what} ({', '.join(parts)})")


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
    where = (f"one L2 slice takes {a.hottest_slice_pct:.0f} % of the atomic sectors" if a.hottest_slice_pct is not None
             else f"the busiest L2 slice's atomic unit runs {hot:.0f} % (average slice {avg:.1f} %)" if hot is not None
             else f"warps wait on memory {waits:.0f} % of the time")
    return make(ctx, "atomic-contention", gain,
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
    """Data re-read from DRAM: DRAM bytes clearly above the compulsory bytes (analysis/ncu/ncu_traffic.py: the
    bytes written plus as many read, the report counting no distinct addresses), L2 hits proving that the
    kernel does re-read data, and more DRAM reads than L2 holds. A hit rate alone cannot tell re-reads
    that miss from a stream read once next to a small operand re-read from L2."""
    t = ctx.traffic
    hit = t.l2_read_hit_pct
    excess_sectors, _ = global_excess(ctx)
    if hit is None or not 10 <= hit < 60 or ctx.dram_pct < 30 or (excess_sectors or 0) >= 0.25:
        return None
    if is_matmul(ctx):
        # A tiled matmul re-reads every operand panel once per tile of the other dimension by design (a
        # GEMV: the activations, once per column block); its DRAM reads can be compulsory bytes only.
        return None
    rd, wr = t.dram_read_bytes, t.dram_write_bytes or 0.0
    if rd is None or t.compulsory_bytes is None or (t.l2_bytes and rd < t.l2_bytes):
        return None  # no estimate of the compulsory bytes, or all reads fit in L2 (misses are first touches)
    total = rd + wr
    if total < 1.25 * t.compulsory_bytes:
        return None
    excess = t.excess_bytes or 0.0
    return make(ctx, "l2-miss", 100 * excess / total * ctx.dram_pct / 100,
                {"dram_bytes": total, "compulsory_bytes_est": t.compulsory_bytes, "excess_dram_bytes": excess,
                 "l2_read_hit_pct": hit, "dram_read_bytes": rd, "dram_write_bytes": wr,
                 "written_bytes": t.written_bytes, "l2_read_request_bytes": t.l2_read_request_bytes,
                 "dram_throughput_pct": ctx.dram_pct, "l2_bytes": t.l2_bytes,
                 "compulsory_estimate": t.compulsory_basis},
                "Shorten reuse distance: process the data that is re-read together (tile / block the loop, "
                "raster the grid so neighbouring blocks share inputs), or pin the hot part in L2 with an "
                "access-policy window. (If the kernel reads several distinct inputs per output, the extra "
                "bytes are compulsory, not re-reads.)",
                f"DRAM moves {mb(total)}, {total / t.compulsory_bytes:.1f}x the ~{mb(t.compulsory_bytes)} "
                f"it must (as many bytes read as written: one input; more inputs raise it), and L2 hits only {hit:.0f} % of reads: data is "
                f"re-read from DRAM")


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
    return make(ctx, "memory-bound", min(link_pct, 100.0),
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
