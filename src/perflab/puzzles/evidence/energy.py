"""Energy evidence for puzzles with tools = ["nvml"]: joules per call and per inference, FLOP per joule.

Each recorded variant is built and run under perflab.toolkit.energy.energy (the GPU's energy counter,
read after a synchronize at both ends of a run of at least [energy] min_time_s) while a GPUMonitor
samples power, utilization and clocks every [energy] interval_s. Written as ``<variant>.energy.json``
(schema perflab.energy/1): the EnergyResult, joules per inference (``items_per_call`` inferences per
call), GFLOP/J, and the monitor's summary and samples (the NVML data itself).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.puzzles.engine import runner
from perflab.puzzles.engine.kinds import Kind, Recording, register
from perflab.puzzles.engine.spec import Puzzle

SCHEMA = "perflab.energy/1"


def energy_file(folder: Path, variant: str) -> Path:
    return Path(folder) / f"{variant}.energy.json"


def derived(result: dict[str, Any], items_per_call: int) -> dict[str, Any]:
    """Per-inference and per-joule figures from an EnergyResult dict."""
    j = result["joules_per_call"]
    flops = result.get("flops_per_call")
    return {"joules_per_item": j / items_per_call, "millijoules_per_item": 1e3 * j / items_per_call,
            "gflop_per_joule": flops / j / 1e9 if flops and j > 0 else None,
            "tflops": flops / result["seconds_per_call"] / 1e12 if flops and result["seconds_per_call"] > 0 else None,
            "ms_per_call": 1e3 * result["seconds_per_call"]}


def measure(module: Any, state: Any, *, min_time_s: float, interval_s: float, items_per_call: int) -> dict[str, Any]:
    from perflab.toolkit.energy import energy
    from perflab.toolkit.monitor import GPUMonitor, _finite

    with GPUMonitor(interval=interval_s) as mon:
        result = energy(lambda: module.step(state), repeats=10, warmup=3, min_time_s=min_time_s).to_dict()
    return {"schema": SCHEMA, "device": mon.name, "power_source": mon.power_source,
            "items_per_call": items_per_call, "energy": result, **derived(result, items_per_call),
            "monitor": {"interval_s": interval_s, "summary": _finite(mon.summary()), "samples": mon.records()}}


def record_variant(puzzle: Puzzle, source: Path, out_dir: Path, variant: str, *, device: str, seed: int = 0) -> Path:
    """Measure the variant's energy per call and write <variant>.energy.json into out_dir."""
    module = runner.load_module(source)
    state = module.setup(device, seed)
    cfg = puzzle.energy
    data = measure(module, state, min_time_s=cfg.min_time_s, interval_s=cfg.interval_s,
                   items_per_call=cfg.items_per_call)
    data["variant"] = variant
    path = energy_file(out_dir, variant)
    runner.write_json(path, data)
    del state
    return path


@register
class Energy(Kind):
    """tools = ["nvml"]: each variant's `<variant>.energy.json`, on a GPU only."""
    name = "energy"
    tools = ("nvml",)

    def record(self, rec: Recording) -> list[Path]:
        return rec.per_variant(record_variant, "energy") if rec.device.startswith("cuda") else []

    def replay(self, ev: Any, variant: str = "slow") -> dict[str, Any]:
        name = energy_file(ev.folder, variant).name
        return ev.require_json(name, "energy", name)
