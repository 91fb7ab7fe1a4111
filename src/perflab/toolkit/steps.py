"""Where steps begin in a script that perflab profiles unmodified.

Priority: a range the user names (`--marker NAME`: `torch.profiler.record_function` or an NVTX
range), else each top-level `nn.Module` call (a call not nested in another module call), else time
slices. The detector is pure logic over three signals (marker entered, module called, clock tick);
`install` wires those signals to torch inside the profiled process, and `bootstrap` is what the
`sitecustomize` that `perflab profile` puts on PYTHONPATH runs in the target process.
"""
from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Protocol


class _Session(Protocol):
    done: bool

    def begin(self) -> None: ...
    def step(self) -> None: ...
    def close(self) -> Path | None: ...
    def discard(self) -> None: ...


class StepDetector:
    """Turns step signals into session.begin()/step() calls.

    Without a marker it starts in time mode; the first top-level module call supersedes time mode
    (the time-mode session, if any, is discarded) because module calls are the better boundary.
    Boundaries count only on one thread of this process: the first one that reports (the profiler
    records the thread that starts it).
    """

    def __init__(self, new_session: Callable[[], _Session], marker: str | None = None,
                 on_done: Callable[[], None] | None = None):
        self.new_session = new_session
        self.marker = marker
        self.mode = "marker" if marker else "time"
        self.on_done = on_done
        self.session: _Session | None = None
        self.finished = False
        self.error: str | None = None
        self.boundaries = 0
        self.owner: int | None = None
        self.pid = os.getpid()  # a forked child (a DataLoader worker) inherits the hooks, not the profiler
        self._busy = False  # a tick (signal handler) can arrive while a boundary is being handled

    @property
    def done(self) -> bool:
        return self.session is not None and self.session.done

    def marker_entered(self) -> None:
        if self.mode == "marker":
            self._boundary()

    def module_called(self) -> None:
        if self.mode == "time":
            self._switch("module")
        if self.mode == "module":
            self._boundary()

    def tick(self) -> None:
        if self.mode == "time":
            self._boundary()

    def finish(self) -> Path | None:
        """Stop profiling (a trace still recording is saved as it is) and return the trace path."""
        self.finished = True
        return self._guarded(self.session.close) if self.session is not None else None

    def describe(self) -> str | None:
        """What the steps were, for the user; None when no step began."""
        if self.boundaries == 0:
            return None
        return {"marker": f"entries of the range {self.marker!r}", "module": "top-level nn.Module calls",
                "time": "time slices (no nn.Module call seen)"}[self.mode]

    def _switch(self, mode: str) -> None:
        session, self.session, self.boundaries, self.owner, self.mode = self.session, None, 0, None, mode
        if session is not None:
            self._guarded(session.discard)

    def _boundary(self) -> None:
        if self._busy or self.done or self.finished or os.getpid() != self.pid:
            return
        me = threading.get_ident()
        if self.owner is None:
            self.owner = me
        elif self.owner != me:
            return
        self._busy = True
        try:
            self._guarded(self._begin_or_step)
        finally:
            self._busy = False
        # A finished time-mode trace can still be superseded by module calls: keep the hooks then.
        if (self.finished or self.done) and self.mode != "time" and self.on_done is not None:
            self.on_done()

    def _begin_or_step(self) -> None:
        if self.session is None:
            self.session = self.new_session()
            self.session.begin()
        else:
            self.session.step()
        self.boundaries += 1

    def _guarded(self, action: Callable[[], Any]) -> Any:
        """Runs inside the user's forward or at a tick: a failure is recorded and stops profiling,
        it never raises into the user's code."""
        try:
            return action()
        except Exception as exc:
            self.error = self.error or f"{type(exc).__name__}: {exc}"
            self.finished = True
            return None


def install_module_calls(torch: Any, on_call: Callable[[], None]) -> Callable[[], None]:
    """Call on_call before every top-level nn.Module call; returns the uninstaller.

    Patches nn.Module.__call__ instead of registering global forward hooks: global hooks force every
    module call (nested ones too) through the slow hook path, about 3 µs each on a CPU here, which
    would inflate exactly the host overhead a profile is meant to show; the wrapper costs one
    Python frame. Calls made while torch.compile traces are passed through untouched.
    """
    module_cls = torch.nn.Module
    original = module_cls.__call__
    is_compiling = torch.compiler.is_compiling
    local = threading.local()

    def __call__(self, *args, **kwargs):
        if getattr(local, "inside", False) or is_compiling():
            return original(self, *args, **kwargs)
        local.inside = True
        try:
            on_call()
            return original(self, *args, **kwargs)
        finally:
            local.inside = False

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    module_cls.__call__ = __call__

    def uninstall() -> None:
        if module_cls.__call__ is __call__:
            module_cls.__call__ = original

    return uninstall


def install_marker(torch: Any, name: str, on_enter: Callable[[], None]) -> Callable[[], None]:
    """Call on_enter when an outermost record_function or NVTX range called `name` opens."""
    local = threading.local()
    rf = torch.autograd.profiler.record_function
    enter, exit_ = rf.__enter__, rf.__exit__

    def depth_change(delta: int) -> int:
        local.depth = getattr(local, "depth", 0) + delta
        return local.depth

    def rf_enter(self):
        if self.name == name and depth_change(1) == 1:
            on_enter()  # before the range opens, so ProfilerStep#N encloses it
        return enter(self)

    def rf_exit(self, *exc):
        if self.name == name:
            depth_change(-1)
        return exit_(self, *exc)

    rf.__enter__, rf.__exit__ = rf_enter, rf_exit
    restores = [lambda: setattr(rf, "__enter__", enter), lambda: setattr(rf, "__exit__", exit_)]

    nvtx = torch.cuda.nvtx
    push, pop = nvtx.range_push, nvtx.range_pop

    def range_push(msg, *a, **k):
        stack = local.__dict__.setdefault("nvtx", [])
        stack.append(msg)
        if msg == name and stack.count(name) == 1:
            on_enter()
        return push(msg, *a, **k)

    def range_pop(*a, **k):
        stack = local.__dict__.setdefault("nvtx", [])
        if stack:
            stack.pop()
        return pop(*a, **k)

    nvtx.range_push, nvtx.range_pop = range_push, range_pop
    restores += [lambda: setattr(nvtx, "range_push", push), lambda: setattr(nvtx, "range_pop", pop)]

    def uninstall() -> None:
        for restore in restores:
            restore()

    return uninstall


def install_ticker(on_tick: Callable[[], None], every_s: float) -> Callable[[], None] | None:
    """Run on_tick on the main thread every `every_s` seconds; None where that is not possible.

    The profiler records only the thread that starts it, so ticks must run on the main thread. A
    helper thread asks for them with _thread.interrupt_main(signum): Python runs the handler of that
    signal on the main thread at its next bytecode, and no OS signal is sent, so no system call
    of the script (or of a C extension) sees EINTR. A real-time signal number keeps clear of
    signals that scripts handle themselves.
    """
    import _thread
    import signal

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGRTMIN"):
        return None
    signum = signal.SIGRTMIN + 3

    def handler(_signum: int, frame: Any) -> None:
        if not _importing(frame):  # starting the profiler imports modules: not inside another import
            on_tick()

    previous = signal.signal(signum, handler)
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every_s):
            _thread.interrupt_main(signum)

    threading.Thread(target=run, name="perflab-step-ticker", daemon=True).start()

    def uninstall() -> None:
        stop.set()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, previous)

    return uninstall


def _importing(frame: Any) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a module is first imported (so perflab does not import torch
    itself, and a script that sets environment variables before `import torch` keeps working)."""

    def __init__(self, name: str, callback: Callable[[Any], None]):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module, callback = spec.loader.exec_module, self.callback

        def exec_then_callback(module):
            exec_module(module)
            callback(module)

        spec.loader.exec_module = exec_then_callback  # type: ignore[method-assign]
        return spec


def bootstrap(config: dict[str, Any]) -> None:
    """Set up step detection and profiling in this (target) process; see perflab.toolkit.profile."""
    from perflab.toolkit.allocator_stats import memory_stats
    from perflab.toolkit.profile import Session, trace_path

    out = Path(config["out"])
    finished = threading.Event()
    detectors: list[StepDetector] = []
    uninstallers: list[Callable[[], None]] = []

    def uninstall() -> None:
        while uninstallers:
            uninstallers.pop()()

    def new_session() -> Session:
        return Session(trace_path(out), steps=config["steps"], warmup=config["warmup"],
                       stack=config.get("stack", False), memory=config.get("memory", False))

    def on_torch(torch: Any) -> None:
        detector = StepDetector(new_session, marker=config.get("marker"), on_done=uninstall)
        detectors.append(detector)
        if detector.marker:
            uninstallers.append(install_marker(torch, detector.marker, detector.marker_entered))
        else:
            uninstallers.append(install_module_calls(torch, detector.module_called))
            ticker = install_ticker(detector.tick, config.get("slice_s", 0.1))
            if ticker is not None:
                uninstallers.append(ticker)
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
        }
        report_meta(config, meta)

    atexit.register(finish)
    when_torch_imported(on_torch)


def when_torch_imported(callback: Callable[[Any], None]) -> None:
    """Call `callback(torch)` now if torch is imported, else right after its first import."""
    if "torch" in sys.modules:
        callback(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterImport("torch", callback))


def report_meta(config: dict[str, Any], meta: dict[str, Any]) -> None:
    """What this process tells perflab: one JSON file per process in the run's meta_dir."""
    (Path(config["meta_dir"]) / f"{os.getpid()}.json").write_text(json.dumps(meta))
