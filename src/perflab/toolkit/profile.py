"""Profile with torch.profiler: a Python API (`profile`, `auto_profile`) and `perflab profile -- CMD`.

How `perflab profile -- CMD` reaches an unmodified script: it runs CMD with the folder of a tiny
`sitecustomize.py` (perflab/toolkit/_boot) first on PYTHONPATH and its settings in the environment
variable PERFLAB_PROFILE. Every Python process CMD starts imports that sitecustomize; the one(s)
running the target script (or `-m` module) set up step detection (perflab.toolkit.steps) and profile
themselves, the rest (launchers, compiler workers) go on untouched. So the script runs as itself:
its own `__main__`, argv, exit code and traceback, and `torchrun` works with no special case: each
worker profiles itself and writes `rank{RANK}.trace.json.gz`. The same trick is how ddtrace-run and
opentelemetry-instrument reach code they do not own; an existing sitecustomize is still run.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from perflab.errors import PerflabError

BOOT_DIR = Path(__file__).with_name("_boot")
ENV_VAR = "PERFLAB_PROFILE"
# Launchers whose `-m` names the launcher, not the program (`python -m torch.distributed.run x.py`).
LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch"}


def trace_name(env: dict[str, str] | os._Environ = os.environ) -> str:
    """`rank{R}.trace.json.gz` under torchrun (RANK or LOCAL_RANK set), else `trace.json.gz`."""
    rank = env.get("RANK", env.get("LOCAL_RANK"))
    return f"rank{rank}.trace.json.gz" if rank is not None else "trace.json.gz"


def default_out() -> Path:
    from perflab.paths import workspace_dir

    return workspace_dir() / "profile"


def trace_path(out: str | Path | None) -> Path:
    """A file if `out` ends in .json or .json.gz, else a folder (default_out()) for trace_name()."""
    out = Path(out) if out is not None else default_out()
    return out if out.name.endswith((".json", ".json.gz")) else out / trace_name()


def check_counts(steps: int, warmup: int) -> None:
    if steps < 1 or warmup < 0:
        raise PerflabError(f"need steps >= 1 and warmup >= 0 (got steps={steps}, warmup={warmup})")


class Session:
    """One torch.profiler run over steps: `warmup` steps skipped, then `steps` recorded.

    begin() starts step 0, step() starts the next one; after the last recorded step the trace is
    written and later steps cost nothing. close() stops early, keeping what was recorded.
    """

    def __init__(self, path: Path, *, steps: int = 10, warmup: int = 0, stack: bool = False,
                 memory: bool = False, program: Sequence[str] | None = None, captures: Any = None):
        check_counts(steps, warmup)
        self.path, self.steps, self.warmup, self.stack, self.memory = Path(path), steps, warmup, stack, memory
        self.program = list(program) if program else None   # the command that ran, written into the trace
        self.captures = captures   # toolkit.capture_record.CaptureRecorder: graph captures made before recording
        self.begun = 0  # steps begun so far
        self.saved: Path | None = None
        self.done = False
        self._prof: Any = None
        self._discarding = False

    @property
    def recorded_steps(self) -> int:
        return max(0, min(self.begun - self.warmup, self.steps))

    def begin(self, first_step: int = 0) -> None:
        """Start step `first_step` (its number in the trace: ProfilerStep#N counts the program's steps)."""
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns when warmup=0; that is the user's choice
            # The profiler's own warm-up step (traced, then dropped) is the last of ours.
            sched = schedule(skip_first=first_step + max(self.warmup - 1, 0), wait=0, warmup=min(self.warmup, 1),
                             active=self.steps, repeat=1)
        self._prof = profile(activities=activities, schedule=sched, on_trace_ready=self._save,
                             record_shapes=True, with_stack=self.stack, profile_memory=self.memory)
        if first_step:
            self._prof.step_num, self._prof.current_action = first_step, sched(first_step)
        self._prof.start()
        self.begun = 1
        self._tag()

    def _tag(self) -> None:
        """Write the program's command into the trace (`perflab_program`), so the doctor's commands name it.
        Kineto keeps metadata only when it is added while the profiler records."""
        from torch.profiler import ProfilerAction

        from perflab.trace.model import PROGRAM_KEY

        if self.program and self._prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            try:
                self._prof.add_metadata_json(PROGRAM_KEY, json.dumps(self.program))
            except Exception:  # an older torch without it: the doctor falls back to a placeholder
                pass
            self.program = None

    def step(self) -> None:
        if self.done:
            return
        if self._prof is None:
            raise PerflabError("step() before begin()")
        self._prof.step()
        self.begun += 1
        if self.saved is not None:
            self._stop()
        elif self.program:
            self._tag()

    def close(self) -> Path | None:
        """Stop now (a trace still recording is saved with the steps so far); the trace path or None."""
        self._stop()
        return self.saved

    def discard(self) -> None:
        """Stop without keeping anything."""
        self._discarding = True
        self._stop()
        if self.saved is not None:
            self.saved.unlink(missing_ok=True)
            self.saved = None

    def _stop(self) -> None:
        if self._prof is not None and not self.done:
            self.done = True
            self._prof.stop()

    def _save(self, prof: Any) -> None:
        if self._discarding:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.path))  # gzipped by torch for a .gz name
        if self.captures is not None:
            self.captures.merge_into(self.path)
        self.saved = self.path


@contextlib.contextmanager
def profile(out: str | Path | None = None, *, steps: int = 10, warmup: int = 0, stack: bool = False,
            memory: bool = False, doctor: bool = True) -> Iterator[Session]:
    """Profile the block; call `.step()` on what it yields at the end of each iteration.

    `out` is a folder (default ./perflab-work/profile) or a `.json.gz` file. With warmup=0 a block
    without step() calls is recorded whole as one step. On exit the trace is written (path in
    `.saved`) and, with doctor=True, the doctor's verdict is printed.
    """
    session = Session(trace_path(out), steps=steps, warmup=warmup, stack=stack, memory=memory)
    session.begin()
    try:
        yield session
    finally:
        path = session.close()
    if path is None:
        raise PerflabError(f"nothing recorded: {session.begun - 1} step() call(s) but warmup={warmup}; "
                           "call step() at the end of each iteration, or lower warmup")
    if doctor:
        print(doctor_summary(path))


def auto_profile(fn: Callable | None = None, *, warmup: int = 3, iterations: int = 10,
                 out: str | Path | None = None, stack: bool = False, memory: bool = False,
                 doctor: bool = True) -> Callable:
    """Decorator: each call runs the function warmup + iterations times, profiles the iterations
    as steps, writes the trace, prints the doctor's verdict and returns the last result."""

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with profile(out, steps=iterations, warmup=warmup, stack=stack, memory=memory, doctor=doctor) as p:
                for _ in range(warmup + iterations):
                    result = f(*args, **kwargs)
                    p.step()
            return result

        return wrapper

    return decorate(fn) if fn is not None else decorate


def doctor_summary(path: str | Path, report: Any = None) -> str:
    """The doctor's verdict and top findings as text; a note instead when the doctor is missing or fails.
    `report`: the doctor's Report on `path` when the caller has it already."""
    try:
        from perflab.doctor import diagnose
    except ImportError:
        return "doctor not available"
    try:
        report = report if report is not None else diagnose(path)
    except PerflabError as exc:
        return f"doctor could not read {path}: {exc}"
    except Exception as exc:  # the doctor is another layer: its failure must not lose the trace
        return f"doctor failed on {path}: {type(exc).__name__}: {exc}"
    lines = [f"doctor: {report.verdict}"]
    lines += [f"  note: {n}" for n in report.source.get("notes") or []]  # what the reader left out
    for f in report.findings[:3]:
        lines.append(f"  {f.severity:<6} {f.id:<20} gain ~{f.gain_pct:.0f} %  {f.fix}")
    lines.append(f"  full report: perflab doctor {path}")
    return "\n".join(lines)


# ---- perflab profile -- CMD -------------------------------------------------------------------

def find_target(cmd: Sequence[str], target: str | None = None) -> dict[str, str]:
    """Which process(es) to profile: `{"script": realpath}` or `{"module": name}`.

    The first argument that is an existing .py file, else the last `-m MODULE` that is not a
    launcher; `target` (a script path or module name) overrides both.
    """
    if target:
        return {"script": os.path.realpath(target)} if os.path.isfile(target) else {"module": target}
    for arg in cmd:
        if arg.endswith(".py") and os.path.isfile(arg):
            return {"script": os.path.realpath(arg)}
    modules = [b for a, b in zip(cmd, cmd[1:]) if a == "-m" and b not in LAUNCHER_MODULES]
    if modules:
        return {"module": modules[-1]}
    raise PerflabError(f"cannot tell which Python script `{' '.join(cmd)}` runs: "
                       "name it with --target SCRIPT.py (or --target MODULE)")


@dataclass
class ProfiledRun:
    returncode: int
    traces: list[Path]
    processes: list[dict[str, Any]] = field(default_factory=list)  # what each profiled process reported

    def explain_missing(self, target: dict[str, str], warmup: int) -> str:
        """Why no trace was written, in one line."""
        common = bootstrap_missing(target, self.processes, "profiling")
        if common:
            return common
        p = self.processes[0]
        if p["boundaries"] == 0:
            return ("no step began: the script ended before its first nn.Module call or time slice; "
                    "mark steps with --marker")
        return (f"only {p['boundaries']} step(s) ({p['steps_by']}) and --warmup {warmup}: "
                "nothing left to record; lower --warmup")


def compile_lines(process: dict[str, Any]) -> list[str]:
    """What one-time work (compile, graph capture, autotuning) did to the steps of a profiled process, for the user."""
    facts = process.get("compile") or {}
    if not facts.get("events"):
        return []
    kinds = ", ".join(sorted(facts.get("kinds") or {}))
    lines = [f"perflab: {facts['seconds']:.1f} s of compilation/capture ({kinds}); "
             f"{facts.get('skipped_steps', 0)} step(s) that held it were not counted as warm-up"]
    if facts.get("restarts"):
        lines.append(f"perflab: recording restarted {facts['restarts']} time(s): compile work came back inside the "
                     "recorded steps")
    if facts.get("in_recorded_steps"):
        lines.append("perflab: the recorded steps still hold compile work (it kept coming back: new shapes? "
                     "`TORCH_LOGS=recompiles` names the cause); the doctor's numbers include it")
    return lines


def bootstrap_missing(target: dict[str, str], processes: list[dict[str, Any]], doing: str) -> str | None:
    """Why the bootstrap recorded nothing, when the reason is one every mode shares: no target process ran it,
    it failed, or torch was never imported; None otherwise."""
    what = target.get("script") or f"-m {target.get('module')}"
    if not processes:
        return (f"no process ran {what} with perflab's bootstrap: is perflab installed in the Python "
                "that the command runs (and not run with -I, -E or -S)?")
    p = processes[0]
    if p.get("error"):
        return f"{doing} failed in the profiled process: {p['error']}"
    if not p.get("torch"):
        return f"{what} never imported torch: nothing to record"
    return None


TRACE_GLOBS = ("trace.json.gz", "rank*.trace.json.gz")


def clear_traces(out: Path) -> None:
    """Remove traces a previous run left in `out` (only perflab's names), so ranks never mix. The CLI
    asks for --force before it lets a run reuse a folder (perflab.outputs.check_folder)."""
    for old in [p for pattern in TRACE_GLOBS for p in out.glob(pattern)]:
        old.unlink()


# Runs CMD with the environment given and returns its exit status (perflab.toolkit.investigate bounds it in time).
Runner = Callable[[Sequence[str], dict[str, str]], int]


def boot_env(config: dict[str, Any]) -> dict[str, str]:
    """The environment that makes CMD's target process(es) run perflab's bootstrap with `config`."""
    env = dict(os.environ)
    env[ENV_VAR] = json.dumps(config)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOT_DIR), env.get("PYTHONPATH")]))
    return env


def run_booted(cmd: Sequence[str], config: dict[str, Any], run: Runner | None = None) -> tuple[int, list[dict]]:
    """Run `cmd` with the bootstrap configured; its exit status and what each target process reported
    (one JSON file per process in a temporary `meta_dir`)."""
    meta_dir = Path(tempfile.mkdtemp(prefix="perflab-boot-"))
    try:
        env = boot_env({**config, "meta_dir": str(meta_dir)})
        returncode = run(cmd, env) if run is not None else wait(start_command(cmd, env=env))
        processes = [json.loads(p.read_text()) for p in sorted(meta_dir.glob("*.json"))]
    finally:
        shutil.rmtree(meta_dir, ignore_errors=True)
    return returncode, processes


def profile_command(cmd: Sequence[str], *, out: Path, steps: int = 10, warmup: int = 3, stack: bool = False,
                    memory: bool = False, marker: str | None = None, target: dict[str, str],
                    slice_s: float = 0.1, run: Runner | None = None,
                    memory_history: dict[str, Any] | None = None) -> ProfiledRun:
    """Run `cmd` with its target process(es) profiling themselves; see the module docstring. `run` runs the
    command (default: wait for it, Ctrl-C going to it). `memory_history` ({snapshot_dir, max_entries, keep}): also
    record the allocator's history in the same run (toolkit/memory_history.py)."""
    check_counts(steps, warmup)  # here: in the profiled process an error could only be reported
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    clear_traces(out)
    config = {"out": str(out), "steps": steps, "warmup": warmup, "stack": stack, "memory": memory,
              "marker": marker, "slice_s": slice_s, "program": list(cmd), **target}
    if memory_history:
        config["memory_history"] = memory_history
    returncode, processes = run_booted(cmd, config, run)
    processes.sort(key=lambda p: int(p["rank"]) if str(p.get("rank")).isdigit() else -1)
    traces = dict.fromkeys(Path(p["trace"]) for p in processes if p.get("trace"))  # ordered, no repeats
    return ProfiledRun(returncode, [t for t in traces if t.exists()], processes)


def start_command(cmd: Sequence[str], **popen: Any) -> subprocess.Popen:
    if not cmd:
        raise PerflabError("give the command after --, e.g. `-- python script.py`")
    try:
        return subprocess.Popen(list(cmd), **popen)
    except OSError as exc:
        raise PerflabError(f"cannot run {cmd[0]!r}: {exc.strerror or exc}") from None


def wait(proc: subprocess.Popen) -> int:
    """Wait for the command; Ctrl-C goes to it (same process group), not to perflab. Shell-style
    exit status: a command killed by signal N gives 128 + N."""
    restore = None
    if threading.current_thread() is threading.main_thread():
        restore = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc = proc.wait()
    finally:
        if restore is not None:
            signal.signal(signal.SIGINT, restore)
    return 128 - rc if rc < 0 else rc
