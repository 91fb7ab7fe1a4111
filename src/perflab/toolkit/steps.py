"""Where steps begin in a script that perflab profiles unmodified, and when they are steady state.

Priority: a range the user names (`--marker NAME`: `torch.profiler.record_function` or an NVTX range), else each
top-level call (an `nn.Module` call, a call of a `torch.compile`d function, a CUDA graph replay, not nested in
another), else time slices. The detector is pure logic over its signals (marker entered, top-level call, clock
tick, a tick skipped in an import or in torch's tracing) and a compile watch (toolkit/compile_watch.py): a boundary
while the program compiles, captures a CUDA graph or autotunes is no boundary, and a step that held such work (or a
skipped tick) is not steady state: it never counts as warm-up, and one inside the recorded steps restarts the
recording (a few times, then the trace keeps it and says so). step_hooks.py wires the signals to torch inside the
profiled process, and `bootstrap` is what the `sitecustomize` that `perflab profile` puts on PYTHONPATH runs in the
target process.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Protocol

from perflab.toolkit.compile_watch import CompileWatch
from perflab.toolkit.import_hooks import when_imported

MAX_RESTARTS = 3  # recordings restarted for compile work in their steps before one is kept as it is
CALL_NAMES = {"module": "nn.Module", "compiled": "torch.compile'd function", "graph": "CUDA graph replay"}


class _Session(Protocol):
    done: bool

    def begin(self, first_step: int = 0) -> None: ...
    def step(self) -> None: ...
    def close(self) -> Path | None: ...
    def discard(self) -> None: ...


class StepDetector:
    """Turns step signals into session.begin()/step() calls.

    Without a marker it starts in time mode; the first top-level call supersedes time mode (the time-mode
    session, if any, is discarded) because calls are the better boundary. Boundaries count only on one thread of
    this process: the first one that reports (the profiler records the thread that starts it). `warmup` steady
    steps pass before the session begins; the session's own warm-up is its first step (new_session's job).
    """

    def __init__(self, new_session: Callable[[], _Session], marker: str | None = None,
                 on_done: Callable[[], None] | None = None, warmup: int = 0, watch: CompileWatch | None = None):
        self.new_session = new_session
        self.marker = marker
        self.mode = "marker" if marker else "time"
        self.on_done = on_done
        self.watch = watch or CompileWatch()
        self.pre_warmup = max(warmup - 1, 0)
        self.session: _Session | None = None
        self.finished = False
        self.error: str | None = None
        self.boundaries = 0
        self.owner: int | None = None
        self.pid = os.getpid()  # a forked child (a DataLoader worker) inherits the hooks, not the profiler
        self._busy = False  # a tick (signal handler) can arrive while a boundary is being handled
        self.calls: dict[str, int] = {}
        self.open = False        # a step is open (a boundary was seen)
        self.steady = 0          # steady steps in a row before the session began
        self.skipped = 0         # steps not counted: they held compile work or imports
        self.restarts = 0        # recordings discarded for compile work in their steps
        self.compile_in_window = False
        self._seen = 0           # watch.count at the last boundary
        self._unsteady = False   # a skipped tick or a boundary during compile work since the last boundary

    @property
    def done(self) -> bool:
        return self.session is not None and self.session.done

    def marker_entered(self) -> None:
        if self.mode == "marker":
            self._boundary()

    def called(self, kind: str = "module") -> None:
        """A top-level call (step_hooks.CallKind). The first top-level CUDA graph replay supersedes the module
        calls seen before it, as calls supersede time slices: those calls warmed up and captured the graph (a
        serving loop replays graphs and calls no module), so their recording, finished or not, is discarded."""
        if kind == "graph" and self.mode in ("time", "module") and not self.finished:
            self._switch("graph")
        if self.mode == "time":
            self._switch("module")
        if self.mode == "module" or (self.mode == "graph" and kind == "graph"):
            self.calls[kind] = self.calls.get(kind, 0) + 1
            self._boundary()

    module_called = called

    def tick(self) -> None:
        if self.mode == "time":
            self._boundary()

    def tick_skipped(self) -> None:
        """A tick landed in an import or while torch traced (step_hooks.install_ticker): one-time work."""
        self._unsteady = True

    def finish(self) -> Path | None:
        """Stop profiling (a trace still recording is saved as it is) and return the trace path."""
        self.finished = True
        return self._guarded(self.session.close) if self.session is not None else None

    def describe(self) -> str | None:
        """What the steps were, for the user; None when no step began."""
        if self.boundaries == 0:
            return None
        if self.mode in ("module", "graph"):
            kinds = [CALL_NAMES.get(k, k) for k in sorted(self.calls, key=self.calls.get, reverse=True)]
            return f"top-level {' and '.join(kinds) or 'nn.Module'} calls"
        return {"marker": f"entries of the range {self.marker!r}", "time": "time slices (no top-level call seen)"}[
            self.mode]

    def compile_facts(self) -> dict[str, Any]:
        """What the watch saw and what it cost the steps, for the run's record."""
        return {**self.watch.to_dict(), "skipped_steps": self.skipped, "restarts": self.restarts,
                "in_recorded_steps": self.compile_in_window}

    def _switch(self, mode: str) -> None:
        session, self.session, self.boundaries, self.owner, self.mode = self.session, None, 0, None, mode
        self.open, self.steady, self.restarts, self.compile_in_window = False, 0, 0, False
        self.calls = {}
        if session is not None:
            self._guarded(session.discard)

    def _boundary(self) -> None:
        if self._busy or self.done or self.finished or os.getpid() != self.pid:
            return
        if self.watch.busy:
            self._unsteady = True  # not a boundary: the step goes on, and is not steady
            return
        me = threading.get_ident()
        if self.owner is None:
            self.owner = me
        elif self.owner != me:
            return
        self._busy = True
        try:
            self.watch.again()
            self._guarded(self._advance)
        finally:
            self._busy = False
        # A finished time-mode trace can still be superseded by calls, and a module-call one by graph replays:
        # keep the hooks then.
        if self.on_done is not None and self.mode != "time" and (self.finished or (self.done and self.mode != "module")):
            self.on_done()

    def _advance(self) -> None:
        steady = self.watch.count == self._seen and not self._unsteady
        self._seen, self._unsteady = self.watch.count, False
        if self.session is not None and not steady and self.open:
            if self.restarts >= MAX_RESTARTS:
                self.compile_in_window = True
            else:
                session, self.session = self.session, None
                self.restarts += 1
                session.discard()
        if self.session is not None:
            self.session.step()
        else:
            if self.open:
                self.steady = self.steady + 1 if steady else 0
                self.skipped += 0 if steady else 1
            if self.steady >= self.pre_warmup:
                self.session = self.new_session()
                self.session.begin(self.boundaries)
        self.open = True
        self.boundaries += 1

    def _guarded(self, action: Callable[[], Any]) -> Any:
        """Runs inside the user's program or at a tick: a failure is recorded and stops profiling,
        it never raises into the user's code."""
        try:
            return action()
        except Exception as exc:
            self.error = self.error or f"{type(exc).__name__}: {exc}"
            self.finished = True
            return None


def bootstrap(config: dict[str, Any]) -> None:
    """Set up step detection and profiling in this (target) process; see perflab.toolkit.profile."""
    from perflab.toolkit.allocator_stats import memory_stats
    from perflab.toolkit.profile import Session, trace_path

    out = Path(config["out"])
    finished = threading.Event()
    detectors: list[StepDetector] = []
    uninstallers: list[Callable[[], None]] = []
    history = None
    if config.get("memory_history"):  # investigate's level 1: the allocator's history in the same run
        from perflab.toolkit.memory_history import History, QuietWhileRecording

        history = History(config["memory_history"])

    def uninstall() -> None:
        while uninstallers:
            uninstallers.pop()()

    recorders: list = []

    def new_session() -> Session:
        # the detector lets warmup - 1 steady steps pass; the profiler's own warm-up step is the last one
        session = Session(trace_path(out), steps=config["steps"], warmup=min(config["warmup"], 1),
                          stack=config.get("stack", False), memory=config.get("memory", False),
                          program=config.get("program"), captures=recorders[0] if recorders else None)
        return QuietWhileRecording(session, history) if history is not None else session

    def on_torch(torch: Any) -> None:
        from perflab.toolkit.compile_watch import Hider, watch_compiles
        from perflab.toolkit.step_hooks import install_calls, install_marker, install_ticker

        if history is not None:
            history.start(torch)
        hider, watch = Hider(), CompileWatch()
        detector = StepDetector(new_session, marker=config.get("marker"), on_done=uninstall,
                                warmup=config["warmup"], watch=watch)
        detectors.append(detector)
        uninstallers.append(watch_compiles(torch, watch, hider))
        if config.get("captures", True):   # after watch_compiles: its capture hooks stay inside ours
            from perflab.toolkit.capture_record import CaptureRecorder, install_capture_recorder

            recorders.append(CaptureRecorder(torch, busy=lambda: detector.session is not None))
            uninstallers.append(install_capture_recorder(torch, recorders[0], hider))
        uninstallers.append(watch.report_waits(sys.stderr.write))
        if detector.marker:
            uninstallers.append(install_marker(torch, detector.marker, detector.marker_entered, hider))
        else:
            uninstallers.append(install_calls(torch, detector.called, hider))
            ticker = install_ticker(torch, detector.tick, config.get("slice_s", 0.1), hider,
                                    on_skip=detector.tick_skipped)
            if ticker is not None:
                uninstallers.append(ticker)
        uninstallers.append(hider.clear)  # first: no hook is installed again once uninstalling began
        # atexit runs handlers last-in first-out: registered now, after torch's own import-time
        # handlers, this one runs before them, while the profiler still works.
        atexit.register(finish)

    def finish() -> None:
        if finished.is_set():
            return  # registered twice once torch is imported
        finished.set()
        uninstall()
        detector = detectors[0] if detectors else None
        trace = detector.finish() if detector is not None else None
        session = detector.session if detector is not None else None
        meta = {
            "pid": os.getpid(), "rank": os.environ.get("RANK", os.environ.get("LOCAL_RANK")),
            "torch": detector is not None, "steps_by": detector.describe() if detector else None,
            "boundaries": detector.boundaries if detector else 0,
            "recorded_steps": session.recorded_steps if session is not None else 0,
            "trace": str(trace) if trace else None, "error": detector.error if detector else None,
            "memory": memory_stats(sys.modules.get("torch")),
            "compile": detector.compile_facts() if detector else None,
            "captures": ({"recorded": len(recorders[0].captures), "skipped": recorders[0].skipped,
                          "error": recorders[0].error} if recorders else None),
        }
        if history is not None:
            meta["history"] = history.finish(meta["memory"])
        report_meta(config, meta)

    atexit.register(finish)
    when_torch_imported(on_torch)


def when_torch_imported(callback: Callable[[Any], None]) -> None:
    """Call `callback(torch)` now if torch is imported, else right after its first import."""
    when_imported("torch", callback)


def report_meta(config: dict[str, Any], meta: dict[str, Any]) -> None:
    """What this process tells perflab: one JSON file per process in the run's meta_dir."""
    (Path(config["meta_dir"]) / f"{os.getpid()}.json").write_text(json.dumps(meta))
