"""Serving evidence (tools = ["serving"]): a request stream served end to end, per request and per forward.

The variants of a serving puzzle keep a serving engine in their state (`state["engine"]`,
perflab/workloads/serving.py). Recording serves the stream once more per variant with the engine timed
(CUDA events at the end of every forward pass, read after the step) and writes

- `serving.json` (schema perflab.serving/1): per variant the engine's log (each forward's kind, live rows,
  waiting requests, end time; each request's token forwards) and its summary (analysis/serving.py:
  throughput, TTFT / TPOT / latency percentiles, padded decode rows); `analytic`: the two schedules' cost
  in forward passes from the output lengths alone;
- `serving.png`: batch occupancy over time, the TTFT and per-token latency distributions, and latency
  against throughput, both variants on each panel (serving_plot.py).

The fix check: after the speed-up, the fix's own log must show its decode forwards full while requests
wait (padded rows at most MAX_PADDED_WHILE_WAITING_PCT of them): the cause gone, not only the time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.analysis import serving
from perflab.errors import PerflabError
from perflab.puzzles.engine import checker, runner
from perflab.puzzles.engine.kinds import Checking, Kind, Recording, register
from perflab.puzzles.engine.spec import Puzzle, display_path

FILE = "serving.json"
PLOT = "serving.png"
MAX_PADDED_WHILE_WAITING_PCT = 5.0


def engine_of(state: Any, source: Path) -> Any:
    engine = state.get("engine") if isinstance(state, dict) else None
    if engine is None or not callable(getattr(engine, "log", None)):
        raise PerflabError(f"{display_path(source)}: setup() must keep the serving engine under state['engine'] "
                           "(its log is the evidence)")
    return engine


def serve_timed(module: Any, state: Any, source: Path) -> dict[str, Any]:
    """One warm-up pass of the stream, then one with the engine timed: the engine's log."""
    engine = engine_of(state, source)
    module.step(state)
    engine.timed = True
    try:
        module.step(state)
        return engine.log()
    finally:
        engine.timed = False


def record_serving(puzzle: Puzzle, device: str, out_dir: Path, seed: int = 0) -> dict[str, Any]:
    """serving.json's content: both variants served and timed on `device`."""
    variants: dict[str, Any] = {}
    for variant in ("slow", "solution"):
        source = puzzle.file(variant)
        module = runner.load_module(source)
        state = module.setup(device, seed)
        log = serve_timed(module, state, source)
        variants[variant] = {"summary": serving.summary(log), "log": log}
        del state
        runner.synchronize(device)
    log = variants["slow"]["log"]
    return {"schema": serving.SCHEMA, "puzzle": puzzle.id, "device": device,
            "arrivals": "all requests wait at time 0 (a burst); times are ms from then",
            "analytic": serving.forward_counts(log["lengths"], log["slots"]), "variants": variants}


def fix_evidence(chk: Checking, trace_evidence: checker.Evidence | None) -> checker.Evidence:
    """The fix's own serving log: its decode forwards must run full while requests wait."""
    planted = chk.puzzle.check.planted
    found = list(trace_evidence.found) if trace_evidence else []
    what = "decode rows computing padding while requests waited (the fix's serving log)"
    try:
        engine = engine_of(chk.fix_state, chk.fix_path)
        chk.fix.step(chk.fix_state)
        use = serving.batch_use(engine.log())
    except PerflabError as exc:
        return checker.Evidence(ok=False, planted=planted, found=found + [str(exc)], what=what)
    pct = use["padded_while_waiting_pct"]
    ok = pct <= MAX_PADDED_WHILE_WAITING_PCT
    return checker.Evidence(ok=ok, planted=planted, what=what,
                            found=found + [f"padded decode rows while requests waited: {pct:.1f} % "
                                           f"(at most {MAX_PADDED_WHILE_WAITING_PCT:g} %), "
                                           f"{use['mean_live_rows']:.1f} of {use['slots']} rows live per decode"])


@register
class Serving(Kind):
    """tools = ["serving"]: serving.json and serving.png; the fix's batches must run full."""
    name = "serving"
    tools = ("serving",)

    def record(self, rec: Recording) -> list[Path]:
        from perflab.puzzles.evidence.serving_plot import plot

        folder = rec.folder("serving")
        doc = record_serving(rec.puzzle, rec.device, folder)
        doc["manifest"] = runner.environment(rec.command, rec.device)
        runner.write_json(folder / FILE, doc)
        gpu = doc["manifest"].get("gpu") or rec.device
        plot(doc, folder / PLOT, title=f"{rec.puzzle.id} on {gpu}")
        return [folder / FILE, folder / PLOT]

    def confirm(self, chk: Checking) -> checker.Evidence | None:
        return fix_evidence(chk, chk.result.evidence if chk.result else None)

    def replay(self, ev: Any, variant: str = "slow") -> dict[str, Any]:
        doc = ev.require_json(FILE, "variants", "serving log (serving.json)")
        if variant not in doc["variants"]:
            raise PerflabError(f"serving.json has no {variant!r} run (it has {', '.join(doc['variants'])})")
        return doc["variants"][variant]
