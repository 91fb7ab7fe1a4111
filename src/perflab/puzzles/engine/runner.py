"""Run a puzzle variant live: load its file, profile it under torch.profiler, write the artifacts.

torch is imported inside functions only; `live_device` answers None where there is no torch.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
import itertools
import json
import platform
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from perflab.errors import NeedsGPU, PerflabError
from perflab.puzzles.engine import kinds, replay
from perflab.puzzles.engine.spec import Puzzle, display_path
from perflab.toolkit.scaling import multi_node

if TYPE_CHECKING:  # numpy only where a run is timed
    from perflab.puzzles.engine import stats

OnStep = Callable[[int, int], None]
_module_ids = itertools.count()


@dataclass
class RunResult:
    folder: Path
    trace: Path
    device: str
    manifest: dict[str, Any]
    measurements: dict[str, Any]


@dataclass
class Outcome:
    """What `perflab run` shows: the evidence of a live run or of the shipped recording."""

    evidence: replay.Evidence
    mode: str                       # live | replay
    label: str                      # LIVE run on ... | REPLAY of a recording made on ...
    manifest: dict[str, Any]
    measurements: dict[str, Any]
    folder: Path | None = None      # the new run folder (live only)
    why_replay: str = ""            # why a live run was not possible (replay only, when not asked for)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def cuda_available() -> bool:
    torch = _torch()
    return bool(torch is not None and torch.cuda.is_available())


def live_device(puzzle: Puzzle) -> str | None:
    """cuda when there is a GPU; cpu for a CPU-capable puzzle without one; None when it cannot run here."""
    if cuda_available():
        return "cuda"
    if _torch() is not None and not puzzle.requirements.gpu:
        return "cpu"
    return None


def why_not_live() -> str:
    return "torch is not installed" if _torch() is None else "torch sees no CUDA GPU"


def require_device(puzzle: Puzzle, what: str) -> str:
    device = live_device(puzzle)
    if device is None:
        need = "a CUDA GPU" if puzzle.requirements.gpu else "torch"
        raise NeedsGPU(f"{what} {puzzle.id} needs {need} ({why_not_live()}); without it, use "
                       f"`perflab run {puzzle.id} --replay` and `perflab answer {puzzle.id}`")
    check_requirements(puzzle, device)
    return device


def check_requirements(puzzle: Puzzle, device: str) -> None:
    req = puzzle.requirements
    missing = [p for p in req.packages if importlib.util.find_spec(p) is None]
    if missing:
        raise PerflabError(f"{puzzle.id} needs the package(s) {', '.join(missing)}: pip install them")
    if not device.startswith("cuda"):
        return
    torch = _torch()
    if req.min_cc:
        have = torch.cuda.get_device_capability(0)
        need = tuple(int(x) for x in req.min_cc.split("."))
        if have < need:
            raise NeedsGPU(f"{puzzle.id} needs compute capability >= {req.min_cc}; this GPU has {have[0]}.{have[1]}")
    if torch.cuda.device_count() < req.gpus and not multi_node():
        raise NeedsGPU(f"{puzzle.id} needs {req.gpus} GPUs; this machine has {torch.cuda.device_count()}")


def load_module(path: Path) -> ModuleType:
    """Import a workload file by path (each call a fresh module), checking the setup/step interface."""
    name = f"perflab_workload_{next(_module_ids)}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PerflabError(f"cannot import {display_path(path)}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the learner's file: report it in one line
        raise PerflabError(f"{display_path(path)} failed to import: {type(exc).__name__}: {exc}") from None
    for fn in ("setup", "step"):
        if not callable(getattr(module, fn, None)):
            raise PerflabError(f"{display_path(path)} has no {fn}() function (see docs/CONTRACTS.md)")
    return module


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        _torch().cuda.synchronize()


def sampler(step: Callable[[Any], Any], state: Any, device: str, inner: int = 1) -> stats.Sample:
    """A callable that runs `inner` steps and returns ms per step: CUDA events on a GPU, perf_counter on the CPU.

    The device is drained before each sample so no earlier work is counted, and again before the end
    event so work a step left on other streams is counted too (a step is done when all of it is);
    host-side stalls inside a step are part of its time.
    """
    if device.startswith("cuda"):
        torch = _torch()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def cuda_sample() -> float:
            torch.cuda.synchronize()
            start.record()
            for _ in range(inner):
                step(state)
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / inner

        return cuda_sample

    def cpu_sample() -> float:
        t0 = time.perf_counter()
        for _ in range(inner):
            step(state)
        return (time.perf_counter() - t0) * 1e3 / inner

    return cpu_sample


def profile_steps(module: ModuleType, state: Any, device: str, trace_path: Path, *, warmup: int, steps: int,
                  with_stack: bool = False, on_step: OnStep | None = None, profile_memory: bool = False) -> None:
    """Warm up unprofiled, then one profiler warm-up step and `steps` recorded ProfilerStep#N steps."""
    from torch.profiler import ProfilerActivity, profile, schedule

    total = warmup + 1 + steps
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_step:
            on_step(done, total)

    recorder, uninstall = _capture_recorder(device)
    try:
        for _ in range(warmup):   # a CUDA graph captured here is recorded, so its replays can be priced
            module.step(state)
            tick()
    finally:
        uninstall()
    synchronize(device)
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 record_shapes=True, with_stack=with_stack, profile_memory=profile_memory,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path))) as prof:
        for _ in range(1 + steps):
            module.step(state)
            prof.step()
            tick()
    if not trace_path.is_file():
        raise PerflabError(f"the profiler wrote no trace to {display_path(trace_path)}")
    if recorder is not None:
        recorder.merge_into(trace_path)


def _capture_recorder(device: str):
    """(recorder, uninstall): CUDA-graph captures during the warm-up, recorded (toolkit/capture_record.py)."""
    if not device.startswith("cuda"):
        return None, lambda: None
    import torch

    from perflab.toolkit.capture_record import CaptureRecorder, install_capture_recorder
    from perflab.toolkit.compile_watch import Hider

    recorder = CaptureRecorder(torch, busy=lambda: False)
    return recorder, install_capture_recorder(torch, recorder, Hider())


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(command: str, device: str = "cuda") -> dict[str, Any]:
    """The manifest of a recording: where, when and with what it was made."""
    from perflab import __version__

    torch = _torch()
    gpu = cc = None
    if torch is not None and device.startswith("cuda") and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        cc = "%d.%d" % torch.cuda.get_device_capability(0)
    return {"gpu": gpu, "cc": cc, "driver": driver_version() if gpu else None,
            "cuda": getattr(getattr(torch, "version", None), "cuda", None),
            "torch": getattr(torch, "__version__", None),
            "python": platform.python_version(), "perflab": __version__,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "command": command,
            "host": socket.gethostname(), "device": device}


def write_json(path: Path, data: dict[str, Any]) -> None:
    from perflab.outputs import write_output

    write_output(path, json.dumps(data, indent=2, sort_keys=False) + "\n", force=True, make_parents=True)


def run_variant(puzzle: Puzzle, source: Path, variant: str, out_dir: Path, *, device: str, command: str,
                steps: int | None = None, seed: int = 0, on_step: OnStep | None = None) -> RunResult:
    """Profile one variant into out_dir (manifest.json, its trace or traces, measurements.json): the first
    of the puzzle's evidence kinds that runs it (multi-rank's N processes, else the trace's one)."""
    return kinds.first(puzzle, "run", puzzle, source, variant, out_dir, device=device, command=command,
                       steps=steps, seed=seed, on_step=on_step)


def run_or_replay(puzzle: Puzzle, variant: str, *, force_replay: bool = False, steps: int | None = None,
                  fix: Path | None = None, on_step: OnStep | None = None) -> Outcome:
    """Profile the variant live into a new run folder when this machine can, else replay the recording."""
    from perflab.puzzles.engine import workspace

    device = None if force_replay else live_device(puzzle)
    if device is None:
        why = "" if force_replay else why_not_live()
        if variant == "mine":
            raise PerflabError(f"your fix only runs live and cannot here ({why or 'replay asked for'}); "
                               "the recording has the slow and solution variants")
        ev = replay.recording(puzzle)
        manifest = ev.manifest()
        return Outcome(ev, "replay", replay.replay_label(manifest), manifest,
                       replay.read_json(ev.folder / "measurements.json"), why_replay=why)
    check_requirements(puzzle, device)
    source = workspace.variant_source(puzzle, variant, fix)
    folder = workspace.new_run_dir(puzzle, variant)
    res = run_variant(puzzle, source, variant, folder, device=device, steps=steps, on_step=on_step,
                      command=f"perflab run {puzzle.id} --variant {variant}")
    return Outcome(replay.Evidence(folder, puzzle.id), "live", replay.live_label(res.manifest), res.manifest,
                   res.measurements, folder=folder)
