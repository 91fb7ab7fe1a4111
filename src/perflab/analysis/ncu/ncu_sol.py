"""What limits one profiled kernel, read the way Nsight Compute's speed-of-light analysis reads it.

Pure functions over a `KernelProfile` (trace/nsight_compute/ncu_model.py):
- `units`: every unit's throughput in % of its peak over the kernel's elapsed time, from whichever
  metrics the architecture reports (GB10 has no `dram__` counters: the memory side then comes from
  `gpu__compute_memory_access/request_throughput`, the SM side from instruction throughput);
- `launch`: blocks against SMs and against the block slots the occupancy limits allow (waves);
- `occupancy`: achieved against theoretical warp occupancy and what limits each (the grid, registers,
  shared memory, block size, barriers, or uneven work when nothing in the launch explains the gap);
- `stalls`: why the resident warps do not issue, each reason's share of the cycles between issues.
A value the report lacks is None; nothing is guessed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from perflab.trace.nsight_compute.ncu_model import KernelProfile

ELAPSED = ".avg.pct_of_peak_sustained_elapsed"

# unit -> metric names, first present wins (names changed across ncu versions and architectures)
MEMORY_UNITS = {
    "DRAM": ("gpu__dram_throughput" + ELAPSED, "dram__throughput" + ELAPSED, "dram__cycles_active" + ELAPSED),
    "L2": ("lts__throughput" + ELAPSED,),
    "L1/shared": ("l1tex__throughput" + ELAPSED,),
}
MEMORY_AGGREGATE = ("gpu__compute_memory_throughput" + ELAPSED,)
MEMORY_FALLBACK = ("gpu__compute_memory_access_throughput" + ELAPSED, "gpu__compute_memory_request_throughput" + ELAPSED)
COMPUTE_UNITS = {
    "tensor pipe": ("sm__pipe_tensor_cycles_active" + ELAPSED, "sm__pipe_tensor_op_gmma_cycles_active" + ELAPSED,
                    "sm__pipe_tensor_op_hmma_cycles_active" + ELAPSED,
                    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    "FMA pipe": ("sm__pipe_fma_cycles_active" + ELAPSED, "sm__inst_executed_pipe_fma" + ELAPSED,
                 "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    "ALU pipe": ("sm__pipe_alu_cycles_active" + ELAPSED, "sm__inst_executed_pipe_alu" + ELAPSED),
    "FP64 pipe": ("sm__pipe_fp64_cycles_active" + ELAPSED, "sm__inst_executed_pipe_fp64" + ELAPSED),
    "LSU pipe": ("sm__inst_executed_pipe_lsu" + ELAPSED,),
    "XU pipe": ("sm__inst_executed_pipe_xu" + ELAPSED,),
}
SM_AGGREGATE = ("sm__throughput" + ELAPSED,)
SM_FALLBACK = ("sm__instruction_throughput" + ELAPSED, "sm__inst_issued" + ELAPSED)


@dataclass
class Units:
    """Throughput in % of peak per unit (elapsed cycles: idle SMs count against it)."""

    memory: dict[str, float] = field(default_factory=dict)    # DRAM, L2, L1/shared, or "memory" (aggregate)
    compute: dict[str, float] = field(default_factory=dict)   # SM (aggregate), and each pipe
    memory_source: str = ""                                   # which metric family gave the memory side

    @staticmethod
    def _top(d: dict[str, float]) -> tuple[str | None, float]:
        return max(d.items(), key=lambda kv: kv[1]) if d else (None, 0.0)

    @property
    def busiest_memory(self) -> tuple[str | None, float]:
        """The busiest memory unit; DRAM when it is within 5 points of it (L2 carries every DRAM byte too)."""
        name, pct = self._top(self.memory)
        dram = self.memory.get("DRAM")
        return ("DRAM", dram) if dram is not None and dram >= pct - 5 else (name, pct)

    @property
    def busiest_compute(self) -> tuple[str | None, float]:
        return self._top(self.compute)

    @property
    def busiest(self) -> tuple[str | None, float]:
        """The busiest unit by name (a memory unit named as busiest_memory names it)."""
        top = self._top({**self.memory, **self.compute})
        return self.busiest_memory if top[0] in self.memory else top

    @property
    def peak_pct(self) -> float:
        """The highest throughput of any unit: what the thresholds read."""
        return self._top({**self.memory, **self.compute})[1]

    @property
    def measured(self) -> bool:
        return bool(self.memory or self.compute)

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 1) for k, v in {**self.memory, **self.compute}.items()}


def units(k: KernelProfile) -> Units:
    u = Units()
    for name, metrics in MEMORY_UNITS.items():
        v = k.first(*metrics)
        if v is not None:
            u.memory[name] = v
    agg = k.first(*MEMORY_AGGREGATE)
    u.memory_source = "dram/lts/l1tex throughput" if u.memory else ""
    if agg is not None and (not u.memory or agg > max(u.memory.values()) + 1):
        u.memory["memory"] = agg  # ncu's Memory Throughput: its max over units we do not list (e.g. fabric)
        u.memory_source = u.memory_source or "gpu__compute_memory_throughput"
    if not u.memory:
        vals = [v for v in (k.get(m) for m in MEMORY_FALLBACK) if v is not None]
        if vals:
            u.memory["memory"] = max(vals)
            u.memory_source = "gpu__compute_memory_access/request_throughput (no dram__ counters)"
    sm = k.first(*SM_AGGREGATE)
    if sm is None:
        vals = [v for v in (k.get(m) for m in SM_FALLBACK) if v is not None]
        sm = max(vals) if vals else None
    if sm is not None:
        u.compute["SM"] = sm
    for name, metrics in COMPUTE_UNITS.items():
        v = k.first(*metrics)
        if v is not None:
            u.compute[name] = v
    return u


@dataclass
class Launch:
    grid_blocks: int | None
    block_threads: int | None
    warps_per_block: int | None
    sms: int | None
    blocks_per_sm: int | None          # the smallest launch__occupancy_limit_*: blocks one SM can hold
    waves_per_sm: float | None         # grid / (SMs x blocks_per_sm)
    idle_sm_pct: float | None          # SMs that get no block at all

    def to_dict(self) -> dict:
        return asdict(self)


LIMITS = ("registers", "shared_mem", "warps", "blocks", "barriers")


def occupancy_limits(k: KernelProfile) -> dict[str, float]:
    return {name: v for name in LIMITS if (v := k.get(f"launch__occupancy_limit_{name}")) is not None}


def launch(k: KernelProfile) -> Launch:
    grid = k.get("launch__grid_size")
    if grid is None and k.grid:
        grid = k.grid[0] * k.grid[1] * k.grid[2]
    threads = k.get("launch__block_size")
    if threads is None and k.block:
        threads = k.block[0] * k.block[1] * k.block[2]
    sms = k.first("launch__sm_count", "device__attribute_multiprocessor_count")
    limits = occupancy_limits(k)
    per_sm = min(limits.values()) if limits else None
    waves = k.get("launch__waves_per_multiprocessor")
    if grid and sms and per_sm:
        exact = grid / (sms * per_sm)
        if waves is None or abs(exact - waves) < 0.01:  # ncu rounds to two decimals
            waves = exact
    idle = 100 * max(0.0, 1 - grid / sms) if grid and sms else None
    return Launch(grid_blocks=int(grid) if grid else None, block_threads=int(threads) if threads else None,
                  warps_per_block=-(-int(threads) // 32) if threads else None, sms=int(sms) if sms else None,
                  blocks_per_sm=int(per_sm) if per_sm else None, waves_per_sm=waves, idle_sm_pct=idle)


LIMITER_NAMES = {"registers": "registers", "shared_mem": "shared memory", "warps": "block size",
                 "blocks": "block size", "barriers": "barriers"}


@dataclass
class Occupancy:
    achieved_pct: float | None         # sm__warps_active: warps resident per active cycle, % of the SM's slots
    theoretical_pct: float | None      # what the launch limits allow
    theoretical_limiter: str | None    # registers | shared memory | block size | barriers | None (all slots usable)
    limit_metric: str | None           # the launch__occupancy_limit_* that is smallest (registers, shared_mem, ...)
    grid_cap_pct: float | None         # occupancy the grid's blocks allow, spread over the SMs that get one
    achieved_limiter: str | None       # grid | the theoretical limiter | uneven work

    def to_dict(self) -> dict:
        return asdict(self)


def occupancy(k: KernelProfile, shape: Launch | None = None) -> Occupancy:
    shape = shape or launch(k)
    achieved = k.get("sm__warps_active.avg.pct_of_peak_sustained_active")
    theoretical = k.get("sm__maximum_warps_per_active_cycle_pct")
    limits = occupancy_limits(k)
    metric = None
    if limits:  # ties: the resource a programmer sets (registers, shared memory) before the warp count
        metric = min(limits, key=lambda n: (limits[n], n in ("warps", "blocks")))
    limiter = LIMITER_NAMES.get(metric) if metric and (theoretical is None or theoretical < 95) else None
    max_warps = k.get("device__attribute_max_warps_per_multiprocessor")
    cap = None
    if shape.grid_blocks and shape.sms and shape.warps_per_block and max_warps:
        with_work = min(shape.grid_blocks, shape.sms)
        blocks = shape.grid_blocks / with_work
        if shape.blocks_per_sm:
            blocks = min(blocks, shape.blocks_per_sm)
        cap = min(100.0, 100 * blocks * shape.warps_per_block / max_warps)
    why = limiter
    if cap is not None and theoretical is not None and cap < 0.9 * theoretical:
        why = "grid"
    elif achieved is not None and theoretical and achieved < 0.7 * theoretical:
        why = "uneven work"  # the launch allows more: blocks end at different times, or one SM gets more
    return Occupancy(achieved_pct=achieved, theoretical_pct=theoretical, theoretical_limiter=limiter,
                     limit_metric=metric, grid_cap_pct=cap, achieved_limiter=why)


# warp-stall reasons: (family prefix, suffix); the first family the report has is used
STALL_FAMILIES = (("smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"),
                  ("smsp__warp_issue_stalled_", "_per_warp_active.pct"),
                  ("smsp__pcsamp_warps_issue_stalled_", ""))
STALL_MEANING = {
    "long_scoreboard": "waiting for global/local memory (L1TEX) data",
    "lg_throttle": "the local/global memory instruction queue is full",
    "drain": "waiting at exit for outstanding memory writes",
    "membar": "waiting on memory fences",
    "barrier": "waiting at a barrier: a block barrier (__syncthreads, named barriers) or, on Hopper, a warpgroup "
               "waiting for its own MMAs (wgmma.wait_group)",
    "short_scoreboard": "waiting for shared-memory or special-function results",
    "mio_throttle": "the shared-memory (MIO) instruction queue is full",
    "wait": "fixed-latency dependencies between instructions",
    "math_pipe_throttle": "a math pipe is busy",
    "tex_throttle": "the texture queue is full",
    "branch_resolving": "waiting for branch targets",
    "no_instruction": "instruction cache misses", "no_instructions": "instruction cache misses",
    "imc_miss": "constant cache misses", "dispatch_stall": "dispatch stalls", "misc": "other reasons",
    "sleeping": "sleeping (nanosleep, warp sync)", "not_selected": "eligible, another warp was picked",
    "gmma": "waiting for warpgroup MMA results", "warpgroup_arrive": "waiting for warpgroup MMA results",
}
MEMORY_WAITS = {"long_scoreboard", "lg_throttle", "drain", "tex_throttle"}
ISSUING = {"selected", "not_selected"}     # a warp that issues, or could have


@dataclass
class Stall:
    reason: str
    value: float           # cycles per issued instruction (or % of active warps, or samples: see family)
    pct: float             # share of all stall reasons, including the cycle a warp issues ("selected")

    @property
    def meaning(self) -> str:
        return STALL_MEANING.get(self.reason, self.reason.replace("_", " "))


@dataclass
class Stalls:
    reasons: list[Stall]                   # largest first, "selected" left out
    family: str                            # the metric family they came from
    cycles_per_issue: float | None         # smsp__average_warp_latency_per_inst_issued (when present)

    def top(self, n: int = 3, *, waits_only: bool = True) -> list[Stall]:
        return [s for s in self.reasons if not (waits_only and s.reason in ISSUING)][:n]

    def text(self, n: int = 3) -> str:
        """The leading waits as "reason pct %", those under 1 % left out (the first always named)."""
        top = self.top(n)
        return ", ".join(f"{s.reason} {s.pct:.0f} %" for s in top if s.pct >= 1 or s is top[0])

    def share(self, *reasons: str) -> float:
        return sum(s.pct for s in self.reasons if s.reason in reasons)

    def to_list(self, n: int = 3) -> list[dict]:
        return [{"reason": s.reason, "pct": round(s.pct, 1), "meaning": s.meaning} for s in self.top(n)]


def stalls(k: KernelProfile) -> Stalls | None:
    for prefix, suffix in STALL_FAMILIES:
        found: dict[str, float] = {}
        for name, v in k.metrics.items():
            if not (name.startswith(prefix) and name.endswith(suffix)) or not isinstance(v, (int, float)):
                continue
            reason = name[len(prefix):len(name) - len(suffix)] if suffix else name[len(prefix):]
            if reason.endswith("_not_issued") or "." in reason:
                continue
            found[reason] = float(v)
        total = sum(found.values())
        if total > 0:
            rows = sorted((Stall(r, v, 100 * v / total) for r, v in found.items() if r != "selected"),
                          key=lambda s: -s.value)
            return Stalls(reasons=rows, family=prefix + "*" + suffix,
                          cycles_per_issue=k.get("smsp__average_warp_latency_per_inst_issued.ratio"))
    return None


def limits_summary(k: KernelProfile) -> dict:
    """The numbers above as plain JSON for a report's analyses (per kernel)."""
    u, shape = units(k), launch(k)
    occ, st = occupancy(k, shape), stalls(k)
    return {"units_pct": u.rounded(), "memory_source": u.memory_source, "launch": shape.to_dict(),
            "occupancy": {key: (round(v, 1) if isinstance(v, float) else v) for key, v in occ.to_dict().items()},
            "stalls": st.to_list(5) if st else None}
