"""The fix checker's guards: a fix cannot fool the clock.

- Fresh inputs on every timed repetition: before each sample the entries a workload names as its inputs
  (`INPUTS = ("x", ...)` in workload.py: data a fix could cache a result of across steps, never weights a fix
  may legitimately pre-process once) are refilled in place, with the same new values in the reference's and
  the fix's state (a fix that caches its result across steps returns a stale one). Only names present in
  both states are refilled. The default refill (`refresh`): every tensor of the entry (a tensor, or a list or
  tuple of them, nested) gets new values drawn on the check's device: floats standard normal, integers
  uniform in the tensor's current [min, max]. A workload whose inputs need other values (token ids over the
  vocabulary, a pool of texts, a skewed routing, data drawn per rank) defines `refill(state, seed)`, which the
  guard calls on both states instead (helpers: perflab.workloads.fresh). `INPUTS = ()` says the step has
  none the guard can refill (a comment in the workload says why); tests/engine/test_catalog_inputs.py makes every
  catalog workload decide.
- Outputs compared on every repetition, not only the first: after each pair of samples the side that ran fewer
  steps (each side repeats its step as often as its own speed needs) runs untimed steps until both have run
  as many, then their last outputs are compared: the same step of the same state, since a workload's step may
  advance its state (the next batch of a pool, a random generator, a cache) (a fix that skips work, or writes
  its result on a stream the timer does not wait for, returns a wrong one). A multi-rank check runs the same
  loop on every rank with a `Pairing` that agrees each decision across the ranks (evidence/rank_worker.py).
- The speed of light: a fix measured faster than its work allows (the bytes it must move and the FLOPs it must
  do against the GPU's peak ceilings) is refused as a measurement error, with the numbers. The work is the
  workload's `work(state) -> {"flops", "bytes", "path"}` where it defines one, else the bytes it cannot avoid:
  its inputs read once and its outputs written once, counted only when they cannot all stay in L2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perflab.puzzles.engine import checker, runner, stats

L2_FACTOR = 2.0   # bytes above this many L2 sizes must cross DRAM


@dataclass
class Timed:
    slow: list[float]
    fast: list[float]
    mismatch: str = ""       # the first repetition whose outputs differ, in one line
    refused: str = ""        # a fix faster than its speed of light: why it is a measurement error


def input_keys(module: Any, state: Any) -> list[str]:
    names = getattr(module, "INPUTS", ()) or ()
    return [k for k in names if isinstance(state, dict) and k in state]


def _tensors(value: Any) -> list[Any]:
    """The tensors of an input entry: the tensor itself, or those of a list or tuple of them (nested)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def refresh(state: dict, keys: list[str], seed: int, device: str | None = None) -> None:
    """Refill the named tensors in place with values drawn from `seed` (same seed, same values) on `device`
    (default: each tensor's own; a host input of a GPU check is drawn on the GPU, then copied)."""
    import torch

    leaves = [t for k in keys for t in _tensors(state[k])]
    for i, t in enumerate(leaves):
        where = torch.device(device) if device else t.device
        gen = torch.Generator(device=where).manual_seed(seed * 1009 + i)
        with torch.no_grad():
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape, generator=gen, device=where, dtype=torch.float32).to(t.dtype))
            elif t.dtype != torch.bool and t.numel():
                lo, hi = int(t.min()), int(t.max())
                t.copy_(torch.randint(lo, hi + 1, t.shape, generator=gen, device=where, dtype=t.dtype))


def refill(module: Any, state: dict, keys: list[str], seed: int, device: str | None = None) -> None:
    """Fresh inputs in `state`: the workload's own `refill(state, seed)` where it defines one, else `refresh`."""
    if not keys:
        return
    if callable(getattr(module, "refill", None)):
        module.refill(state, seed)
    else:
        refresh(state, keys, seed, device)


class _Counted:
    """A module's step that counts its calls and keeps its last output."""

    def __init__(self, module: Any, state: Any):
        self.module, self.state, self.steps, self.out = module, state, 0, None

    def step(self, state: Any) -> Any:
        self.out = self.module.step(state)
        self.steps += 1
        return self.out


class Pairing:
    """How the guard times, keeps the two sides in step and decides on their outputs, in one process. A job of
    several ranks (evidence/rank_worker.py: RankPairing) agrees each of these across its ranks, so that every
    rank runs the same steps, hence the same collectives, and stops at the same repetition."""

    stop_at_mismatch = False   # one process goes on timing (the check reports the timings beside the refusal)

    def calibrated(self, step: Any, state: Any, device: str) -> Any:
        return checker.calibrated(step, state, device)

    def target(self, a_steps: int, b_steps: int) -> int:
        """The step count both sides reach before inputs are refilled or outputs compared."""
        return max(a_steps, b_steps)

    def decide(self, problem: str) -> str:
        """The mismatch that stops the comparisons ('' when none): this process's own."""
        return problem


def in_step(a: _Counted, b: _Counted, device: str, pairing: Pairing | None = None) -> None:
    """Untimed steps on the side behind until both sides have run the same number of steps."""
    target = (pairing or Pairing()).target(a.steps, b.steps)
    for side in (a, b):
        while side.steps < target:
            side.step(side.state)
    runner.synchronize(device)


def time_guarded(ref: Any, ref_state: Any, fix: Any, fix_state: Any, device: str, reps: int, puzzle: Any,
                 seed: int, pairing: Pairing | None = None) -> Timed:
    """Interleaved timings (ms per step), fresh inputs before every sample, outputs compared after every one."""
    pairing = pairing or Pairing()
    keys = [k for k in input_keys(ref, ref_state) if isinstance(fix_state, dict) and k in fix_state]
    a, b = _Counted(ref, ref_state), _Counted(fix, fix_state)
    ref_sample = pairing.calibrated(a.step, ref_state, device)
    fix_sample = pairing.calibrated(b.step, fix_state, device)
    timed = Timed([], [])
    for rep in range(reps + 1):          # the first pair warms up and is not kept
        if not timed.mismatch:
            in_step(a, b, device, pairing)        # fresh inputs land on the same step of both
            fresh = seed + 1 + rep                # never setup's seed: a refill that draws as setup does is new
            refill(ref, ref_state, keys, fresh, device)
            refill(ref, fix_state, keys, fresh, device)
        slow, fast = float(ref_sample()), float(fix_sample())
        if not timed.mismatch:
            in_step(a, b, device, pairing)
            problem = pairing.decide(checker.compare(checker.snapshot(a.out), checker.snapshot(b.out), puzzle))
            if problem:
                timed.mismatch = f"timed repetition {rep + 1}: {problem}"
                if pairing.stop_at_mismatch:
                    break
        if rep:
            timed.slow.append(slow)
            timed.fast.append(fast)
    return timed


def work_of(module: Any, state: Any, outputs: Any) -> dict[str, Any]:
    """The work a step cannot avoid: the workload's own `work(state)`, else its inputs and outputs once."""
    import torch

    if callable(getattr(module, "work", None)):
        return dict(module.work(state))
    tensors = [v for _, v in checker.flatten(outputs) if isinstance(v, torch.Tensor)]
    tensors += [state[k] for k in input_keys(module, state) if isinstance(state[k], torch.Tensor)]
    return {"flops": 0.0, "bytes": float(sum(t.numel() * t.element_size() for t in tensors)), "path": "",
            "cacheable": True}


def floor_ms(work: dict[str, Any], ceilings: Any) -> tuple[float, str]:
    """The speed of light of the work on these ceilings (peak figures: a floor no real run goes under), and the
    arithmetic that gives it; 0.0 when it cannot be judged."""
    nbytes, flops = float(work.get("bytes") or 0.0), float(work.get("flops") or 0.0)
    l2 = float(getattr(ceilings, "l2_bytes", 0.0) or 0.0)
    if work.get("cacheable") and (not l2 or nbytes <= L2_FACTOR * l2):
        nbytes = 0.0           # could all live in L2: DRAM bandwidth bounds nothing
    peak = getattr(ceilings, "peak", None) or {}
    dram = peak.get("dram") or ceilings.dram or 0.0
    roofs = {**(ceilings.compute or {}), **{p: v for p, v in peak.items() if p != "dram"}}
    path = work.get("path") or ""
    roof = roofs.get(path) if path in roofs else max(roofs.values(), default=0.0)
    t_bytes = nbytes / dram if dram and nbytes else 0.0
    t_flops = flops / roof if roof and flops else 0.0
    ms = 1e3 * max(t_bytes, t_flops)
    why = []
    if t_bytes:
        why.append(f"{nbytes / 1e9:.3g} GB at {dram / 1e9:,.0f} GB/s = {1e3 * t_bytes:.3g} ms")
    if t_flops:
        why.append(f"{flops / 1e12:.3g} TFLOP at {roof / 1e12:,.0f} TFLOP/s = {1e3 * t_flops:.3g} ms")
    return ms, "; ".join(why)


def below_speed_of_light(fast_ms: float, work: dict[str, Any], ceilings: Any) -> str:
    """'' when the fix's measured time is physically possible, else the refusal in one line."""
    floor, why = floor_ms(work, ceilings)
    if floor <= 0 or fast_ms >= floor:
        return ""
    return (f"the fix measured {fast_ms:.4g} ms per step, faster than the speed of light of its work "
            f"({why}; {ceilings.source}): a measurement error, not a speed-up (work skipped, work on a stream the "
            "timer does not wait for, or timers not synchronised)")


def device_ceilings_for(device: str) -> Any:
    """The datasheet/measured ceilings of the GPU a check runs on; None on the CPU (nothing to judge)."""
    if not device.startswith("cuda"):
        return None
    import torch

    from perflab.analysis.work.ceilings import device_ceilings

    return device_ceilings(torch.cuda.get_device_name(torch.device(device)))


def refusal(chk: Any, fast: list[float]) -> str:
    """The speed-of-light refusal of a checked fix ('' when its time is possible or cannot be judged)."""
    return refusal_of(chk.ref, chk.ref_state, chk.fix, chk.fix_state, chk.device, fast)


def refusal_of(ref: Any, ref_state: Any, fix: Any, fix_state: Any, device: str, fast: list[float]) -> str:
    """refusal's judgement: the work of one more (untimed) step of the fix against the device's ceilings. It runs
    that step only on a GPU with samples, so every rank of a job on GPUs runs it (its collectives too)."""
    ceilings = device_ceilings_for(device)
    if ceilings is None or not fast:
        return ""
    runner.synchronize(device)
    out = fix.step(fix_state)
    runner.synchronize(device)
    return below_speed_of_light(sorted(fast)[len(fast) // 2], work_of(ref, ref_state, out), ceilings)
