"""Multi-GPU puzzles (`[requirements] gpus = N > 1`): run, record, replay and check them under torchrun.

A variant runs as N processes started by PyTorch's own launcher (`python -m torch.distributed.run`,
built by toolkit.scaling.torchrun_command: `--standalone` on one node; several nodes through the
torchrun options in $PERFLAB_TORCHRUN, e.g. "--nnodes 2 --rdzv-endpoint host:29500"), each running
perflab.puzzles.evidence.rank_worker: NCCL on GPUs (one per local rank), gloo on the CPU. The workload
files keep the single-GPU interface (`setup(device, seed)`, `step(state)`); inside them
torch.distributed is initialized, so they read their rank and world size from it.

A recording holds one trace per rank: `<variant>.ranks/rank{R}.trace.json.gz` (what `perflab doctor
FOLDER --rank R` reads); measurements are the job's step times, each sample the slowest rank's.
The fix check is the single-GPU checker's, rank by rank: outputs compared on every rank, then
guard.time_guarded on every rank (fresh inputs before every timed repetition, each rank's own where the
workload's refill draws them per rank; outputs compared after every one; each decision agreed by all ranks,
so one rank's mismatch stops them all), speed-up of the slowest rank's step time (bootstrap interval, same
bar), a time under any rank's speed of light refused, then the fix re-profiled on every rank and the planted
finding must be gone from the doctor's report of every rank.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.paths import child_env
from perflab.puzzles.engine.kinds import Checking, Kind, Recording, register
from perflab.puzzles.engine.replay import ranks_dir
from perflab.puzzles.engine.spec import Puzzle, display_path
from perflab.toolkit.scaling import ENV_TORCHRUN, multi_node, torchrun_args  # noqa: F401 (ENV_TORCHRUN: the API)

ENV_TIMEOUT = "PERFLAB_DIST_TIMEOUT"    # seconds one torchrun job may take (default 600)
ENV_LOGS = "PERFLAB_DIST_LOGS"          # a folder to keep each job's torchrun log and rank results in


def is_multi(puzzle: Puzzle) -> bool:
    return puzzle.requirements.gpus > 1


def nproc_per_node(world: int, args: list[str] | None = None) -> int:
    """Processes on this node: the world size on one node, world / nnodes (rounded up) on several."""
    args = torchrun_args() if args is None else args
    nnodes = 1
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--nnodes=") else (args[i + 1] if a == "--nnodes" and
                                                                       i + 1 < len(args) else None)
        if value is not None:
            try:
                nnodes = max(int(value.split(":")[-1]), 1)
            except ValueError:
                raise PerflabError(f"${ENV_TORCHRUN}: --nnodes {value!r} is not a number") from None
    return max(math.ceil(world / nnodes), 1)


def launch(job: dict[str, Any], folder: Path, world: int, *, timeout: float | None = None) -> dict[str, Any]:
    """Run the job on `world` ranks under torchrun; rank 0's result (raises PerflabError if a rank failed)."""
    from perflab.toolkit.scaling import torchrun_command

    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("result.rank*.json"):
        old.unlink()
    job = {**job, "out": str(folder)}
    job_file = folder / f"job.{job['mode']}.json"
    job_file.write_text(json.dumps(job, indent=1), encoding="utf-8")
    extra = torchrun_args()
    cmd = torchrun_command(["-m", "perflab.puzzles.evidence.rank_worker", str(job_file)], nproc_per_node(world, extra), extra)
    timeout = timeout or float(os.environ.get(ENV_TIMEOUT, "600"))
    log = folder / f"torchrun.{job['mode']}.log"
    env = child_env(PYTHONUNBUFFERED="1")  # the workers import this perflab, not another one
    with log.open("w", encoding="utf-8") as fh:
        code = _run_group(cmd, fh, env, timeout)
    keep = os.environ.get(ENV_LOGS)
    if keep:  # the launcher's log and every rank's result (tracebacks included) kept for a post-mortem
        dest = Path(keep) / f"{folder.parent.name}-{folder.name.lstrip('.')}"
        dest.mkdir(parents=True, exist_ok=True)
        for f in [log, *folder.glob("result.rank*.json")]:
            shutil.copyfile(f, dest / f.name)
    results = {}
    for p in sorted(folder.glob("result.rank*.json")):
        r = json.loads(p.read_text(encoding="utf-8"))
        results[int(r["rank"])] = r
    failed = [r for r in results.values() if not r.get("ok")]
    if failed:
        raise PerflabError(f"rank {failed[0]['rank']} failed: {failed[0]['error']} (log: {display_path(log)})")
    if code != 0 or 0 not in results:
        tail = " | ".join(log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:])
        why = "timed out" if code == 124 else f"exited {code}"
        raise PerflabError(f"torchrun {why} on {world} ranks ({tail[-300:]}); log: {display_path(log)}")
    return results[0]


def _run_group(cmd: list[str], log: Any, env: dict[str, str], timeout: float) -> int:
    """Run torchrun in its own process group; past the timeout, stop it and its workers (124)."""
    from perflab.process_group import TERMINATE_FIRST, run_group

    return run_group(cmd, timeout=timeout, steps=TERMINATE_FIRST, stdout=log, stderr=subprocess.STDOUT, env=env)[0]


def _job(puzzle: Puzzle, device: str, **fields: Any) -> dict[str, Any]:
    return {"puzzle": str(puzzle.source.resolve()), "device": device, "with_stack": puzzle.profile.with_stack,
            **fields}


def run_variant(puzzle: Puzzle, source: Path, variant: str, out_dir: Path, *, device: str, command: str,
                steps: int | None = None, seed: int = 0) -> Any:
    """runner.run_variant for N ranks: <variant>.ranks/rank{R}.trace.json.gz, manifest.json, measurements.json."""
    from perflab.puzzles.engine import runner, stats

    n = steps or puzzle.profile.steps
    traces = ranks_dir(out_dir, variant)
    if traces.is_dir():
        shutil.rmtree(traces)
    traces.mkdir(parents=True)
    res = launch(_job(puzzle, device, mode="profile", file=str(Path(source).resolve()), seed=seed,
                      warmup=puzzle.profile.warmup, steps=n, traces=str(traces)),
                 out_dir / f".{variant}-job", puzzle.requirements.gpus)
    measurements = {variant: {**stats.summary(res["samples_ms"]), "ranks": res["world_size"],
                              "statistic": "slowest rank per sample"}}
    manifest = environment(command, device, res["world_size"])
    runner.write_json(out_dir / "manifest.json", manifest)
    runner.write_json(out_dir / "measurements.json", measurements)
    return runner.RunResult(out_dir, traces, device, manifest, measurements)


def environment(command: str, device: str, world: int) -> dict[str, Any]:
    """runner.environment plus the job's shape: ranks, GPUs per node, NCCL version and settings."""
    from perflab.puzzles.engine import runner

    env = runner.environment(command, device)
    env.update(world_size=world, nproc_per_node=nproc_per_node(world), torchrun=torchrun_args(),
               backend="nccl" if device.startswith("cuda") else "gloo",
               nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"))
    if device.startswith("cuda"):
        try:
            import torch

            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            env["gpus_visible"] = torch.cuda.device_count()
        except (ImportError, AttributeError, RuntimeError, TypeError):
            env["nccl"] = None
    return env


def diagnose_ranks(folder: Path) -> list[Any]:
    """The doctor's report of every rank of a folder of per-rank traces (each with all ranks loaded)."""
    from perflab.doctor import diagnose_trace
    from perflab.trace.kineto import load_ranks

    traces = load_ranks(folder)
    return [diagnose_trace(traces, rank=t.rank) for t in traces]


def planted_evidence(puzzle: Puzzle, folder: Path) -> Any:
    """checker.planted_evidence over every rank: the planted finding standing on no rank."""
    from perflab.puzzles.engine.checker import Evidence, planted_medium, planted_standing

    reports = diagnose_ranks(folder)
    found, still, medium = [], [], False
    for rep in reports:
        rank = rep.source.get("rank")
        found += [f"rank {rank}: {f.id} ({f.severity})" for f in rep.findings]
        still += planted_standing(rep.findings, puzzle.check.planted)
        medium = medium or planted_medium(rep.findings, puzzle.check.planted)
    return Evidence(ok=not still, planted=puzzle.check.planted, found=found, trace=str(folder),
                    residue=not still and medium)


def check(puzzle: Puzzle, fix_path: Path, out_dir: Path, *, device: str, seed: int | None = None,
          reps: int | None = None, on_phase: Any = None) -> Any:
    """checker.check for N ranks (see the module docstring); returns a checker.CheckResult."""
    import secrets

    seed = secrets.randbelow(2**31 - 1) if seed is None else seed
    if on_phase:
        on_phase(f"correctness, timing and profiling on {puzzle.requirements.gpus} ranks")
    traces = ranks_dir(out_dir, "mine")
    if traces.is_dir():
        shutil.rmtree(traces)
    traces.mkdir(parents=True)
    res = launch(_job(puzzle, device, mode="check", slow=str(puzzle.file("slow").resolve()),
                      fix=str(Path(fix_path).resolve()), seed=seed, reps=reps or puzzle.check.reps,
                      steps=puzzle.profile.steps, traces=str(traces)),
                 out_dir / ".check-job", puzzle.requirements.gpus)
    if on_phase:
        on_phase("doctor on every rank")
    return check_result(puzzle, fix_path, device, seed, res, traces)


def check_result(puzzle: Puzzle, fix_path: Path, device: str, seed: int, res: dict[str, Any], traces: Path) -> Any:
    """A checker.CheckResult from one rank-0 check result of the worker and the fix's per-rank traces."""
    from perflab.puzzles.engine import checker, stats

    result = checker.CheckResult(puzzle.id, str(fix_path), device,
                                 checker.Correctness(bool(res["correct"]), seed, res.get("message", "")))
    if not result.correctness.ok:
        return result
    slow, fast = res["slow_ms"], res["fixed_ms"]
    result.slow, result.fixed = stats.summary(slow), stats.summary(fast)
    result.speed = stats.speedup_verdict(slow, fast, puzzle.check.speedup)
    result.evidence = planted_evidence(puzzle, traces)
    return result


def record_all(puzzle: Puzzle, workdir: Path, device: str, seed: int | None = None) -> tuple[dict, Any]:
    """recording.record's profiling and verification in one torchrun launch (one NCCL start-up, not four).

    Traces land where the single-GPU path puts them (workdir/<variant>/<variant>.ranks/,
    workdir/check-<fix>/mine.ranks/). Returns (profiled summaries, recording.Verification)."""
    import secrets

    from perflab.puzzles.engine import recording, stats

    seed = secrets.randbelow(2**31 - 1) if seed is None else seed
    workdir = Path(workdir)
    profiles, checks = {}, {}
    for variant in ("slow", "solution"):
        traces = ranks_dir(workdir / variant, variant)
        traces.mkdir(parents=True, exist_ok=True)
        profiles[variant] = {"file": str(puzzle.file(variant).resolve()), "traces": str(traces)}
    for name in ("solution", "starter"):
        traces = ranks_dir(workdir / f"check-{name}", "mine")
        traces.mkdir(parents=True, exist_ok=True)
        checks[name] = {"fix": str(puzzle.file(name).resolve()), "variant": name, "traces": str(traces)}
    res = launch(_job(puzzle, device, mode="record", seed=seed, warmup=puzzle.profile.warmup,
                      steps=puzzle.profile.steps, reps=puzzle.check.reps, slow=str(puzzle.file("slow").resolve()),
                      profiles=profiles, checks=checks), workdir / ".record-job", puzzle.requirements.gpus)
    profiled = {v: {**{k: x for k, x in stats.summary(res[f"profile:{v}"]["samples_ms"]).items() if k != "samples_ms"},
                    "ranks": res["world_size"], "statistic": "slowest rank per sample"} for v in profiles}
    results = {name: check_result(puzzle, puzzle.file(name), device, seed, res[f"check:{name}"], Path(c["traces"]))
               for name, c in checks.items()}
    return profiled, recording.Verification(results["solution"], results["starter"])


# -- batch sweeps at 1 and N ranks (workloads that define forward, make_batch and SWEEP_BATCHES) --------------
def has_sweep(module: Any) -> bool:
    return all(callable(getattr(module, f, None)) for f in ("forward", "make_batch")) and \
        bool(getattr(module, "SWEEP_BATCHES", None))


def record_sweep(puzzle: Puzzle, workdir: Path, device: str, command: str) -> Path | None:
    """sweep.json (schema perflab.rank-sweep/1): the slow workload's batch sweep at 1 and N ranks, or None."""
    from perflab.puzzles.engine import runner
    from perflab.toolkit import batch_sweep

    module = runner.load_module(puzzle.file("slow"))
    if not has_sweep(module):
        return None
    batches = [int(b) for b in module.SWEEP_BATCHES]
    counts = sorted({1, puzzle.requirements.gpus})
    points = {}
    for n in counts:
        res = launch(_job(puzzle, device, mode="sweep", file=str(puzzle.file("slow").resolve()), batches=batches),
                     Path(workdir) / f".sweep-{n}", n)
        points[str(n)] = res["points"]
    doc = {"schema": SWEEP_SCHEMA, "puzzle": puzzle.id, "knee_fraction": batch_sweep.KNEE_FRACTION,
           "gpus": points, "manifest": environment(command, device, puzzle.requirements.gpus)}
    path = Path(workdir) / "sweep.json"
    runner.write_json(path, doc)
    try:
        plot_sweep(doc, Path(workdir) / "sweep.png")
    except PerflabError:
        pass
    return path


SWEEP_SCHEMA = "perflab.rank-sweep/1"


def sweep_speedup(doc: dict[str, Any], batch: int, n: int | None = None, field: str = "latency_ms") -> float:
    """How much faster N ranks serve one call of `batch` than 1 rank (ratio of the field, 1 over N)."""
    from perflab.toolkit import batch_sweep

    counts = sorted(int(k) for k in doc["gpus"])
    n = n or counts[-1]
    one = batch_sweep.point(doc["gpus"][str(counts[0])], batch)
    many = batch_sweep.point(doc["gpus"][str(n)], batch)
    return float(one[field] / many[field])


def plot_sweep(doc: dict[str, Any], path: Path) -> Path:
    """Latency per call and N-over-1 speed-up vs batch size, one line per rank count."""
    from perflab.report.plotting import pyplot

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    counts = sorted(int(k) for k in doc["gpus"])
    for n in counts:
        pts = sorted(doc["gpus"][str(n)], key=lambda p: p["batch"])
        ax1.plot([p["batch"] for p in pts], [p["latency_ms"] for p in pts], "o-", label=f"{n} GPU(s)")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("batch size")
    ax1.set_ylabel("latency per call (ms)")
    ax1.legend()
    ax1.set_title("latency vs batch size")
    if len(counts) > 1:
        batches = [p["batch"] for p in sorted(doc["gpus"][str(counts[0])], key=lambda p: p["batch"])]
        ax2.plot(batches, [sweep_speedup(doc, b) for b in batches], "s-", color="tab:green")
        ax2.axhline(1.0, color="gray", ls=":")
        ax2.axhline(float(counts[-1]), color="gray", ls="--")
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("batch size")
        ax2.set_ylabel(f"speed-up of {counts[-1]} GPUs over 1")
        ax2.set_title("tensor-parallel speed-up vs batch size")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@register
class MultiRank(Kind):
    """[requirements] gpus = N > 1: every variant on N ranks under torchrun, one trace per rank."""
    name = "multi-rank"
    priority = 50

    def applies(self, puzzle: Any) -> bool:
        return is_multi(puzzle)

    def run(self, puzzle: Any, source: Path, variant: str, out_dir: Path, *, device: str, command: str,
            steps: int | None, seed: int, on_step: Any) -> Any:
        return run_variant(puzzle, source, variant, out_dir, device=device, command=command, steps=steps, seed=seed)

    def verify(self, rec: Recording) -> Any:
        profiled, v = record_all(rec.puzzle, rec.workdir, rec.device, rec.seed)
        rec.profiled.update(profiled)
        return v

    def record(self, rec: Recording) -> list[Path]:
        path = record_sweep(rec.puzzle, rec.workdir, rec.device, rec.command)
        return [p for p in (path, path.with_suffix(".png")) if p.is_file()] if path else []

    def manifest(self, puzzle: Any, command: str, device: str) -> dict[str, Any]:
        return environment(command, device, puzzle.requirements.gpus)

    def check(self, chk: Checking) -> Any:
        return check(chk.puzzle, chk.fix_path, chk.out_dir, device=chk.device, seed=chk.seed, reps=chk.reps,
                     on_phase=chk.phase)

    def replay(self, ev: Any, variant: str = "slow") -> list[Any]:
        return ev.ranks(variant)
