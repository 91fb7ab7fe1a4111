"""Evidence that several system rules show."""
from __future__ import annotations

from perflab.doctor.context import Context


def idle_evidence(ctx: Context) -> dict:
    """How idle the GPU was over the analysed steps."""
    return {"gpu_idle_pct": 100.0 - ctx.gpu_busy_pct, "step_time_ms": ctx.step_ms,
            "steps": len(ctx.windows.steps)}
