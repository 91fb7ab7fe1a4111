"""Where one kernel's bytes go, from Nsight Compute counters: DRAM against the compulsory bytes, local
memory, and atomics. Pure functions over a `KernelProfile`; a value the report lacks is None.

Compulsory bytes. A kernel must move at least its distinct data through DRAM once: the bytes it writes
plus the distinct bytes it reads, from every input. The report counts the bytes written (L2 write sectors
from the SMs) but no distinct addresses. What its counters do say: a byte L2 served as a hit was asked for
before; with (almost) no read hits nothing was asked for twice, so every byte read from DRAM is a first
touch and the DRAM reads are compulsory, however many inputs there are (`a + b` reads two). Only where
the hits show reuse are the distinct reads estimated, as one byte read per byte written (an elementwise,
stencil or scan kernel over one input): the least a kernel that writes its output can read, so the excess
is an upper bound. That estimate means nothing for a kernel that writes far less than it reads (a
reduction, a GEMV): there `compulsory_bytes` is None and no re-read is claimed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from perflab.trace.nsight_compute.ncu_model import KernelProfile

SECTOR = 32
ANCHOR_MIN = 0.1   # written / DRAM-read bytes below this: the one-read-per-write estimate does not apply
REUSE_HIT_PCT = 10.0   # L2 read hits under this show no reuse: every DRAM read is a first touch


def _sum(k: KernelProfile, *names: str) -> float | None:
    vals = [k.get(n) for n in names]
    return sum(v for v in vals if v is not None) if any(v is not None for v in vals) else None


def _times(v: float | None, f: float) -> float | None:
    return None if v is None else v * f


@dataclass
class DramTraffic:
    dram_read_bytes: float | None
    dram_write_bytes: float | None
    l2_read_request_bytes: float | None     # what the SMs asked L2 to read (sectors x 32)
    written_bytes: float | None             # what the SMs wrote through L2 (else DRAM writes)
    l2_read_hit_pct: float | None           # reads only: a write counts as a hit in lts__t_sector_hit_rate
    l2_bytes: float | None                  # L2 capacity
    compulsory_bytes: float | None          # estimate (module docstring); None where it cannot be made
    excess_bytes: float | None              # DRAM bytes beyond the compulsory estimate
    compulsory_basis: str = ""              # how the estimate was made

    def to_dict(self) -> dict:
        return asdict(self)


def read_hit_pct(k: KernelProfile) -> float | None:
    """L2 hit rate of reads only (lts__t_sector_op_read_hit_rate, or its two sector counts)."""
    v = k.get("lts__t_sector_op_read_hit_rate.pct")
    if v is not None:
        return v
    req, hit = k.get("lts__t_sectors_srcunit_tex_op_read.sum"), k.get("lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum")
    return 100 * hit / req if req and hit is not None else None


def dram_traffic(k: KernelProfile) -> DramTraffic:
    rd, wr = k.get("dram__bytes_read.sum"), k.get("dram__bytes_write.sum")
    written = _times(k.get("lts__t_sectors_srcunit_tex_op_write.sum"), SECTOR)
    if written is None:
        written = wr
    compulsory = excess = None
    basis = ""
    hit = read_hit_pct(k)
    if rd is not None and written and hit is not None and hit < REUSE_HIT_PCT:
        compulsory, basis = written + rd, "bytes written + DRAM reads (no L2 read hits: every read is a first touch)"
    elif rd is not None and written and written >= ANCHOR_MIN * rd:
        compulsory, basis = 2 * written, ("bytes written + as many read (L2 read hits show reuse; the report counts "
                                          "no distinct addresses: the least one input the size of the output needs)")
    if compulsory is not None:
        excess = max(0.0, rd + (wr or 0.0) - compulsory)
    return DramTraffic(dram_read_bytes=rd, dram_write_bytes=wr,
                       l2_read_request_bytes=_times(k.get("lts__t_sectors_srcunit_tex_op_read.sum"), SECTOR),
                       written_bytes=written, l2_read_hit_pct=read_hit_pct(k),
                       l2_bytes=k.get("device__attribute_l2_cache_size"), compulsory_bytes=compulsory,
                       excess_bytes=excess, compulsory_basis=basis)


@dataclass
class LocalMemory:
    instructions: float | None           # warp-level local loads + stores
    spill_instructions: float | None     # of which the compiler's register spills (when ncu says)
    l1_bytes: float | None               # local sectors at L1 x 32
    l2_bytes: float | None               # local sectors that missed L1 (went to L2 and beyond) x 32
    instruction_share_pct: float | None  # of global + shared + local memory instructions
    l1_share_pct: float | None           # of the global + local sectors and shared wavefronts at L1
    l2_share_pct: float | None           # of the sectors the SMs sent to L2

    @property
    def present(self) -> bool:
        return bool(self.instructions or self.l1_bytes)

    @property
    def share_pct(self) -> float:
        return max(v for v in (self.instruction_share_pct, self.l1_share_pct, self.l2_share_pct, 0.0) if v is not None)

    def to_dict(self) -> dict:
        return asdict(self)


def local_memory(k: KernelProfile) -> LocalMemory:
    instr = _sum(k, "smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum")
    if instr is None:
        instr = _sum(k, "sass__inst_executed_local_loads", "sass__inst_executed_local_stores")
    if instr is None:
        instr = _sum(k, "l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_local_op_st.sum")
    spills = k.first("sass__inst_executed_register_spilling", "derived__local_spilling_requests")
    if instr is None and spills:
        instr = spills
    l1 = _sum(k, "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum")
    miss = _sum(k, "l1tex__t_sectors_pipe_lsu_mem_local_op_ld_lookup_miss.sum",
                "l1tex__t_sectors_pipe_lsu_mem_local_op_st_lookup_miss.sum")
    other_instr = _sum(k, "smsp__sass_inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_st.sum",
                       "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum")
    glob = _sum(k, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                "l1tex__t_sectors_pipe_lsu_mem_global_op_atom.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_red.sum")
    shared = k.get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    if glob is not None and shared is not None:
        glob += shared   # shared memory runs on the same L1 data pipe: a TMA GEMM's operands show up only here
    to_l2 = k.get("lts__t_sectors_srcunit_tex.sum")
    share = lambda part, rest: 100 * part / (part + rest) if part is not None and rest is not None and part + rest > 0 else None
    return LocalMemory(instructions=instr, spill_instructions=spills, l1_bytes=_times(l1, SECTOR),
                       l2_bytes=_times(miss, SECTOR), instruction_share_pct=share(instr, other_instr),
                       l1_share_pct=share(l1, glob),
                       l2_share_pct=100 * min(1.0, miss / to_l2) if miss is not None and to_l2 else None)


@dataclass
class Atomics:
    instructions: float | None          # warp-level global atomics and reductions (ATOM, RED)
    share_pct: float | None             # of global memory instructions (or of L1 global requests)
    l2_sectors: float | None            # atomic sectors L2 processed
    hottest_slice_pct: float | None     # of those, the share one L2 slice took
    slices: int | None
    hot_unit_busy_pct: float | None     # lts__d_atomic_input_cycles_active, busiest slice
    avg_unit_busy_pct: float | None     # ... average slice
    updates_per_request: float | None   # L2 atomic requests per L1 request: distinct addresses per warp instruction

    @property
    def present(self) -> bool:
        return bool(self.instructions)

    @property
    def concentrated(self) -> bool:
        """One slice took far more than its share: the updates pile onto a few addresses."""
        if self.hottest_slice_pct is not None and self.slices:
            return self.hottest_slice_pct >= max(25.0, 400.0 / self.slices)
        hot, avg = self.hot_unit_busy_pct, self.avg_unit_busy_pct
        return hot is not None and avg is not None and hot >= 4 * max(avg, 1e-9)

    def to_dict(self) -> dict:
        return asdict(self)


def atomics(k: KernelProfile) -> Atomics:
    instr = _sum(k, "smsp__sass_inst_executed_op_global_atom.sum", "smsp__sass_inst_executed_op_global_red.sum")
    others = _sum(k, "smsp__sass_inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_st.sum")
    if instr is None:  # the memory tables' counts (a report without instruction statistics)
        instr = _sum(k, "smsp__inst_executed_op_global_red.sum", "smsp__inst_executed_op_generic_atom_dot_alu.sum",
                     "smsp__inst_executed_op_generic_atom_dot_cas.sum")
    req = _sum(k, "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum")
    if instr is None:
        instr = req
    if others is None:
        others = _sum(k, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum")
    sectors = _sum(k, "lts__t_sectors_op_atom.sum", "lts__t_sectors_op_red.sum")
    hottest = _sum(k, "lts__t_sectors_op_atom.max", "lts__t_sectors_op_red.max")
    l2_req = _sum(k, "lts__t_requests_srcunit_tex_op_red.sum", "lts__t_requests_srcunit_tex_op_atom_dot_alu.sum",
                  "lts__t_requests_srcunit_tex_op_atom_dot_cas.sum")
    slices = k.first("device__attribute_l2s_count")
    return Atomics(instructions=instr,
                   share_pct=100 * instr / (instr + others) if instr and others is not None else None,
                   l2_sectors=sectors,
                   hottest_slice_pct=100 * min(1.0, hottest / sectors) if sectors and hottest is not None else None,
                   slices=int(slices) if slices else None,
                   hot_unit_busy_pct=k.get("lts__d_atomic_input_cycles_active.max.pct_of_peak_sustained_elapsed"),
                   avg_unit_busy_pct=k.get("lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed"),
                   updates_per_request=l2_req / req if l2_req is not None and req else None)
