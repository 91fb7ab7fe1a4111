"""The doctor's output: ranked findings with ids from TAXONOMY.md."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "perflab.doctor/2"

LEVELS = ("system", "serving", "multi-GPU", "memory", "kernel", "any")
# Coarse before fine: the top-down order of TAXONOMY.md.
LEVEL_ORDER = {"system": 0, "serving": 1, "multi-GPU": 2, "memory": 3, "kernel": 4, "any": 5}
SEVERITIES = ("high", "medium", "low", "info")
SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}

TAXONOMY_IDS = {
    "healthy": "any", "not-judged": "any", "recompilation": "system", "gpu-idle": "system", "host-sync": "system", "launch-overhead": "system",
    "host-compute": "system", "input-pipeline": "system", "memcpy": "system",
    "pageable-memcpy": "system", "h2d-copy": "system", "d2h-copy": "system", "no-overlap": "system",
    "serialized-kernels": "system", "allocator-churn": "system",
    "padded-batch": "serving", "prefill-stall": "serving",
    "comm-not-overlapped": "multi-GPU", "load-imbalance": "multi-GPU", "comm-below-roof": "multi-GPU",
    "pipeline-bubble": "multi-GPU", "memory-capacity": "memory",
    "compute-bound": "kernel", "memory-bound": "kernel", "no-tensor-cores": "kernel",
    "unfused-elementwise": "kernel", "dequant-overhead": "kernel", "uncoalesced-access": "kernel",
    "bank-conflicts": "kernel", "register-spill": "kernel", "atomic-contention": "kernel",
    "warp-divergence": "kernel", "tail-effect": "kernel", "tile-quantization": "kernel",
    "low-occupancy": "kernel", "l2-miss": "kernel", "poor-locality": "kernel", "autotune-miss": "kernel",
    "below-roof": "kernel", "small-grid": "kernel", "latency-bound": "kernel",
}


@dataclass
class EventRef:
    """An event that proves a finding (times in µs, relative to the trace start)."""

    name: str
    ts_us: float
    dur_us: float


@dataclass
class Finding:
    id: str
    severity: str
    gain_pct: float
    evidence: dict[str, Any]
    fix: str
    summary: str = ""
    events: list[EventRef] = field(default_factory=list)
    level: str = ""

    def __post_init__(self) -> None:
        if self.id not in TAXONOMY_IDS:
            raise ValueError(f"finding id {self.id!r} is not a taxonomy id (perflab taxonomy lists them)")
        if self.severity not in SEVERITY_ORDER:
            raise ValueError(f"severity {self.severity!r} not one of {SEVERITIES}")
        if not self.level:
            self.level = TAXONOMY_IDS[self.id]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Report:
    """What the doctor says about one artifact."""

    source: dict[str, Any]
    verdict: str
    findings: list[Finding]
    analyses: dict[str, Any] = field(default_factory=dict)

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def ids(self) -> list[str]:
        return [f.id for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "source": self.source,
            "verdict": self.verdict,
            "findings": [f.to_dict() for f in self.findings],
            "analyses": self.analyses,
        }


def rank(findings: list[Finding]) -> list[Finding]:
    """Most important first: severity band, then estimated gain, then coarse level before fine.

    `healthy`/at-roof findings carry no gain and sort last unless they are alone.
    """
    return sorted(
        findings,
        key=lambda f: (SEVERITY_ORDER[f.severity], -round(f.gain_pct, 1), LEVEL_ORDER.get(f.level, 9)),
    )
