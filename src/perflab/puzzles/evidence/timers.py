"""Timer evidence for puzzles with a [timers] table: each part of a step timed three ways.

The workload defines the parts as functions of the state (``[timers] parts = ["encode", ...]``,
called in that order make one step). Each recorded variant is timed over `steps` steps with

- ``host``: time.perf_counter() around each part and nothing else: what a script that "times" GPU
  code without synchronizing measures (the time to enqueue the part, plus any wait inside it);
- ``host_sync``: the same clock with torch.cuda.synchronize() before every reading: honest, and it
  drains the queue between parts;
- ``events``: CUDA events recorded on the current stream between the parts, read after one
  synchronize at the end of the step: the GPU's own clock, the queue left as it is.

Written as ``<variant>.timers.json`` (schema perflab.timers/1): per method, per part, the median and
the samples in ms, and the same for the whole step. On the CPU only the host clocks exist.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError
from perflab.puzzles.engine import runner
from perflab.puzzles.engine.kinds import Kind, Recording, register
from perflab.puzzles.engine.spec import Puzzle

SCHEMA = "perflab.timers/1"
METHODS = ("host", "host_sync", "events")


def timers_file(folder: Path, variant: str) -> Path:
    return Path(folder) / f"{variant}.timers.json"


def uses_timers(puzzle: Puzzle) -> bool:
    return bool(getattr(puzzle, "timers", None) and puzzle.timers.parts)


def part_functions(module: Any, names: tuple[str, ...], source: Path) -> list[tuple[str, Callable]]:
    out = []
    for name in names:
        fn = getattr(module, name, None)
        if not callable(fn):
            raise PerflabError(f"{source} has no part function {name}(state) named in [timers] parts")
        out.append((name, fn))
    return out


def _stats(samples: list[float]) -> dict[str, Any]:
    return {"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples),
            "samples_ms": [round(s, 6) for s in samples]}


def measure(parts: list[tuple[str, Callable]], state: Any, device: str, *, steps: int = 20,
            warmup: int = 3) -> dict[str, Any]:
    """The three timings of `parts` run in order on `state` (see the module docstring)."""
    cuda = device.startswith("cuda")
    torch = runner._torch()
    sync = (lambda: torch.cuda.synchronize()) if cuda else (lambda: None)
    names = [n for n, _ in parts]
    ctx = torch.no_grad() if torch is not None else _nullcontext()
    with ctx:
        for _ in range(warmup):
            for _, fn in parts:
                fn(state)
        sync()
        host = {n: [] for n in names}
        for _ in range(steps):                       # the naive loop: no synchronize anywhere
            for n, fn in parts:
                t0 = time.perf_counter()
                fn(state)
                host[n].append((time.perf_counter() - t0) * 1e3)
        sync()
        honest = {n: [] for n in names}
        for _ in range(steps):
            for n, fn in parts:
                sync()
                t0 = time.perf_counter()
                fn(state)
                sync()
                honest[n].append((time.perf_counter() - t0) * 1e3)
        events: dict[str, list[float]] | None = None
        if cuda:
            events = {n: [] for n in names}
            for _ in range(steps):
                marks = [torch.cuda.Event(enable_timing=True) for _ in range(len(parts) + 1)]
                marks[0].record()
                for i, (_, fn) in enumerate(parts):
                    fn(state)
                    marks[i + 1].record()
                marks[-1].synchronize()
                for i, n in enumerate(names):
                    events[n].append(marks[i].elapsed_time(marks[i + 1]))
    methods = {"host": host, "host_sync": honest}
    if events is not None:
        methods["events"] = events
    out: dict[str, Any] = {"schema": SCHEMA, "device": device, "steps": steps, "parts": names, "methods": {}}
    for method, per_part in methods.items():
        step = [sum(per_part[n][i] for n in names) for i in range(steps)]
        out["methods"][method] = {"parts": {n: _stats(v) for n, v in per_part.items()}, "step": _stats(step)}
    return out


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def record_variant(puzzle: Puzzle, source: Path, out_dir: Path, variant: str, *, device: str,
                   seed: int = 0) -> Path:
    """Time the variant's parts and write <variant>.timers.json into out_dir."""
    module = runner.load_module(source)
    parts = part_functions(module, puzzle.timers.parts, source)
    state = module.setup(device, seed)
    data = measure(parts, state, device, steps=puzzle.timers.steps, warmup=puzzle.timers.warmup)
    data["variant"] = variant
    path = timers_file(out_dir, variant)
    runner.write_json(path, data)
    return path


@register
class Timers(Kind):
    """[timers] parts: each variant's `<variant>.timers.json`."""
    name = "timers"

    def applies(self, puzzle: Any) -> bool:
        return uses_timers(puzzle)

    def record(self, rec: Recording) -> list[Path]:
        return rec.per_variant(record_variant, "timers")

    def replay(self, ev: Any, variant: str = "slow") -> dict[str, Any]:
        name = timers_file(ev.folder, variant).name
        return ev.require_json(name, "methods", name)
