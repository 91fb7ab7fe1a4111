"""What a profiler costs: the measured table of Python profilers, and the fix check of a puzzle whose
measure is a profiler's overhead ([check] metric = "overhead").

The table (`record_table`, written as `profilers.json` by recording): one host-heavy loop
(evidence/loop_target.py) timed without a profiler and under each profiler, in rounds:

- in-process (cProfile, yappi, pyinstrument, perflab's SIGPROF sampler): one process, the kinds take
  turns round after round, so the baseline is measured beside them;
- external (py-spy at several rates, blocking and not, Scalene): one process per profiler, started
  by the profiler, and a plain process as their baseline. The loop times itself (perf_counter, the
  device drained after each step), so start-up and the profiler's own post-processing do not count.

A row's repeats are the median ms per step of each round; its overhead is median(repeats) /
median(baseline repeats) - 1; spread is (max - min) / median of its repeats. A profiler that does
not run here gets a row with its status (the command's last error line), never a guess.

The check (`check_overhead`): after the usual correctness stage (the fix's step returns the same
outputs as the reference's, which include the hottest function its profiler saw), the reference's
`bare_step` (no profiler) and the fix's `step` are timed interleaved, in up to three rounds of `reps`
pairs while the interval straddles the bar (stats.time_until_decided); pass when the lower bound of
the 95 % bootstrap interval of bare/fix clears 1 / (1 + max_overhead_pct / 100). Then the fix's step
runs EVIDENCE_STEPS more times: its profile must name the reference's hottest function every time
(a sampler too sparse to see the hot spot reliably does not pass).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.paths import child_env
from perflab.puzzles.engine import checker, replay, runner, stats
from perflab.puzzles.engine.kinds import Checking, Kind, Recording, register

EVIDENCE_STEPS = 5
SAMPLE_TARGET_MS = 250.0   # one timing sample of the overhead check: about this long (several steps)
ROUNDS = 5
STEPS_PER_ROUND = 10
TABLE_FILE = "profilers.json"
INPROC = [("none", "none", "baseline (in-process)"), ("cprofile", "tracing", "cProfile"),
          ("yappi", "tracing", "yappi (cpu clock, builtins)"), ("pyinstrument", "sampling", "pyinstrument 1 ms"),
          ("sampler", "sampling", "signal sampler 1 ms (perflab.toolkit.sampling)")]
PYSPY = [("py-spy --rate 100", ["--rate", "100"]), ("py-spy --rate 1000", ["--rate", "1000"]),
         ("py-spy --rate 100 --nonblocking", ["--rate", "100", "--nonblocking"])]


# ---- the check ---------------------------------------------------------------------------------

def check_overhead(puzzle: Any, ref: Any, ref_state: Any, fix: Any, fix_state: Any, result: Any, *, device: str,
                   reps: int) -> Any:
    seed = result.correctness.seed
    if not callable(getattr(ref, "bare_step", None)):
        raise PerflabError(f"{puzzle.id}: workload.py has no bare_step() (the unprofiled step)")
    try:
        probe = runner.sampler(ref.bare_step, ref_state, device)
        step_ms = sorted(probe() for _ in range(checker.TIMING_WARMUP))[checker.TIMING_WARMUP // 2]
        inner = stats.inner_repeats(step_ms, SAMPLE_TARGET_MS)  # several steps per sample: less noise
        bare = runner.sampler(ref.bare_step, ref_state, device, inner)
        mine = runner.sampler(fix.step, fix_state, device, inner)
        for _ in range(checker.TIMING_WARMUP):
            bare()
            mine()
        bar = 1.0 / (1.0 + puzzle.check.max_overhead_pct / 100.0)
        slow, fast = stats.time_until_decided(bare, mine, reps, bar)  # a cost near the bar gets more samples
        expected = _hottest(ref.step(ref_state))
        seen = [_hottest(fix.step(fix_state)) for _ in range(EVIDENCE_STEPS)]
    except Exception as exc:  # the learner's code: one line
        result.correctness = checker.Correctness(False, seed, f"crashed while measuring overhead: "
                                                               f"{type(exc).__name__}: {exc}")
        return result
    result.slow = {**stats.summary(slow), "what": "bare_step: the step without a profiler"}
    result.fixed = {**stats.summary(fast), "what": "your step, profiled"}
    v = stats.speedup_verdict(slow, fast, bar)
    result.speed = stats.SpeedupResult(point=v.point, ci_low=v.ci_low, ci_high=v.ci_high, bar=bar, passed=v.passed,
                                       n=v.n, statistic="median (bare / profiled)", confidence=v.confidence)
    same = sum(1 for s in seen if s == expected)
    result.evidence = checker.Evidence(
        ok=same == len(seen), planted=puzzle.check.planted, what="the profile names the same hot spot every step",
        found=[f"profiled-step overhead {100.0 * (1.0 / v.point - 1.0):.1f} % (bar {puzzle.check.max_overhead_pct:g} %)",
               f"your profile named {expected or '?'} in {same}/{len(seen)} more steps"
               + ("" if same == len(seen) else f" (also: {', '.join(sorted({s for s in seen if s != expected}))})")])
    return result


def _hottest(out: Any) -> str:
    return str(out[-1]) if isinstance(out, (tuple, list)) and out else ""


# ---- the table ---------------------------------------------------------------------------------

def _target_cmd(target: Path, device: str, inproc: str, result: Path, script: bool = False) -> list[str]:
    loop = Path(__file__).with_name("loop_target.py")
    head = [str(loop)] if script else [sys.executable, "-m", "perflab.puzzles.evidence.loop_target"]
    args = [str(target), "--device", device, "--steps", str(STEPS_PER_ROUND), "--rounds", str(ROUNDS),
            "--inproc", inproc, "--result", str(result)]
    return head + (["---"] if script else []) + args


def _run(cmd: list[str], timeout: float) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env())
        tail = (p.stderr or p.stdout or "").strip().splitlines()
        return p.returncode, tail[-1] if tail else "", time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s", time.perf_counter() - t0
    except OSError as exc:
        return 127, str(exc), time.perf_counter() - t0


def _row(name: str, kind: str, process: str, rounds: list[float] | None, base: float | None, hottest: str = "",
         status: str = "ok", wall_s: float | None = None) -> dict[str, Any]:
    import statistics

    row: dict[str, Any] = {"profiler": name, "kind": kind, "process": process, "status": status}
    if rounds:
        med = statistics.median(rounds)
        row.update(median_ms=round(med, 4), rounds_ms=[round(r, 4) for r in rounds],
                   spread_pct=round(100.0 * (max(rounds) - min(rounds)) / med, 2), hottest=hottest)
        if base:
            row.update(factor=round(med / base, 4), overhead_pct=round(100.0 * (med / base - 1.0), 2))
    if wall_s is not None:
        row["process_wall_s"] = round(wall_s, 2)
    return row


def _available(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def record_table(target: Path, workdir: Path, device: str) -> Path:
    """Time the loop of `target` under every profiler that runs here; write workdir/profilers.json."""
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    kinds = [k for k in INPROC if k[0] in ("none", "cprofile", "sampler") or _available(k[0])]
    missing = [k for k in INPROC if k not in kinds]
    res = workdir / "inproc.json"
    code, err, wall = _run(_target_cmd(target, device, ",".join(k[0] for k in kinds), res), 150)
    data = json.loads(res.read_text()) if code == 0 and res.is_file() else {}
    base = data.get("median_ms", {}).get("none")
    for key, kind, name in kinds:
        rows.append(_row(name, kind, "in-process", data.get("rounds_ms", {}).get(key), base,
                         data.get("hottest", {}).get(key, ""), "ok" if data else f"failed: {err}"))
    rows += [_row(name, kind, "in-process", None, None, status=f"not installed ({key})") for key, kind, name in missing]

    def external(name: str, kind: str, cmd: list[str], result: Path, base_ms: float | None) -> dict[str, Any]:
        code, err, wall = _run(cmd, 90)
        got = json.loads(result.read_text()) if code == 0 and result.is_file() else {}
        rounds = got.get("rounds_ms", {}).get("none")
        return _row(name, kind, "external", rounds, base_ms, status="ok" if rounds else f"failed (exit {code}): {err}",
                    wall_s=wall)

    plain = external("baseline (own process)", "none", _target_cmd(target, device, "none", workdir / "plain.json"),
                     workdir / "plain.json", None)
    rows.append(plain)
    ext_base = plain.get("median_ms")
    if ext_base:
        plain.update(factor=1.0, overhead_pct=0.0)
    pyspy = shutil.which("py-spy")
    for name, flags in PYSPY:
        out = workdir / (name.replace(" ", "_").replace("-", "") + ".json")
        if pyspy is None:
            rows.append(_row(name, "sampling", "external", None, None, status="not installed (py-spy)"))
            continue
        cmd = [pyspy, "record", *flags, "--format", "raw", "--output", str(out.with_suffix(".txt")), "--"]
        rows.append(external(name, "sampling", cmd + _target_cmd(target, device, "none", out), out, ext_base))
    out = workdir / "scalene.json"
    if _available("scalene"):
        cmd = [sys.executable, "-m", "scalene", "run", "--cpu-only", "-o", str(workdir / "scalene-profile.json")]
        rows.append(external("Scalene --cpu-only", "sampling", cmd + _target_cmd(target, device, "none", out, True), out,
                             ext_base))
    else:
        rows.append(_row("Scalene --cpu-only", "sampling", "external", None, None, status="not installed (scalene)"))
    table = {"schema": "perflab.profilers/1", "target": target.name, "device": device, "rounds": ROUNDS,
             "steps_per_round": STEPS_PER_ROUND, "python": sys.version.split()[0], "rows": rows}
    path = workdir / TABLE_FILE
    runner.write_json(path, table)
    return path


@register
class Overhead(Kind):
    """[check] metric = "overhead" (a profiler's cost over bare_step) and tools = ["profilers"] (the table)."""
    name = "overhead"

    def applies(self, puzzle: Any) -> bool:
        return puzzle.check.metric == "overhead" or "profilers" in puzzle.tools

    def measure(self, chk: Checking) -> Any:
        if chk.puzzle.check.metric != "overhead":
            return None
        chk.phase("overhead")
        return check_overhead(chk.puzzle, chk.ref, chk.ref_state, chk.fix, chk.fix_state, chk.result,
                              device=chk.device, reps=chk.reps)

    def record(self, rec: Recording) -> list[Path]:
        if "profilers" not in rec.puzzle.tools:
            return []
        module = runner.load_module(rec.puzzle.file("slow"))
        return [record_table(Path(module.loop_file()), rec.folder("extras") / "profilers", rec.device)]

    def replay(self, ev: Any, variant: str = "slow") -> dict[str, Any]:
        return replay.read_json(ev.folder / TABLE_FILE)
