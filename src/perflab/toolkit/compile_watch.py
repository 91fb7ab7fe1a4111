"""Inside the profiled process: when torch.compile compiles, a CUDA graph is captured or kernels are autotuned, and
how perflab's hooks stay out of what torch.compile traces.

`CompileWatch` counts one-time work as it happens, from torch's own signals: Dynamo's compile callbacks
(`torch._dynamo.callback`: a frame compiled, Inductor's CUDA-graph trees recording, a lazy backward), CUDA graph
capture (`torch.cuda.CUDAGraph.capture_begin/capture_end`, which `torch.cuda.graph` and every graphing library
call), Inductor's runtime autotuning (`CachingAutotuner.benchmark_all_configs`) and Triton's `@autotune`
benchmarks. The step detector never counts a step that held such work, nor a boundary while it runs.

`Hider` keeps perflab's hooks invisible to Dynamo. A hook runs wherever the program runs: a signal handler fires
between any two bytecodes, also while compiled code runs with Dynamo's frame callback set, and Dynamo then traces
the handler into a graph (a `record_function` in it made Inductor fail with "Tried to serialize object
__torch__.torch.classes.profiler._RecordFunction"). Before torch._dynamo is imported nothing can be traced; once it
is, every hook the Hider installed is installed again as its `torch._dynamo.disable`d version, which runs it with
Dynamo's callback off.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from typing import Any, Callable, Iterator

from perflab.toolkit.import_hooks import when_imported

Apply = Callable[[Callable[[Callable], Callable]], None]


class Hider:
    """Installs hooks that torch.compile never traces (see the module docstring)."""

    def __init__(self) -> None:
        self.disable: Callable[[Callable], Callable] | None = None
        self._applies: list[Apply] = []

    def hide(self, apply: Apply) -> None:
        """`apply(wrap)` installs a hook, `wrap(fn)` being the function to install: fn itself, or once torch._dynamo
        is imported fn disabled for Dynamo. It runs now, and again when torch._dynamo is imported."""
        self._applies.append(apply)
        apply(self.wrap)

    def wrap(self, fn: Callable) -> Callable:
        return self.disable(fn) if self.disable is not None else fn

    def dynamo_imported(self, dynamo: Any) -> None:
        self.disable = lambda fn: dynamo.disable(fn, recursive=True)
        for apply in self._applies:
            apply(self.wrap)

    def clear(self) -> None:
        self._applies.clear()


class Invisible:
    """A callable whose calls go through the Hider: `.call(*args)`."""

    def __init__(self, fn: Callable, hider: Hider):
        self.fn, self.call = fn, fn
        hider.hide(lambda wrap: setattr(self, "call", wrap(fn)))


class CompileWatch:
    """One-time work (compile, capture, autotune) as it happens: nesting depth, how many began, total time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self.depth = 0
        self.count = 0
        self.total_s = 0.0
        self.kinds: Counter = Counter()
        self._since: float | None = None
        self.again: Callable[[], None] = lambda: None  # registers Dynamo's callbacks again after torch._dynamo.reset()

    def start(self, what: str) -> None:
        with self._lock:
            if self.depth == 0:
                self._since = self.clock()
            self.depth += 1
            self.count += 1
            self.kinds[what] += 1

    def end(self, _what: str = "") -> None:
        with self._lock:
            if self.depth == 0:
                return
            self.depth -= 1
            if self.depth == 0 and self._since is not None:
                self.total_s += self.clock() - self._since
                self._since = None

    @property
    def busy(self) -> bool:
        return self.depth > 0

    def busy_for(self) -> float:
        since = self._since
        return self.clock() - since if since is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.count, "seconds": round(self.total_s + self.busy_for(), 3), "kinds": dict(self.kinds)}

    def report_waits(self, write: Callable[[str], None], first_after_s: float = 2.0, every_s: float = 10.0,
                     poll_s: float = 0.5) -> Callable[[], None]:
        """Say "perflab: waiting for compilation to finish (N s)" while one piece of work runs longer than
        `first_after_s`, then every `every_s`; returns the stopper."""
        stop = threading.Event()

        def run() -> None:
            next_at = first_after_s
            while not stop.wait(poll_s):
                waited = self.busy_for()
                if waited == 0.0:
                    next_at = first_after_s
                elif waited >= next_at:
                    write(f"perflab: waiting for compilation to finish ({waited:.0f} s)\n")
                    next_at = waited + every_s

        threading.Thread(target=run, name="perflab-compile-wait", daemon=True).start()
        return stop.set


def _around(watch: CompileWatch, what: str, original: Callable, *, begins: bool = True, ends: bool = True) -> Callable:
    """`original` wrapped to start (begins) and end (ends) a piece of one-time work around its call."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if begins:
            watch.start(what)
        try:
            return original(*args, **kwargs)
        finally:
            if ends:
                watch.end(what)

    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapped


def watch_compiles(torch: Any, watch: CompileWatch, hider: Hider) -> Callable[[], None]:
    """Feed `watch` from torch's signals (module docstring) and hide perflab's hooks from Dynamo from the moment
    torch._dynamo is imported; returns the uninstaller."""
    restores: list[Callable[[], None]] = []
    installed = threading.Event()
    stopped = threading.Event()  # an import after the uninstaller ran installs nothing

    def patch(owner: Any, attr: str, what: str, **ends: bool) -> None:
        original = owner.__dict__.get(attr)
        if stopped.is_set() or original is None or getattr(original, "__wrapped__", None) is not None:
            return
        hider.hide(lambda wrap: setattr(owner, attr, wrap(_around(watch, what, original, **ends))))
        restores.append(lambda: setattr(owner, attr, original))

    def on_dynamo(dynamo: Any) -> None:
        if installed.is_set() or stopped.is_set():
            return
        installed.set()
        hider.dynamo_imported(dynamo)
        handler = getattr(dynamo, "callback_handler", None)
        if handler is None:
            return
        start = hider.wrap(lambda *args: watch.start(_trigger(args)))
        end = hider.wrap(lambda *args: watch.end(_trigger(args)))
        register_callbacks(handler, start, end)
        restores.append(lambda: _remove_callbacks(handler, start, end))
        watch.again = lambda: register_callbacks(handler, start, end)

    graph_cls = getattr(getattr(getattr(torch, "cuda", None), "graphs", None), "CUDAGraph", None)
    if graph_cls is not None:  # capture_end ends what capture_begin began (torch.cuda.graph calls both)
        patch(graph_cls, "capture_begin", "cuda-graph-capture", ends=False)
        patch(graph_cls, "capture_end", "cuda-graph-capture", begins=False)
    when_imported("torch._dynamo", on_dynamo)
    when_imported("torch._inductor.runtime.triton_heuristics",
                  lambda m: _patch_class(m, "CachingAutotuner", "benchmark_all_configs", patch, "inductor-autotune"))
    when_imported("triton.runtime.autotuner", lambda m: _patch_class(m, "Autotuner", "_bench", patch, "triton-autotune"))

    def uninstall() -> None:
        stopped.set()
        hider.clear()
        while restores:
            restores.pop()()

    return uninstall


def _patch_class(module: Any, cls_name: str, attr: str, patch: Callable, what: str) -> None:
    cls = getattr(module, cls_name, None)
    if cls is not None and attr in cls.__dict__:
        patch(cls, attr, what)


def _trigger(args: tuple) -> str:
    trigger = getattr(args[0], "callback_trigger", None) if args else None
    return f"torch.compile ({trigger.name.lower()})" if trigger is not None else "torch.compile"


def register_callbacks(handler: Any, start: Callable, end: Callable) -> None:
    """Dynamo's callbacks, again if `torch._dynamo.reset()` cleared them."""
    if start not in handler.start_callbacks:
        handler.register_start_callback(start)
    if end not in handler.end_callbacks:
        handler.register_end_callback(end)


def _remove_callbacks(handler: Any, start: Callable, end: Callable) -> None:
    for callbacks, fn in ((handler.start_callbacks, start), (handler.end_callbacks, end)):
        if fn in callbacks:
            callbacks.remove(fn)


@contextlib.contextmanager
def watching(torch: Any) -> Iterator[CompileWatch]:
    """A CompileWatch fed for the duration of the block (in-process timing: the fix checker)."""
    watch = CompileWatch()
    uninstall = watch_compiles(torch, watch, Hider())
    try:
        yield watch
    finally:
        uninstall()


def warm_until_steady(run: Callable[[], Any], watch: CompileWatch, at_most: int = 20) -> int:
    """Call `run` until one call does no compile work (a recompile, a CUDA graph recorded, autotuning), at most
    `at_most` times; how many calls it took."""
    for n in range(1, at_most + 1):
        seen = watch.count
        run()
        if watch.count == seen and not watch.busy:
            return n
    return at_most
