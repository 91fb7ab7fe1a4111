"""Rule registry: each rule is `rule(ctx) -> list[Finding]`, registered per artifact kind."""
from __future__ import annotations

import importlib
from collections import defaultdict
from typing import Callable

from perflab.doctor.finding import EventRef, Finding

Rule = Callable[..., list[Finding]]

_RULES: dict[str, list[Rule]] = defaultdict(list)
# The modules that hold the rules for each artifact kind (imported on first use).
RULE_MODULES: dict[str, tuple[str, ...]] = {
    "kineto": ("perflab.doctor.rules.serving_trace", "perflab.doctor.rules.system", "perflab.doctor.rules.recompile", "perflab.doctor.rules.allocator", "perflab.doctor.rules.trace_kernel",
               "perflab.doctor.rules.roof", "perflab.doctor.rules.multigpu", "perflab.doctor.rules.interconnect",
               "perflab.doctor.rules.pipeline",
               "perflab.doctor.rules.concurrency",
               "perflab.doctor.rules.launch_shape"),
}

# Estimated share of step time a fix would save -> severity. Below LOW the finding is not reported.
HIGH, MEDIUM, LOW = 25.0, 10.0, 3.0


def rule(fn: Rule | None = None, *, source: str = "kineto"):
    """Register a rule: `@rule` or `@rule(source="ncu")`. Rules run in registration order."""
    def register(f: Rule) -> Rule:
        if f not in _RULES[source]:
            _RULES[source].append(f)
        return f
    return register(fn) if fn is not None else register


def rules_for(source: str) -> list[Rule]:
    for module in RULE_MODULES.get(source, ()):
        importlib.import_module(module)
    return list(_RULES[source])


def run_rules(ctx, source: str = "kineto") -> list[Finding]:
    findings: list[Finding] = []
    for r in rules_for(source):
        findings.extend(r(ctx))
    return findings


def severity_for(gain_pct: float) -> str | None:
    """Severity of a finding from the share of step time it costs; None: too small to report."""
    if gain_pct >= HIGH:
        return "high"
    if gain_pct >= MEDIUM:
        return "medium"
    if gain_pct >= LOW:
        return "low"
    return None


def significant(fid: str, gain: float, summary: str, evidence: dict, fix: str, events=()) -> list[Finding]:
    """A one-element list with the finding if its gain is worth reporting, else an empty list."""
    severity = severity_for(gain)
    if severity is None:
        return []
    refs = [e if isinstance(e, EventRef) else EventRef(e["name"], e["ts_us"], e["dur_us"]) for e in events]
    return [Finding(id=fid, severity=severity, gain_pct=round(gain, 1), evidence=_rounded(evidence), fix=fix,
                    summary=summary, events=refs[:8])]


def _rounded(evidence: dict) -> dict:
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in evidence.items()}
