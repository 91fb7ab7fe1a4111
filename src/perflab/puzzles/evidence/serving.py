"""Serving evidence (tools = ["serving"]): a request stream served end to end, per request and per forward.

The variants of a serving puzzle keep a serving engine in their state (`state["engine"]`,
perflab/workloads/serving.py). Recording serves the stream once more per variant with the engine timed
(CUDA events at the end of every forward pass, read after the step) and writes

- `serving.json` (schema perflab.serving/1): per variant the engine's log (each forward's kind, live rows,
  prefill tokens, waiting requests, end time; each request's arrival and token forwards) and its summary
  (analysis/engines/serving.py: throughput, TTFT / TPOT / latency percentiles, padded decode rows; with
  analysis/engines/serving_stalls.py: ITL percentiles, stalls and the prefill tokens in them, step time against prefill
  tokens); `analytic` (a burst with whole prefills): the static and continuous schedules' cost in forward
  passes from the output lengths alone;
- `serving.png`: batch occupancy over time, the TTFT, per-token latency and decode-gap distributions, latency
  against throughput, and step time against the prompt tokens it prefilled (serving_plot.py).

The fix check: after the speed-up (or, with `[check] metric = "itl_p99_ms"`, the ITL p99 of slow over fix, timed
pass against pass, whose interval's low end must clear `[check] reduction`), the serving doctor on the fix's own
engine log (doctor/serving.py) must no longer hold the planted finding as high or medium: the cause gone, not
only the time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.engine import checker, runner
from perflab.puzzles.engine.kinds import Checking, Kind, Recording, register
from perflab.puzzles.engine.spec import Puzzle, display_path

FILE = "serving.json"
PLOT = "serving.png"
SERVING_METRICS = ("itl_p99_ms",)    # [check] metric: lower is better, judged as slow / fix against `reduction`
BLOCKING = ("high", "medium")


def engine_of(state: Any, source: Path) -> Any:
    engine = state.get("engine") if isinstance(state, dict) else None
    if engine is None or not callable(getattr(engine, "log", None)):
        raise PerflabError(f"{display_path(source)}: setup() must keep the serving engine under state['engine'] "
                           "(its log is the evidence)")
    return engine


def serve_timed(module: Any, state: Any, source: Path, warmup: bool = True) -> dict[str, Any]:
    """One warm-up pass of the stream, then one with the engine timed: the engine's log."""
    engine = engine_of(state, source)
    if warmup:
        module.step(state)
    engine.timed = True
    try:
        module.step(state)
        return engine.log()
    finally:
        engine.timed = False


def record_serving(puzzle: Puzzle, device: str, out_dir: Path, seed: int = 0) -> dict[str, Any]:
    """serving.json's content: both variants served and timed on `device`."""
    from perflab.analysis.engines import serving

    variants: dict[str, Any] = {}
    for variant in ("slow", "solution"):
        source = puzzle.file(variant)
        module = runner.load_module(source)
        state = module.setup(device, seed)
        log = serve_timed(module, state, source)
        variants[variant] = {"summary": summary(log), "log": log}
        del state
        runner.synchronize(device)
    log = variants["slow"]["log"]
    burst = all(f < 0 for f in log.get("arrival_forward") or [-1])
    doc = {"schema": serving.SCHEMA, "puzzle": puzzle.id, "device": device,
           "arrivals": "all requests wait at time 0 (a burst); times are ms from then" if burst else
                       "each request arrives after the forward arrival_forward names; times are ms from the start",
           "variants": variants}
    if burst and not log.get("chunk"):
        doc["analytic"] = serving.forward_counts(log["lengths"], log["slots"])
    return doc


def summary(log: dict[str, Any]) -> dict[str, Any]:
    """analysis/engines/serving.py's summary and the decode stalls' numbers (analysis/engines/serving_stalls.py), flat."""
    from perflab.analysis.engines import serving, serving_stalls

    stalls = serving_stalls.stalls(serving_stalls.from_engine_log(log))
    steps = stalls.pop("steps", {})
    nested = {"forward": steps.pop("forward_vs_prefill_tokens", None), "gap": stalls.pop("gap_vs_prefill_tokens", None),
              "worst_gap": stalls.pop("worst_gap", None)}
    flat = {k: v for k, v in {**stalls, **steps}.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for prefix, numbers in nested.items():
        flat.update({f"{prefix}_{k}": v for k, v in (numbers or {}).items()})
    return {**serving.summary(log), **{k: v for k, v in flat.items() if k not in ("requests", "source")}}


def doctor_evidence(puzzle: Puzzle, log: dict[str, Any], found: list[str]) -> checker.Evidence:
    """The serving doctor on one engine log: the planted finding must not stand (high or medium)."""
    from perflab.analysis.engines.serving_stalls import from_engine_log
    from perflab.doctor.serving import report

    rep = report(from_engine_log(log), {"kind": "serving", "path": ""})
    still = [f for f in rep.findings if f.id == puzzle.check.planted and f.severity in BLOCKING]
    return checker.Evidence(ok=not still, planted=puzzle.check.planted, what=WHAT,
                            found=found + [f"{f.id} ({f.severity}): {f.summary}" for f in rep.findings])


WHAT = "the serving doctor on the fix's own engine log (serving.json's evidence)"


def fix_evidence(chk: Checking, trace_evidence: checker.Evidence | None, log: dict[str, Any] | None = None
                 ) -> checker.Evidence:
    """The serving doctor on the fix's own timed engine log: the planted finding must be gone."""
    found = list(trace_evidence.found) if trace_evidence else []
    try:
        log = log or serve_timed(chk.fix, chk.fix_state, chk.fix_path)
    except PerflabError as exc:
        return checker.Evidence(ok=False, planted=chk.puzzle.check.planted, found=found + [str(exc)], what=WHAT)
    return doctor_evidence(chk.puzzle, log, found)


def measure_metric(chk: Checking, judge: bool = True) -> checker.CheckResult:
    """[check] metric in SERVING_METRICS: slow and fix each serve the stream timed, pass after pass (interleaved,
    after one warm-up each); the metric's slow / fix ratio with its bootstrap interval against `reduction`, then
    (`judge`) the doctor on the fix's last log."""
    from perflab.analysis.engines import serving_stalls
    from perflab.puzzles.engine import stats

    puzzle, result, metric = chk.puzzle, chk.result, chk.puzzle.check.metric

    def value(log: dict[str, Any]) -> float:
        return float(serving_stalls.stalls(serving_stalls.from_engine_log(log))[metric])

    chk.phase("serving")
    slow: list[float] = []
    mine: list[float] = []
    log: dict[str, Any] = {}
    try:
        for i in range(chk.reps):
            slow.append(value(serve_timed(chk.ref, chk.ref_state, puzzle.file("slow"), warmup=i == 0)))
            log = serve_timed(chk.fix, chk.fix_state, chk.fix_path, warmup=i == 0)
            mine.append(value(log))
    except PerflabError:
        raise
    except Exception as exc:  # the learner's code: one line
        result.correctness = checker.Correctness(False, chk.seed, f"crashed while serving timed: "
                                                                  f"{type(exc).__name__}: {exc}")
        return result
    result.slow, result.fixed = stats.summary(slow), stats.summary(mine)
    verdict = stats.speedup_verdict(slow, mine, puzzle.check.reduction)
    result.speed = stats.SpeedupResult(**{**verdict.to_dict(), "statistic": f"median {metric}, slow / fix"})
    if judge:
        result.evidence = fix_evidence(chk, None, log)
    return result


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

    def measure(self, chk: Checking) -> checker.CheckResult | None:
        return measure_metric(chk) if chk.puzzle.check.metric in SERVING_METRICS else None

    def confirm(self, chk: Checking) -> checker.Evidence | None:
        if chk.puzzle.check.metric in SERVING_METRICS:
            return None   # measure_metric judged it on the fix's own log already
        return fix_evidence(chk, chk.result.evidence if chk.result else None)

    def replay(self, ev: Any, variant: str = "slow") -> dict[str, Any]:
        doc = ev.require_json(FILE, "variants", "serving log (serving.json)")
        if variant not in doc["variants"]:
            raise PerflabError(f"serving.json has no {variant!r} run (it has {', '.join(doc['variants'])})")
        return doc["variants"][variant]
