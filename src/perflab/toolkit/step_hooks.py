"""The signals of step boundaries in a program perflab profiles unmodified, wired to torch.

- top-level calls: an `nn.Module` call, a call of what `torch.compile` returned for a function, a CUDA graph
  replay, each when not nested in another of them (a compiled module is a module; a graph replayed inside a
  compiled call belongs to that call);
- a named range (`--marker`): an outermost `record_function` or NVTX range of that name;
- a clock tick on the main thread (time slices), never while torch traces.

Every hook stays outside what torch.compile traces: the call wrappers step aside while Dynamo traces
(`torch.compiler.is_compiling()`, checked first), and what they call, the tick's signal handler and the marker
hooks go through the compile watch's Hider (torch._dynamo.disable once Dynamo is imported).
"""
from __future__ import annotations

import functools
import signal
import threading
from typing import Any, Callable

from perflab.toolkit.compile_watch import Hider, Invisible

CallKind = str  # "module" | "compiled" | "graph"
TICK_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else None


def install_calls(torch: Any, on_call: Callable[[CallKind], None], hider: Hider) -> Callable[[], None]:
    """Call on_call(kind) before every top-level call (module docstring); returns the uninstaller.

    Patches nn.Module.__call__ instead of registering global forward hooks: global hooks force every module
    call (nested ones too) through the slow hook path, about 3 µs each on a CPU here, which would inflate
    exactly the host overhead a profile is meant to show; the wrapper costs one Python frame.
    """
    is_compiling = torch.compiler.is_compiling
    local = threading.local()
    report = Invisible(on_call, hider)
    restores: list[Callable[[], None]] = []

    def top_level(kind: CallKind, call: Callable, *args: Any, **kwargs: Any) -> Any:
        local.inside = True
        try:
            report.call(kind)
            return call(*args, **kwargs)
        finally:
            local.inside = False

    module_cls = torch.nn.Module
    module_call = module_cls.__call__

    def __call__(self, *args, **kwargs):
        if is_compiling() or getattr(local, "inside", False):
            return module_call(self, *args, **kwargs)
        return top_level("module", module_call, self, *args, **kwargs)

    __call__.__wrapped__ = module_call  # type: ignore[attr-defined]
    module_cls.__call__ = __call__
    restores.append(lambda: setattr(module_cls, "__call__", module_call) if module_cls.__call__ is __call__ else None)

    compile_fn = torch.compile

    def stepped(compiled: Callable) -> Callable:
        if isinstance(compiled, module_cls) or not callable(compiled):
            return compiled  # an OptimizedModule: its calls are module calls

        @functools.wraps(compiled)
        def compiled_call(*args, **kwargs):
            if is_compiling() or getattr(local, "inside", False):
                return compiled(*args, **kwargs)
            return top_level("compiled", compiled, *args, **kwargs)

        return compiled_call

    @functools.wraps(compile_fn)
    def compile(model=None, *args, **kwargs):
        result = compile_fn(model, *args, **kwargs)
        # torch.compile(**options) returns a decorator that calls torch.compile again (this one) with the model
        return result if model is None else stepped(result)

    torch.compile = compile
    restores.append(lambda: setattr(torch, "compile", compile_fn) if torch.compile is compile else None)

    graph_cls = getattr(getattr(torch.cuda, "graphs", None), "CUDAGraph", None)
    replay = graph_cls.__dict__.get("replay") if graph_cls is not None else None
    if replay is not None:
        def graph_replay(self, *args, **kwargs):
            if getattr(local, "inside", False):
                return replay(self, *args, **kwargs)
            return top_level("graph", replay, self, *args, **kwargs)

        graph_replay.__wrapped__ = replay  # type: ignore[attr-defined]
        hider.hide(lambda wrap: setattr(graph_cls, "replay", wrap(graph_replay)))
        restores.append(lambda: setattr(graph_cls, "replay", replay))

    def uninstall() -> None:
        while restores:
            restores.pop()()

    return uninstall


def marker_matcher(name: str) -> Callable[[str], bool]:
    """Whether a range's name is the marker: the name itself, or every name the regular expression matches whole
    (an engine names each iteration after its batch: `execute_context_.*`)."""
    import re

    try:
        regex = re.compile(name)
    except re.error:
        return lambda text: text == name
    return lambda text: isinstance(text, str) and (text == name or regex.fullmatch(text) is not None)


def install_marker(torch: Any, name: str, on_enter: Callable[[], None], hider: Hider) -> Callable[[], None]:
    """Call on_enter when an outermost record_function or NVTX range named by `name` opens (marker_matcher)."""
    is_marker = marker_matcher(name)
    local = threading.local()
    rf = torch.autograd.profiler.record_function
    enter, exit_ = rf.__enter__, rf.__exit__
    report = Invisible(on_enter, hider)

    def depth_change(delta: int) -> int:
        local.depth = getattr(local, "depth", 0) + delta
        return local.depth

    def rf_enter(self):
        if is_marker(self.name) and depth_change(1) == 1:
            report.call()  # before the range opens, so ProfilerStep#N encloses it
        return enter(self)

    def rf_exit(self, *exc):
        if is_marker(self.name):
            depth_change(-1)
        return exit_(self, *exc)

    rf.__enter__, rf.__exit__ = rf_enter, rf_exit
    restores = [lambda: setattr(rf, "__enter__", enter), lambda: setattr(rf, "__exit__", exit_)]

    nvtx = torch.cuda.nvtx
    push, pop = nvtx.range_push, nvtx.range_pop

    def range_push(msg, *a, **k):
        stack = local.__dict__.setdefault("nvtx", [])
        stack.append(msg)
        if is_marker(msg) and sum(1 for m in stack if is_marker(m)) == 1:
            report.call()
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


def install_ticker(torch: Any, on_tick: Callable[[], None], every_s: float, hider: Hider,
                   on_skip: Callable[[], None] = lambda: None) -> Callable[[], None] | None:
    """Run on_tick on the main thread every `every_s` seconds; None where that is not possible.

    The profiler records only the thread that starts it, so ticks must run on the main thread. A helper thread
    asks for them with _thread.interrupt_main(TICK_SIGNAL): Python runs the handler of that signal on the main
    thread at its next bytecode, and no OS signal is sent, so no system call of the script (or of a C extension)
    sees EINTR. A real-time signal number keeps clear of signals that scripts handle themselves. The handler can
    land in compiled code: it is installed through the Hider.

    A tick lands between any two bytecodes, so on_skip runs instead of on_tick where a tick must not enter torch:
    inside an import (starting the profiler imports modules), or while torch traces (`torch_is_tracing`). A tick
    that lands while the previous one still runs is dropped: torch's dispatch is not re-entrant either.
    """
    import _thread

    if threading.current_thread() is not threading.main_thread() or TICK_SIGNAL is None:
        return None
    running = False

    def handler(_signum: int, frame: Any) -> None:
        nonlocal running
        if running:
            return
        running = True
        try:
            if _importing(frame) or torch_is_tracing(torch):
                on_skip()
            else:
                on_tick()
        finally:
            running = False

    def install(wrap: Callable[[Callable], Callable]) -> None:
        if threading.current_thread() is threading.main_thread():  # torch._dynamo imported on another thread
            signal.signal(TICK_SIGNAL, wrap(handler))

    previous = signal.getsignal(TICK_SIGNAL)
    hider.hide(install)
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every_s):
            _thread.interrupt_main(TICK_SIGNAL)

    threading.Thread(target=run, name="perflab-step-ticker", daemon=True).start()

    def uninstall() -> None:
        stop.set()
        if threading.current_thread() is threading.main_thread():
            signal.signal(TICK_SIGNAL, previous)

    return uninstall


def torch_is_tracing(torch: Any) -> bool:
    """Whether this thread is inside torch's tracing machinery, where an op the tick dispatches would be seen by
    the program's tracer (recorded into a make_fx / torch.export graph, run on fake tensors) or would re-enter
    torch's Python dispatcher mid-update (OpOverload._get_dispatch fills an op's dispatch cache: a tick landing
    there that calls the same op makes the interrupted call fail with "... already in dispatch cache").

    Torch-function modes are left out: `torch.set_default_device` keeps one active for a whole program, and they
    pass the tick's record_function through. Reads thread-local state only, no op is dispatched.
    """
    C = torch._C
    try:
        if C._len_torch_dispatch_stack() > 0 or C._dispatch_tls_is_dispatch_key_included(
                C.DispatchKey.PythonDispatcher):
            return True
    except AttributeError:   # a torch without these private hooks: the tick must not break the program
        return False
    pre_dispatch = getattr(getattr(torch, "_ops", None), "_len_torch_dispatch_stack_pre_dispatch", None)
    return pre_dispatch is not None and pre_dispatch() > 0


def _importing(frame: Any) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False
