"""What the rules see: one trace, the windows analysed, and the analyses over them (computed once)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from perflab.analysis.idle.gaps import GapAnalysis, analyze_gaps
from perflab.analysis.work.kernel_patterns import dequant_pairs, elementwise_chains
from perflab.analysis.work.kernels import kernel_breakdown
from perflab.analysis.idle.launches import launch_stats
from perflab.analysis.idle.memcpy import copies
from perflab.analysis.idle.overlap import overlaps
from perflab.analysis.reports.summary import evidence_summary, typical_step_us
from perflab.analysis.idle.syncs import sync_summary
from perflab.analysis.idle.timeline import busy_idle
from perflab.analysis.steps.windows import Windows, analysis_windows, trace_origin
from perflab.doctor.finding import EventRef
from perflab.trace.model import Trace

MODEL_KEY = "model"   # trace.meta: the analysis.work.model_config.ModelConfig of `--model`, when given


@dataclass
class Context:
    trace: Trace
    windows: Windows
    ranks: list[Trace] = field(default_factory=list)

    @classmethod
    def build(cls, trace: Trace, step: int | None = None, ranks: list[Trace] | None = None) -> "Context":
        return cls(trace, analysis_windows(trace, step), ranks or [trace])

    @property
    def window_us(self) -> float:
        return self.windows.total

    @property
    def n_steps(self) -> int:
        return max(len(self.windows.steps), 1)

    @cached_property
    def step_ms(self) -> float:
        """The step per-step totals are read against (summary.typical_step_us): the median, the mean where steps
        differ; the summary's step_time_ms is always the median."""
        return typical_step_us(self.trace, self.windows) / 1e3

    def rank_windows(self, trace: Trace) -> Windows:
        """The analysis windows of one of `ranks`: this rank's, or another's for the same step."""
        if trace is self.trace:
            return self.windows
        return analysis_windows(trace, self.windows.steps[0] if self.windows.kind == "step" else None)

    @cached_property
    def compute_spans(self) -> tuple:
        """(starts, ends) of the compute kernels in the windows (analysis.multigpu.collectives.compute_spans)."""
        from perflab.analysis.multigpu.collectives import compute_spans

        return compute_spans(self.trace, self.windows)

    def share(self, us: float) -> float:
        """Percent of the analysed step time."""
        return 100.0 * us / self.window_us if self.window_us > 0 else 0.0

    def event(self, row: int) -> EventRef:
        return EventRef(self.trace.name_of(row), float(self.trace.ts[row] - trace_origin(self.trace)),
                        float(self.trace.dur[row]))

    @cached_property
    def gaps(self) -> GapAnalysis:
        return analyze_gaps(self.trace, self.windows)

    @cached_property
    def copies(self) -> dict:
        return copies(self.trace, self.windows)

    @cached_property
    def syncs(self) -> dict:
        return sync_summary(self.trace, self.windows)

    @cached_property
    def launches(self) -> dict:
        return launch_stats(self.trace, self.windows)

    @cached_property
    def kernels(self) -> dict:
        return kernel_breakdown(self.trace, self.windows)

    @cached_property
    def overlap(self) -> dict:
        return overlaps(self.trace, self.windows)

    @cached_property
    def busy(self) -> dict:
        return busy_idle(self.trace, self.windows)

    @cached_property
    def chains(self) -> dict:
        return elementwise_chains(self.trace, self.windows)

    @cached_property
    def dequant(self) -> dict:
        return dequant_pairs(self.trace, self.windows)

    @cached_property
    def window_gpu(self):
        from perflab.analysis.work.kernels import window_gpu_rows

        return window_gpu_rows(self.trace, self.windows)

    @cached_property
    def streams_overlap(self) -> bool:
        """GPU work on several streams runs at the same time: kernel gains are taken on the critical path."""
        from perflab.doctor.on_path import concurrent

        return concurrent(self.trace, self.window_gpu)

    @cached_property
    def critical_path(self):
        """The step's critical path (analysis/idle/critical_path.py), summed over the windows."""
        from perflab.analysis.idle.critical_path import step_critical_path

        return step_critical_path(self.trace, self.windows)

    @cached_property
    def summary(self) -> dict:
        return evidence_summary(self.trace, self.windows)

    @cached_property
    def op_work(self):
        from perflab.analysis.work.op_work import op_work

        return op_work(self.trace, self.windows)

    @cached_property
    def ceilings(self):
        from perflab.analysis.work.ceilings import device_ceilings, measured_beside

        return device_ceilings(self.trace.meta.get("device_name"), measured_beside(self.trace.meta.get("path")))

    @cached_property
    def sol(self) -> dict:
        """Speed of light per op, family and step (analysis/work/speed_of_light.py); times per step."""
        from perflab.analysis.work.speed_of_light import speed_of_light

        return speed_of_light(self.op_work, self.ceilings, steps=self.n_steps, step_us=self.step_ms * 1e3)

    @cached_property
    def fusable(self) -> list:
        from perflab.analysis.work.op_chains import fusable_chains

        return fusable_chains(self.trace, self.op_work)

    @cached_property
    def iterations(self):
        """A serving engine's iterations (analysis/steps/iterations.py), None where the trace has none."""
        from perflab.analysis.steps.iterations import serving_iterations

        return serving_iterations(self.trace)

    @cached_property
    def serving(self) -> dict | None:
        """The iterations read as a request stream (analysis/engines/trace_iterations.py), with each iteration
        against its speed of light where the model is described (`roof`: analysis/work/iteration_roof.py)."""
        it = self.iterations
        if it is None:
            return None
        from perflab.analysis.engines.trace_iterations import serving_figures

        out = serving_figures(it)
        model = self.trace.meta.get(MODEL_KEY)
        if model is not None:
            from perflab.analysis.work.iteration_roof import iteration_roofs

            out["roof"] = iteration_roofs(it, model, self.ceilings)
        return out

    def step_pct(self, us_per_step: float) -> float:
        """Percent of the step time, for a time per step."""
        return self.share(us_per_step * self.n_steps)

    @property
    def gpu_busy_pct(self) -> float:
        return self.share(self.gaps.busy_us)
