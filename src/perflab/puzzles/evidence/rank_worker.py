"""One rank of a multi-GPU puzzle run: `python -m torch.distributed.run ... -m perflab.puzzles.evidence.rank_worker JOB.json`.

Started by perflab.puzzles.evidence.multirank (never by hand): torchrun sets RANK, LOCAL_RANK, WORLD_SIZE
and the rendezvous; this process joins the process group (NCCL on GPUs, one GPU per local rank;
gloo on the CPU), then runs the job's mode on its rank:

- profile: setup, warm-up, `steps` ProfilerStep#N under torch.profiler -> rank{R}.trace.json.gz, the
  ranks aligned on a host barrier before the first recorded step (profile_job), then `steps` timing
  samples of the job (each the slowest rank's time);
- check: the fix checker's stages on every rank (poisoned outputs compared with the reference rank by
  rank; guard.time_guarded's interleaved timings of the slowest rank, with fresh inputs before every sample
  and outputs compared after every one; the fix re-profiled, one trace per rank);
- sweep: latency/throughput over batch sizes (toolkit.batch_sweep), each point the slowest rank's;
- record: a whole recording in one launch (profile slow and solution, check solution and starter).

Every rank writes result.rank{R}.json into the job's folder; rank 0's holds what was gathered.
Collectives keep the ranks in lockstep: every decision that changes how many collectives follow
(inner repeats, pass/fail) is agreed across ranks first.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab.puzzles.engine import runner, stats


def _dist():
    import torch.distributed as dist

    return dist


def agree_max(value: float, device: str) -> float:
    """The largest value over all ranks (every rank gets it)."""
    import torch

    dist = _dist()
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def gather(obj: Any) -> list[Any]:
    dist = _dist()
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def job_sampler(step: Callable[[Any], Any], state: Any, device: str, inner: int = 1) -> stats.Sample:
    """ms per step of the job: the ranks start together (barrier), each times `inner` steps with
    runner.sampler, and the sample is the slowest rank's time (a step is done when every rank is)."""
    own = runner.sampler(step, state, device, inner)

    def sample() -> float:
        runner.synchronize(device)
        _dist().barrier()
        return agree_max(own(), device)

    return sample


def calibrated(step: Callable[[Any], Any], state: Any, device: str) -> stats.Sample:
    """Like checker.calibrated: enough steps per sample to last about SAMPLE_TARGET_MS, agreed across ranks."""
    from perflab.puzzles.engine import checker

    probe = job_sampler(step, state, device)
    for _ in range(checker.TIMING_WARMUP):
        probe()
    step_ms = statistics.median(probe() for _ in range(3))  # the same on every rank (agreed maxima)
    return job_sampler(step, state, device, stats.inner_repeats(step_ms, checker.SAMPLE_TARGET_MS))


def first_rank(message: str) -> str:
    """The first rank's non-empty message, as 'rank R: message' on every rank ('' when no rank has one)."""
    said = [(r, m) for r, m in enumerate(gather(message)) if m]
    return f"rank {said[0][0]}: {said[0][1]}" if said else ""


class RankPairing:
    """guard.Pairing for one rank of a job: every decision of the guard's loop agreed across the ranks, so that all
    of them run the same untimed steps (each with its collectives) and stop comparing at the same repetition."""

    stop_at_mismatch = True   # the job is refused: no rank times, refills or steps any further

    def __init__(self, device: str):
        self.device = device

    def calibrated(self, step: Callable[[Any], Any], state: Any, device: str) -> stats.Sample:
        return calibrated(step, state, device)

    def target(self, a_steps: int, b_steps: int) -> int:
        """The largest count over the ranks; ranks whose counts differ have already paired unlike collectives."""
        import torch

        dist = _dist()
        t = torch.tensor([a_steps, b_steps, -a_steps, -b_steps], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        hi_a, hi_b, lo_a, lo_b = (int(v) for v in t.tolist())
        if (hi_a, hi_b) != (-lo_a, -lo_b):
            raise RuntimeError(f"ranks out of step: reference at {-lo_a}-{hi_a} steps, fix at {-lo_b}-{hi_b}")
        return max(hi_a, hi_b)

    def decide(self, problem: str) -> str:
        """'' on every rank when no rank's outputs differ, else the first such rank's problem on every rank."""
        return first_rank(problem) if agree_max(1.0 if problem else 0.0, self.device) else ""


_HOST_GROUP: Any = None  # a gloo group: barriers that leave no kernel in the GPU timeline


def align(device: str) -> None:
    """Every rank drained and past this point before any goes on: a host-side barrier, then, on GPUs, one tiny
    all-reduce drained on every rank. The gloo barrier releases the ranks up to a network round trip apart
    (the 2-H200 tp-scaling-knee recording of 2026-11-23, made with no barrier at all, read 0.45 ms of wait in
    its first recorded all-reduce); the GPUs end an all-reduce together, so the hosts leave the drain microseconds apart. It runs
    before the first ProfilerStep, so no step analysis counts it."""
    runner.synchronize(device)
    _dist().barrier(group=_HOST_GROUP)
    if device.startswith("cuda"):
        import torch

        _dist().all_reduce(torch.zeros(1, device=device))
        runner.synchronize(device)


def profile_job(module: Any, state: Any, device: str, trace: Path, *, warmup: int, steps: int,
                with_stack: bool = False) -> None:
    """runner.profile_steps for one rank of N: the recorded steps start on every rank together.

    Starting the profiler takes each rank a different time (tens of ms were seen on 2 H200s), so the
    first collective of the first recorded step would wait on the late rank and read as load
    imbalance. So: warm up unprofiled, start the profiler, run one step under it that no
    ProfilerStep encloses (the profiler's own warm-up: not analysed), drain and meet the other
    ranks on a host barrier, then record `steps` ProfilerStep#N steps (the name torch.profiler's
    step() gives them) and drain before the profiler stops."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(warmup):
        module.step(state)
    runner.synchronize(device)
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    trace.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities, record_shapes=True, with_stack=with_stack) as prof:
        module.step(state)
        align(device)
        for i in range(steps):
            with record_function(f"ProfilerStep#{i + 1}"):
                module.step(state)
        runner.synchronize(device)
    prof.export_chrome_trace(str(trace))


def _trace_path(folder: str, rank: int) -> Path:
    return Path(folder) / f"rank{rank}.trace.json.gz"


def run_profile(job: dict, device: str, rank: int) -> dict:
    module = runner.load_module(Path(job["file"]))
    state = module.setup(device, int(job["seed"]))
    profile_job(module, state, device, _trace_path(job["traces"], rank), warmup=int(job["warmup"]),
                steps=int(job["steps"]), with_stack=bool(job.get("with_stack")))
    sample = job_sampler(module.step, state, device)
    return {"samples_ms": [sample() for _ in range(int(job["steps"]))]}


def run_check(job: dict, device: str, rank: int) -> dict:
    """The fix checker on this rank: outputs of the first steps compared, then guard.time_guarded's timings (fresh
    inputs before every sample, outputs compared after every one, each decision agreed across the ranks), the
    speed-of-light refusal of any rank, and the fix re-profiled."""
    from perflab.puzzles.engine import checker, guard
    from perflab.puzzles.engine.spec import load

    puzzle = load(Path(job["puzzle"]))
    seed = int(job["seed"])
    ref = runner.load_module(Path(job["slow"]))
    fix_path = Path(job["fix"])
    if not fix_path.is_file() and job.get("variant"):  # a derived starter lives in each node's own cache
        fix_path = puzzle.file(job["variant"])
    fix = runner.load_module(fix_path)
    ref_state = ref.setup(device, seed)
    try:
        fix_state, message = fix.setup(device, seed), ""
    except Exception as exc:
        fix_state, message = None, f"setup() raised {type(exc).__name__}: {exc}"
    if not message:
        c = checker.check_correctness(ref, ref_state, fix, fix_state, device, seed, puzzle)
        message = "" if c.ok else c.message
    out: dict[str, Any] = {"correct": False, "message": first_rank(message), "seed": seed}
    if out["message"]:
        return out
    timed = guard.time_guarded(ref, ref_state, fix, fix_state, device, int(job["reps"]), puzzle, seed,
                               RankPairing(device))
    out["message"] = timed.mismatch or first_rank(guard.refusal_of(ref, ref_state, fix, fix_state, device,
                                                                   timed.fast))
    if out["message"]:
        return out
    out.update(correct=True, slow_ms=timed.slow, fixed_ms=timed.fast)
    profile_job(fix, fix_state, device, _trace_path(job["traces"], rank), warmup=1, steps=int(job["steps"]),
                with_stack=bool(job.get("with_stack")))
    return out


def run_sweep(job: dict, device: str, rank: int) -> dict:
    import torch

    from perflab.toolkit import batch_sweep

    module = runner.load_module(Path(job["file"]))
    state = module.setup(device, 0)
    with torch.no_grad():
        points = batch_sweep.sweep(lambda x: module.forward(state, x), lambda b: module.make_batch(state, b, seed=b),
                                   [int(b) for b in job["batches"]], device=device, reps=int(job.get("reps", 15)))
    slowest = []
    for p in points:  # the job's point: the slowest rank's latency and per-call time
        lat, fwd = agree_max(p["latency_ms"], device), agree_max(p["forward_ms"], device)
        slowest.append({"batch": p["batch"], "latency_ms": lat, "forward_ms": fwd,
                        "throughput": p["batch"] / (fwd / 1e3) if fwd > 0 else 0.0})
    return {"points": slowest}


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def run_record(job: dict, device: str, rank: int) -> dict:
    """A whole recording in one launch: profile each variant, then check each fix (solution, starter)."""
    out: dict[str, Any] = {}
    for variant, spec in job["profiles"].items():
        out[f"profile:{variant}"] = run_profile({**job, **spec}, device, rank)
        _free(device)
    for name, spec in job["checks"].items():
        out[f"check:{name}"] = run_check({**job, **spec}, device, rank)
        _free(device)
    return out


MODES = {"profile": run_profile, "check": run_check, "sweep": run_sweep, "record": run_record}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    import torch

    dist = _dist()
    cuda = str(job["device"]).startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = _dt.timedelta(seconds=float(job.get("pg_timeout_s", 300)))
    if cuda:
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo", timeout=timeout)
    global _HOST_GROUP
    _HOST_GROUP = dist.new_group(backend="gloo") if cuda else None  # every rank creates it, in the same order
    rank = dist.get_rank()
    device = f"cuda:{local}" if cuda else "cpu"
    try:
        result = {"ok": True, "rank": rank, "world_size": dist.get_world_size(),
                  **MODES[job["mode"]](job, device, rank)}
    except Exception as exc:  # reported by the launcher in one line; the traceback stays in the file
        result = {"ok": False, "rank": rank, "error": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()}
    Path(job["out"], f"result.rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    if result["ok"]:
        dist.destroy_process_group()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
