"""Record what a `triton.autotune` kernel chose, per shape, and what every alternative costs there.

A variant file of a puzzle with `tools = ["autotune"]` defines
    TUNED                      the autotuned kernel (a triton Autotuner)
    tuned_calls(state)         [(name, shape, run, launch_with)]: `run()` calls the kernel through the
                               autotuner on that shape (it tunes, or reuses a cached choice), and
                               `launch_with(meta)` runs the raw kernel with a config's meta-parameters.
`record_variant` writes `<variant>.autotune.json` (analysis/work/autotune.py reads it): the config the
autotuner used for each call and the median time of every config on that call's shape.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from perflab.puzzles.engine import runner
from perflab.puzzles.engine.kinds import Kind, Recording, register
from perflab.puzzles.engine.spec import Puzzle


def log_file(folder: Path, variant: str) -> Path:
    return Path(folder) / f"{variant}.autotune.json"


def config_dict(cfg: Any) -> dict[str, Any]:
    d = {k: v for k, v in cfg.kwargs.items()}
    d["num_warps"], d["num_stages"] = cfg.num_warps, cfg.num_stages
    return d


def _bench(fn: Any) -> float:
    import triton

    try:
        return float(triton.testing.do_bench(fn, warmup=10, rep=50))
    except Exception:  # noqa: BLE001 - a config that does not compile or fit: not a candidate
        return math.inf


def build_log(module: Any, state: Any, device_name: str = "", sms: int | None = None) -> dict[str, Any]:
    tuner = module.TUNED
    calls = []
    for name, shape, run, launch_with in module.tuned_calls(state):
        run()
        used = config_dict(tuner.best_config)
        timings = [{"config": config_dict(cfg), "ms": _bench(lambda cfg=cfg, go=launch_with: go(cfg.all_kwargs()))}
                   for cfg in tuner.configs]
        calls.append({"name": name, "shape": dict(shape), "config_used": used,
                      "timings": [t if math.isfinite(t["ms"]) else {**t, "ms": None} for t in timings]})
    return {"kernel": getattr(getattr(tuner, "base_fn", None), "__name__", "kernel"), "key_args": list(tuner.keys),
            "device": device_name, "sms": sms,
            "cache": [{"key": [str(k) for k in key], "config": config_dict(cfg)} for key, cfg in tuner.cache.items()],
            "calls": calls}


def record_variant(puzzle: Puzzle, source: Path, out_dir: Path, variant: str, *, device: str = "cuda",
                   seed: int = 0) -> Path:
    import torch

    module = runner.load_module(source)
    state = module.setup(device, seed)
    for _ in range(max(1, puzzle.profile.warmup)):
        module.step(state)
    runner.synchronize(device)
    props = torch.cuda.get_device_properties(0)
    log = build_log(module, state, props.name, props.multi_processor_count)
    out = log_file(out_dir, variant)
    runner.write_json(out, log)
    return out


@register
class Autotune(Kind):
    """tools = ["autotune"]: each variant's `<variant>.autotune.json`."""
    name = "autotune"
    tools = ("autotune",)

    def record(self, rec: Recording) -> list[Path]:
        return rec.per_variant(record_variant)

    def replay(self, ev: Any, variant: str = "slow") -> Path:
        return log_file(ev.folder, variant)
