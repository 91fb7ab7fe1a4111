"""puzzle.toml: parse and validate. A broken file names the file and the field."""
from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.doctor.finding import TAXONOMY_IDS
from perflab.errors import PerflabError
from perflab.paths import display_path
from perflab.puzzles.engine.toml_fields import Fields, SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOOLS = ("torch-profiler", "ncu", "memory", "nvml", "autotune", "py-spy", "profilers", "diff", "investigate",
         "serving")
QUESTION_TYPES = ("taxonomy", "number", "text", "choice")
VARIANT_FILES = {"slow": "workload.py", "solution": "solution.py", "starter": "starter.py"}
ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
STAGE_RE = re.compile(r"^stage[0-9]+$")   # `stages`: intermediate fixes between slow and solution (<stage>.py)
DEFAULT_NUMBER_TOLERANCE = 0.1
CHECK_METRICS = ("time", "peak_reserved_mb", "reserved_mb", "overhead", "itl_p99_ms")   # itl_p99_ms: evidence/serving.py
PLANTED_IN = ("trace", "ncu")   # the evidence the fix check reads the planted finding from


@dataclass(frozen=True)
class Question:
    key: str
    prompt: str
    type: str
    analysis: str
    args: dict[str, Any] = field(default_factory=dict)
    tolerance: float = DEFAULT_NUMBER_TOLERANCE
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Requirements:
    gpu: bool = True
    min_cc: str = ""
    gpus: int = 1
    packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfileConfig:
    warmup: int = 5
    steps: int = 10
    with_stack: bool = False
    profile_memory: bool = False     # torch.profiler(profile_memory=True): allocator events in the trace


@dataclass(frozen=True)
class CheckConfig:
    speedup: float = 1.5
    planted: str = ""
    rtol: float | None = None
    atol: float | None = None
    reps: int = 30
    metric: str = "time"             # time | peak_reserved_mb | reserved_mb (memory) | itl_p99_ms (serving)
    reduction: float = 1.0           # memory metrics: the slow/fixed ratio the fix must reach
    max_overhead_pct: float = 10.0   # metric "overhead": the profiled step's cost over bare_step (puzzles/evidence/overhead.py)
    planted_in: str = "trace"        # "ncu": the fix's Nsight Compute report (the default where tools name ncu)
    planted_fixed_by: str = ""       # the stage that fixes the planted finding alone (its measured speed-up
                                     # calibrates the finding's estimate); "": the solution


@dataclass(frozen=True)
class NcuConfig:
    """[ncu]: which kernels of one profiled step Nsight Compute records (puzzles with tools = ["ncu"])."""
    kernel: str = ""          # regex on the kernel name ("" = every kernel)
    launches: int = 1         # kernel launches profiled, after `warmup` unprofiled steps
    set: str = "full"         # ncu section set
    warmup: int = 2
    nvtx: bool = False        # capture NVTX ranges (--nvtx): GEMM shapes the doctor reads (tile-quantization)


@dataclass(frozen=True)
class TimersConfig:
    """[timers]: the step's parts (functions of the state, in order) timed three ways (puzzles/evidence/timers.py)."""
    parts: tuple[str, ...] = ()
    steps: int = 20
    warmup: int = 3


@dataclass(frozen=True)
class EnergyConfig:
    """[energy]: how tools = ["nvml"] puzzles measure joules per call (puzzles/evidence/energy.py)."""
    items_per_call: int = 1       # inferences per step(), for joules per inference
    min_time_s: float = 2.0       # each variant runs at least this long between the energy counter's reads
    interval_s: float = 0.02      # GPUMonitor sampling interval


@dataclass(frozen=True)
class StarterConfig:
    """[starter]: what `perflab start` puts above the workload's code (engine/starter.py)."""
    title: str = ""               # the docstring's first line; default "<name>: your starting point (...)"
    header: str = ""              # what to do, the rules, the goal: between the title and the workload's text


@dataclass(frozen=True)
class Puzzle:
    id: str
    title: str
    level: int
    order: int
    story: str
    question: str
    look_at: str
    folder: Path
    source: Path
    prerequisites: tuple[str, ...] = ()
    seeds: tuple[str, ...] = ()
    taxonomy: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()
    requirements: Requirements = Requirements()
    profile: ProfileConfig = ProfileConfig()
    check: CheckConfig = CheckConfig()
    questions: tuple[Question, ...] = ()
    ncu: NcuConfig = NcuConfig()
    timers: TimersConfig = TimersConfig()
    energy: EnergyConfig = EnergyConfig()
    stages: tuple[str, ...] = ()     # intermediate fixes (<stage>.py), recorded like slow and solution
    starter: StarterConfig = StarterConfig()

    @property
    def artifacts(self) -> Path:
        return self.folder / "artifacts"

    def file(self, variant: str) -> Path:
        """The source of a variant: slow (workload.py), solution, a stage (<stage>.py), or the starter: the
        folder's starter.py where it has one, else the one derived from workload.py (engine/starter.py)."""
        if variant in self.stages:
            return self.folder / f"{variant}.py"
        if variant == "starter" and not (self.folder / VARIANT_FILES[variant]).is_file():
            from perflab.puzzles.engine.starter import starter_file

            return starter_file(self)
        return self.folder / VARIANT_FILES[variant]

    def find_question(self, key: str) -> Question:
        for q in self.questions:
            if q.key == key:
                return q
        raise PerflabError(f"puzzle {self.id} has no question {key!r}; keys: {', '.join(self.question_keys)}")

    @property
    def question_keys(self) -> list[str]:
        return [q.key for q in self.questions]


def load(path: Path) -> Puzzle:
    """Read and validate one puzzle.toml (its folder holds the workload files)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{display_path(path)}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{display_path(path)}: not valid TOML ({exc})") from None
    return parse(data, path)


def parse(data: dict[str, Any], source: Path) -> Puzzle:
    f = Fields(data, source)
    f.reject_unknown({"id", "title", "level", "order", "prerequisites", "seeds", "taxonomy", "tools", "story",
                      "question", "look_at", "requirements", "profile", "check", "hints", "questions", "ncu",
                      "timers", "energy", "stages", "starter"})
    pid = f.text("id")
    if not ID_RE.match(pid):
        raise f.fail("id", "must be lowercase letters, digits and dashes ([a-z0-9-]+)")
    taxonomy = f.strings("taxonomy", TAXONOMY_IDS)
    if not taxonomy:
        raise f.fail("taxonomy", "must name at least one taxonomy id (the first is the planted one)")
    tools = f.strings("tools", TOOLS)
    check = _check(f.table("check"), taxonomy, "ncu" in tools)
    stages = _stages(f)
    puzzle = Puzzle(
        id=pid, title=f.text("title"), level=f.int_in("level", 1, 4), order=f.int_in("order", 0, 10**6),
        story=f.text("story"), question=f.text("question"), look_at=f.text("look_at"),
        folder=source.parent, source=source,
        prerequisites=f.strings("prerequisites"), seeds=f.strings("seeds"), taxonomy=taxonomy,
        tools=tools, hints=f.strings("hints"),
        requirements=_requirements(f.table("requirements")), profile=_profile(f.table("profile")),
        check=check, questions=_questions(f, stages), ncu=_ncu(f.table("ncu")),
        timers=_timers(f.table("timers")), energy=_energy(f.table("energy")), stages=stages,
        starter=_starter(f.table("starter")),
    )
    if stages and puzzle.requirements.gpus > 1:
        raise f.fail("stages", "is not supported for multi-GPU puzzles (requirements.gpus > 1)")
    if check.planted_fixed_by and check.planted_fixed_by not in stages:
        raise SpecError(f"{display_path(source)}: [check] planted_fixed_by must name one of the puzzle's stages "
                        f"({', '.join(stages) or 'it has none'})")
    for variant in ("slow", "solution"):
        if not puzzle.file(variant).is_file():
            raise SpecError(f"{display_path(source)}: puzzle folder lacks {VARIANT_FILES[variant]}")
    return puzzle


def _stages(f: Fields) -> tuple[str, ...]:
    """`stages = ["stage1", ...]`: each names <stage>.py beside workload.py (same interface as solution.py)."""
    stages = f.strings("stages")
    for i, name in enumerate(stages):
        if not STAGE_RE.match(name):
            raise f.fail(f"stages[{i}]", f"{name!r} must be 'stage' followed by digits (stage1, stage2, ...)")
        if name in stages[:i]:
            raise f.fail(f"stages[{i}]", f"{name!r} is listed twice")
        if not (f.source.parent / f"{name}.py").is_file():
            raise f.fail(f"stages[{i}]", f"names {name}.py, which the puzzle folder lacks")
    return stages


def _requirements(t: Fields) -> Requirements:
    t.reject_unknown({"gpu", "min_cc", "gpus", "packages"})
    min_cc = t.get("min_cc", str, "", "a string like \"8.0\"")
    if min_cc and not re.match(r"^\d+\.\d+$", min_cc):
        raise t.fail("min_cc", "must be a string like \"8.0\"")
    return Requirements(gpu=t.get("gpu", bool, True), min_cc=min_cc, gpus=t.int_in("gpus", 1, 64, 1),
                        packages=t.strings("packages"))


def _profile(t: Fields) -> ProfileConfig:
    t.reject_unknown({"warmup", "steps", "with_stack", "profile_memory"})
    return ProfileConfig(warmup=t.int_in("warmup", 0, 1000, 5), steps=t.int_in("steps", 1, 1000, 10),
                         with_stack=t.get("with_stack", bool, False),
                         profile_memory=t.get("profile_memory", bool, False))


def _timers(t: Fields) -> TimersConfig:
    t.reject_unknown({"parts", "steps", "warmup"})
    parts = t.strings("parts")
    for i, name in enumerate(parts):
        if not name.isidentifier():
            raise t.fail(f"parts[{i}]", "must name a function of the workload (a Python identifier)")
    return TimersConfig(parts=parts, steps=t.int_in("steps", 1, 1000, 20), warmup=t.int_in("warmup", 0, 100, 3))


def _energy(t: Fields) -> EnergyConfig:
    t.reject_unknown({"items_per_call", "min_time_s", "interval_s"})
    return EnergyConfig(items_per_call=t.int_in("items_per_call", 1, 10**9, 1),
                        min_time_s=t.number("min_time_s", 2.0), interval_s=t.number("interval_s", 0.02))


def _starter(t: Fields) -> StarterConfig:
    t.reject_unknown({"title", "header"})
    return StarterConfig(title=t.get("title", str, "", "a string"), header=t.get("header", str, "", "a string"))


def _ncu(t: Fields) -> NcuConfig:
    t.reject_unknown({"kernel", "launches", "set", "warmup", "nvtx"})
    kernel = t.get("kernel", str, "", "a string (a regex on kernel names)")
    try:
        re.compile(kernel)
    except re.error as exc:
        raise t.fail("kernel", f"is not a valid regex ({exc})") from None
    section_set = t.get("set", str, "full", "a string (an ncu section set: full, detailed, basic)")
    if not re.match(r"^[a-z_]+$", section_set):
        raise t.fail("set", "must be an ncu section set name such as full, detailed or basic")
    return NcuConfig(kernel=kernel, launches=t.int_in("launches", 1, 16, 1), set=section_set,
                     warmup=t.int_in("warmup", 0, 100, 2), nvtx=t.get("nvtx", bool, False))


def _check(t: Fields, taxonomy: tuple[str, ...], ncu: bool) -> CheckConfig:
    t.reject_unknown({"speedup", "planted", "rtol", "atol", "reps", "metric", "reduction", "max_overhead_pct",
                      "planted_in", "planted_fixed_by"})
    planted = t.get("planted", str, taxonomy[0])
    if planted not in TAXONOMY_IDS:
        raise t.fail("planted", f"{planted!r} is not a taxonomy id")
    speedup = t.number("speedup", 1.5)
    if speedup < 1.0:
        raise t.fail("speedup", "must be >= 1.0 (the bar the fix's speed-up must clear)")
    metric = t.get("metric", str, "time")
    if metric not in CHECK_METRICS:
        raise t.fail("metric", f"must be one of {', '.join(CHECK_METRICS)}")
    reduction = t.number("reduction", 1.0)
    if reduction < 1.0:
        raise t.fail("reduction", "must be >= 1.0 (the slow/fixed ratio of a memory or latency metric the fix must reach)")
    planted_in = t.get("planted_in", str, "ncu" if ncu else "trace")
    if planted_in not in PLANTED_IN or (planted_in == "ncu" and not ncu):
        raise t.fail("planted_in", "must be trace, or ncu where tools name ncu (the evidence that judges the fix)")
    return CheckConfig(speedup=speedup, planted=planted, rtol=t.number("rtol", None), atol=t.number("atol", None),
                       reps=t.int_in("reps", 5, 10_000, 30), metric=metric, reduction=reduction,
                       max_overhead_pct=t.number("max_overhead_pct", 10.0), planted_in=planted_in,
                       planted_fixed_by=t.get("planted_fixed_by", str, ""))


def _questions(f: Fields, stages: tuple[str, ...] = ()) -> tuple[Question, ...]:
    from perflab.puzzles.engine.plugins import analyses

    ANALYSES = analyses()

    raw = f.get("questions", list, [], "an array of tables ([[questions]])")
    out: list[Question] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise f.fail(f"questions[{i}]", "must be a table")
        q = Fields(item, f.source, f"questions[{i}].")
        q.reject_unknown({"key", "prompt", "type", "analysis", "args", "tolerance", "choices"})
        key = q.text("key")
        if not re.match(r"^[a-z0-9_-]+$", key):
            raise q.fail("key", "must be lowercase letters, digits, '_' or '-'")
        if key in (o.key for o in out):
            raise q.fail("key", f"{key!r} is used by another question")
        qtype = q.text("type")
        if qtype not in QUESTION_TYPES:
            raise q.fail("type", f"must be one of {', '.join(QUESTION_TYPES)}")
        analysis = q.text("analysis")
        if analysis not in ANALYSES:
            raise q.fail("analysis", f"{analysis!r} is not a known analysis ({', '.join(sorted(ANALYSES))})")
        args = q.get("args", dict, {}, "a table")
        _check_args(q, analysis, args, ANALYSES[analysis], stages)
        choices = q.strings("choices")
        if qtype == "choice" and not choices:
            raise q.fail("choices", "must list the choices of a 'choice' question")
        tolerance = q.number("tolerance", DEFAULT_NUMBER_TOLERANCE)
        out.append(Question(key=key, prompt=q.text("prompt"), type=qtype, analysis=analysis, args=dict(args),
                            tolerance=tolerance, choices=choices))
    return tuple(out)


def _check_args(q: Fields, analysis: str, args: dict[str, Any], fn: Any, stages: tuple[str, ...] = ()) -> None:
    try:
        inspect.signature(fn).bind(None, **args)
    except TypeError as exc:
        raise q.fail("args", f"do not fit analysis {analysis!r}: {exc}") from None
    for key in ("variant", "over"):  # `over`: the baseline of variant_speedup
        variant = args.get(key, "slow")
        if variant not in ("slow", "solution", *stages):
            names = [f"'{v}'" for v in ("slow", "solution", *stages)]
            raise q.fail(f"args.{key}", f"must be {', '.join(names[:-1])} or {names[-1]} (the recorded variants)")
