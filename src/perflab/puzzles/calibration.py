"""Gain calibration: the doctor's estimated gain of each puzzle's planted finding, turned into a predicted
speed-up, held against the speed-up its fix measured on the GPU (the recorded measurements.json).

A trace finding's gain is a share of the step: predicted = 1 / (1 - gain). A kernel finding (Nsight Compute)
saves its gain on its kernel's time only: the step gain is the kernel's share of the step (from the slow
trace) times the kernel's own gain. A memory finding's gain is a share of reserved memory, its fix's
measurement a ratio of reserved memory. A finding may state a bound instead of a point (evidence
`speedup_at_least`, `speedup_at_most`, see perflab.analysis.work.estimate): then the measured speed-up is
judged against the bound. Nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from perflab.analysis.work.estimate import speedup_bounds, speedup_of_gain, speedup_point

WITHIN = (1.25, 1.5)
FAR = 3.0
TIME_STATISTICS = ("median", "mean")     # a time speed-up (slow / fix), not an overhead or a memory ratio
MEMORY_STATISTICS = ("reserved_mb ratio", "peak_reserved_mb ratio")
SERVING_IDS = ("padded-batch", "prefill-stall")   # judged from the engine's log, not from a trace
LATENCY_STATISTICS = ("median itl_p99_ms",)   # a serving fix's ITL p99 ratio: what prefill-stall's gain is a share of


@dataclass
class Row:
    puzzle: str
    planted: str
    level: str                      # trace | ncu | memory
    finding: str = ""               # the finding whose gain is read ("" when the doctor missed it)
    gain_pct: float | None = None   # the finding's gain, as the doctor states it
    share_pct: float | None = None  # a kernel finding: its kernel's share of the step
    step_gain_pct: float | None = None
    predicted: float | None = None
    at_least: float | None = None   # the finding's stated bounds on the speed-up
    at_most: float | None = None
    measured: float | None = None
    measured_ci: tuple[float, float] | None = None   # the measurement's confidence interval, where recorded
    note: str = ""
    skipped: str = ""               # why the puzzle is not calibrated ("" when it is)
    measured_how: str = ""          # the measurement: statistic, repetitions, GPU and date of the recording
    predicted_how: str = ""         # the evidence the prediction reads

    @property
    def ratio(self) -> float | None:
        if self.predicted is None or not self.measured:
            return None
        return self.predicted / self.measured

    @property
    def point_off_by(self) -> float | None:
        """How far the point estimate is from the measurement, as a factor >= 1."""
        r = self.ratio
        return None if r is None or r <= 0 else max(r, 1 / r)

    @property
    def off_by(self) -> float | None:
        """The point's miss, or 1.0 when the measurement lies within the finding's stated bound."""
        return 1.0 if self.point_off_by is not None and self.within_bound() else self.point_off_by

    def has_bound(self) -> bool:
        return self.at_least is not None or self.at_most is not None

    def bound_broken(self) -> bool:
        return self.has_bound() and self.measured is not None and not self.within_bound()

    def within_bound(self) -> bool:
        """A finding that states a bound: the measurement (or its confidence interval, where recorded) lies
        within it."""
        if self.at_least is None and self.at_most is None or not self.measured:
            return False
        lo = self.at_least if self.at_least is not None else 0.0
        hi = self.at_most if self.at_most is not None else float("inf")
        low, high = self.measured_ci or (self.measured, self.measured)
        return low <= hi and high >= lo

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "point_off_by": self.point_off_by, "off_by": self.off_by,
                "within_bound": self.within_bound()}


@dataclass
class Summary:
    rows: list[Row] = field(default_factory=list)

    @property
    def judged(self) -> list[Row]:
        return [r for r in self.rows if not r.skipped and r.off_by is not None]

    def count_within(self, factor: float, point: bool = False) -> int:
        return sum(1 for r in self.judged if (r.point_off_by if point else r.off_by) <= factor)

    def far(self) -> list[Row]:
        """Off by more than FAR and not within a bound the finding states."""
        return [r for r in self.judged if r.off_by > FAR]

    def broken_bounds(self) -> list[Row]:
        return [r for r in self.judged if r.bound_broken()]

    def worst(self) -> Row | None:
        return max(self.judged, key=lambda r: (r.off_by, r.point_off_by), default=None)

    def line(self) -> str:
        n = len(self.judged)
        if not n:
            return "gain calibration: no recorded puzzle to calibrate"
        w = self.worst()
        ok = self.count_within(WITHIN[1])
        bounded = sum(1 for r in self.judged if r.has_bound())
        point = self.count_within(WITHIN[1], True)
        return (f"gain calibration: {n} puzzles; point estimate within {WITHIN[0]}x: "
                f"{self.count_within(WITHIN[0], True)}, within {WITHIN[1]}x: {point} ({100 * point / n:.1f}%), "
                f"off by more than {FAR:g}x: {sum(1 for r in self.judged if r.point_off_by > FAR)}; "
                f"with the bounds findings state ({bounded} do): {ok} within {WITHIN[1]}x or inside their bound "
                f"({100 * ok / n:.1f}%), {len(self.far())} off by more than {FAR:g}x outside a bound, "
                f"{len(self.broken_bounds())} bound(s) broken; worst {w.puzzle} ({w.finding or 'missed'}: predicted "
                f"{_x(w.predicted)}{' ' + _bound_text(w) if w.has_bound() else ''} vs measured {_x(w.measured)}, "
                f"off by {w.off_by:.2f}x)")

    def to_dict(self) -> dict[str, Any]:
        n = len(self.judged)
        return {"schema": "perflab.gain-calibration/1", "summary": self.line(), "puzzles": n,
                "point_within_1_25": self.count_within(WITHIN[0], True),
                "point_within_1_5": self.count_within(WITHIN[1], True), "within_1_5_or_bound": self.count_within(WITHIN[1]),
                "broken_bounds": [r.puzzle for r in self.broken_bounds()],
                "far": len(self.far()), "worst": self.worst().puzzle if n else None,
                "rows": [r.to_dict() for r in self.rows]}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _measured(puzzle: Any, ev: Any) -> tuple[float | None, str]:
    """The fix's measured ratio and its statistic's kind (time | memory | other)."""
    sp = ev.measurements().get("speedup") or {}
    point, stat = sp.get("point"), str(sp.get("statistic") or "")
    kind = ("memory" if stat.startswith(MEMORY_STATISTICS) else "time" if stat in TIME_STATISTICS else
            "latency" if stat.startswith(LATENCY_STATISTICS) else "other")
    return (float(point) if isinstance(point, (int, float)) else None), kind


def measured_how(ev: Any) -> str:
    """How the recording measured the fix: the statistic over how many repetitions, on which GPU, when."""
    sp = ev.measurements().get("speedup") or {}
    man = ev.manifest() or {}
    stat = str(sp.get("statistic") or "?")
    what = (f"{stat} step time of {sp.get('n', '?')} interleaved runs, slow / fix" if stat in TIME_STATISTICS
            else stat if "slow / fix" in stat else f"{stat}, slow / fix")
    lo, hi = sp.get("ci_low"), sp.get("ci_high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and hi > lo:
        what += f", {100 * float(sp.get('confidence') or 0.95):.0f} % CI {lo:.2f}-{hi:.2f}x"
    where = ", ".join(x for x in (str(man.get("gpu") or ""), str(man.get("date") or "")[:10]) if x)
    return f"{what} ({where})" if where else what


PREDICTED_HOW = {"trace": "the slow trace's finding (gain: its share of the step)",
                 "ncu": "the slow kernel's Nsight Compute estimate, through its share of the slow trace's step",
                 "memory": "the slow snapshot's finding (gain: its share of reserved memory)",
                 "serving": "the slow run's engine log (serving.json)"}


def _pick(findings: list[Any], planted: str, tags: list[str]) -> tuple[Any, str]:
    for f in findings:
        if f.id == planted:
            return f, ""
    for f in findings:
        if f.id in tags and f.severity != "info":
            return f, f"planted {planted} not found; read the puzzle's tag {f.id}"
    return None, f"the doctor does not report {planted}"


def _fill(row: Row, finding: Any, share: float = 1.0) -> None:
    row.predicted_how = PREDICTED_HOW.get(row.level, "")
    row.finding = finding.id
    e = finding.evidence
    row.gain_pct = float(e.get("kernel_gain_pct", finding.gain_pct)) if row.level == "ncu" else float(finding.gain_pct)
    row.share_pct = 100 * share if row.level == "ncu" else None
    point = speedup_point(finding, share)
    row.predicted = point if point is not None else speedup_of_gain(row.gain_pct * share)
    row.step_gain_pct = 100.0 * (1.0 - 1.0 / row.predicted) if row.predicted > 0 else 0.0
    row.at_least, row.at_most = speedup_bounds(finding, share)


AMDAHL_SLACK = 1.05   # a measured step speed-up this far above what one kernel alone could give


def _kernel_level(row: Row, finding: Any, ev: Any, kernel: str, share: float) -> None:
    """The step sped up more than any change to this kernel alone could give (Amdahl: 1 / (1 - share)): the fix
    changed kernels the report does not hold. The row is then judged on the kernel itself: its estimate against
    the kernel's own speed-up, slow over fix in the two recorded Nsight Compute reports."""
    from perflab.analysis.ncu.ncu_plan import function_name
    from perflab.puzzles.evidence import ncu

    want = function_name(kernel)
    durations = []
    for variant in ("slow", "solution"):
        ks = [k for k in ncu.load_profile(ev.folder, variant).kernels if k.duration_s]
        same = [k for k in ks if function_name(k.full_name or k.name) == want]
        durations.append(sum(k.duration_s for k in (same or ks[:1])) / max(1, len(same or ks[:1])))
    slow, fixed = durations
    e = finding.evidence
    if not fixed or not isinstance(e.get("kernel_speedup_est"), (int, float)):
        return
    step = row.measured
    row.level, row.share_pct, row.measured_ci = "ncu kernel", 100.0, None
    row.measured, row.predicted = slow / fixed, float(e["kernel_speedup_est"])
    row.at_least, row.at_most = e.get("kernel_speedup_at_least"), e.get("kernel_speedup_at_most")
    row.predicted_how = "the slow kernel's Nsight Compute estimate"
    row.measured_how = (f"kernel duration slow / fix in the two recorded Nsight Compute reports; the step's measured "
                        f"{step:.2f}x is beyond the {1 / (1 - share):.2f}x this kernel alone could give at its "
                        f"{100 * share:.0f} % of the step: the fix changed kernels the report does not hold")


def kernel_share(report: Any, kernel: str) -> float:
    """A kernel's share of the step in a trace's doctor report: its total time over steps x step time."""
    from perflab.analysis.ncu.ncu_plan import function_name

    s = report.analyses.get("summary") or {}
    step_us = 1e3 * float(s.get("step_time_ms") or 0) * int(s.get("steps") or 0)
    want = function_name(kernel)
    total = sum(float(k["total_us"]) for k in (report.analyses.get("kernels") or {}).get("by_name", [])
                if function_name(k["name"]) == want)
    return min(1.0, total / step_us) if step_us > 0 and total > 0 else 1.0


def _stage_measured(row: Row, ev: Any, stage: str) -> None:
    """The planted finding's own fix is a stage of the puzzle (the solution fixes more): its speed-up over the slow
    program, measured in its own interleaved runs, is the row's measurement."""
    st = (ev.measurements().get("stages") or {}).get(stage) or {}
    point = st.get("speedup_vs_slow")
    if not isinstance(point, (int, float)):
        return
    lo, hi = st.get("ci_low"), st.get("ci_high")
    row.measured = float(point)
    row.measured_ci = (float(lo), float(hi)) if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else None
    ci = f", 95 % CI {lo:.2f}-{hi:.2f}x" if row.measured_ci else ""
    man = ev.manifest() or {}
    where = ", ".join(x for x in (str(man.get("gpu") or ""), str(man.get("date") or "")[:10]) if x)
    row.measured_how = (f"median step time of {st.get('n', '?')} interleaved runs, slow / {stage} (the stage that fixes "
                        f"the planted finding alone; the solution also fixes others){ci}" + (f" ({where})" if where else ""))


def calibrate(puzzle: Any) -> Row:
    from perflab.puzzles.engine import replay

    check = puzzle.check
    planted = check.planted if check else ""
    row = Row(puzzle=puzzle.id, planted=planted, level=check.planted_in if check else "trace")
    if not planted:
        row.skipped = "no planted finding"
        return row
    if not replay.is_recorded(puzzle):
        row.skipped = "not recorded"
        return row
    ev = replay.recording(puzzle)
    row.measured, kind = _measured(puzzle, ev)
    row.measured_how = measured_how(ev)
    sp = ev.measurements().get("speedup") or {}
    if isinstance(sp.get("ci_low"), (int, float)) and isinstance(sp.get("ci_high"), (int, float)):
        row.measured_ci = (float(sp["ci_low"]), float(sp["ci_high"]))
    if check.planted_fixed_by:
        _stage_measured(row, ev, check.planted_fixed_by)
    if kind == "other" or row.measured is None or (kind == "latency" and planted not in SERVING_IDS):
        row.skipped = "its measurement is not a fix's speed-up"
        return row
    if kind == "memory":
        from perflab.puzzles.questions.memory import memory_report

        row.level = "memory"
        finding, row.note = _pick(memory_report(ev, "slow").findings, planted, puzzle.taxonomy)
    elif row.level == "ncu":
        from perflab.puzzles.evidence import ncu

        finding, row.note = _pick(ncu.diagnose(ncu.load_profile(ev.folder, "slow")).findings, planted,
                                  puzzle.taxonomy)
        if finding is not None:
            kernel = str(finding.evidence.get("kernel") or "")
            share = kernel_share(ev.report("slow"), kernel) if kernel else 1.0
            _fill(row, finding, share)
            if share < 1.0 and row.measured > AMDAHL_SLACK / (1.0 - share):
                _kernel_level(row, finding, ev, kernel, share)
            return row
    elif planted in SERVING_IDS and (ev.folder / "serving.json").is_file():
        row.level = "serving"
        from perflab.doctor.serving import diagnose_serving   # serving.json's slow variant, as `perflab doctor` reads it

        finding, row.note = _pick(diagnose_serving(ev.folder / "serving.json", "slow").findings, planted,
                                  puzzle.taxonomy)
    else:
        finding, row.note = _pick(ev.report("slow").findings, planted, puzzle.taxonomy)
    if finding is None:
        row.gain_pct, row.step_gain_pct, row.predicted = 0.0, 0.0, 1.0
        return row
    _fill(row, finding)
    return row


def calibrate_catalog(puzzles: list[Any]) -> Summary:
    return Summary([calibrate(p) for p in sorted(puzzles, key=lambda p: p.id)])


def table(summary: Summary) -> str:
    """The markdown table, worst first."""
    head = ("| puzzle | level | finding (planted) | gain % | kernel share % | predicted x | stated bound | "
            "measured x | ratio | in bound |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in sorted(summary.judged, key=lambda r: -r.point_off_by):
        bound = _bound_text(r)
        name = r.finding if r.finding == r.planted else f"{r.finding or 'missed'} ({r.planted})"
        share = "" if r.share_pct is None else f"{r.share_pct:.1f}"
        lines.append(f"| {r.puzzle} | {r.level} | {name} | {r.gain_pct:.1f} | {share} | {_x(r.predicted)} | {bound} | "
                     f"{_x(r.measured)} | {r.ratio:.2f} | {_in(r)} |")
    return "\n".join(lines)


def table_with_method(summary: Summary) -> str:
    """The markdown table, worst first, each row saying how it was predicted and measured."""
    head = ("| puzzle | level | finding (planted) | predicted x | stated range | measured x | ratio | in range | "
            "predicted from | measured as |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in sorted(summary.judged, key=lambda r: -r.point_off_by):
        name = r.finding if r.finding == r.planted else f"{r.finding or 'missed'} ({r.planted})"
        share = f" ({r.share_pct:.0f} % of the step)" if r.share_pct is not None else ""
        lines.append(f"| {r.puzzle} | {r.level} | {name} | {_x(r.predicted)} | {_bound_text(r)} | {_x(r.measured)} | "
                     f"{r.ratio:.2f} | {_in(r)} | {r.predicted_how or PREDICTED_HOW.get(r.level, '')}{share} | "
                     f"{r.measured_how} |")
    return "\n".join(lines)


def _in(r: Row) -> str:
    return "" if not r.has_bound() else "yes" if r.within_bound() else "NO"


def _bound_text(r: Row) -> str:
    if r.at_least is not None and r.at_most is not None:
        return f"{r.at_least:.2f}-{r.at_most:.2f}x"
    if r.at_least is not None:
        return f">= {r.at_least:.2f}x"
    if r.at_most is not None:
        return f"<= {r.at_most:.2f}x"
    return ""
