"""The clock tick (step_hooks.install_ticker) lands between any two bytecodes of the user's program: it must never
enter torch where that changes or breaks what the program does. Each test makes a tick land at one such moment,
deterministically: the main thread asks for the tick itself (_thread.interrupt_main), and Python runs the handler
at its next bytecode."""
import _thread

import pytest

torch = pytest.importorskip("torch")
from perflab.toolkit.compile_watch import Hider  # noqa: E402
from perflab.toolkit.step_hooks import TICK_SIGNAL, install_ticker  # noqa: E402

pytestmark = pytest.mark.skipif(TICK_SIGNAL is None, reason="no real-time signals here")


class Ticks:
    """A ticker whose ticks enter a record_function, as the profiler's step does; only ticks asked for land."""

    def __init__(self):
        self.ran, self.skipped, self.depth, self.deepest = 0, 0, 0, 0
        self.inside = lambda: None

    def on_tick(self):
        self.depth += 1
        self.deepest = max(self.deepest, self.depth)
        try:
            with torch.autograd.profiler.record_function("perflab-tick"):
                self.ran += 1
                self.inside()
        finally:
            self.depth -= 1

    def on_skip(self):
        self.skipped += 1

    def __enter__(self):
        self.undo = install_ticker(torch, self.on_tick, 3600, Hider(), on_skip=self.on_skip)
        return self

    def __exit__(self, *exc):
        self.undo()


def land_tick():
    _thread.interrupt_main(TICK_SIGNAL)
    pass  # the handler has run by the next bytecode


def test_a_tick_landing_while_torch_fills_an_ops_dispatch_cache_never_breaks_the_call():
    """The flake this guards against: a tick landed in OpOverload._get_dispatch (run by torch's Python dispatcher
    on a cache miss, here inside Dynamo's tracing) and its record_function filled the same cache entry, so the
    interrupted call failed with "profiler._record_function_exit._RecordFunction ... already in dispatch cache"."""
    from torch._dispatch.python import enable_python_dispatcher

    ops = [torch.ops.profiler._record_function_enter_new.default,
           torch.ops.profiler._record_function_exit._RecordFunction]
    landed = []

    def lands_in(get_dispatch):
        def first_bytecodes(key):
            if not landed:
                landed.append(key)
                land_tick()
            return get_dispatch(key)
        return first_bytecodes

    with Ticks() as ticks:
        try:
            for op in ops:
                op._dispatch_cache.clear()  # a cold cache, as on the first trace in a process
                op._get_dispatch = lands_in(op._get_dispatch)
            with enable_python_dispatcher():
                with torch.autograd.profiler.record_function("the program's range"):
                    pass
        finally:
            for op in ops:
                del op._get_dispatch
        land_tick()
    assert landed, "the tick never landed in _get_dispatch: the check proves nothing"
    assert (ticks.skipped, ticks.ran) == (1, 1)  # skipped while torch dispatched in Python, ran once outside


def test_a_tick_landing_while_make_fx_traces_stays_out_of_the_traced_graph():
    from torch.fx.experimental.proxy_tensor import make_fx

    def program(x):
        y = x + 1
        land_tick()
        return y * 2

    with Ticks() as ticks:
        graph = make_fx(program)(torch.ones(2))
        with torch._subclasses.fake_tensor.FakeTensorMode():
            land_tick()
        land_tick()
    assert "profiler" not in graph.code and "record_function" not in graph.code, graph.code
    assert (ticks.skipped, ticks.ran) == (2, 1)


def test_a_tick_landing_while_a_tick_runs_is_dropped():
    with Ticks() as ticks:
        ticks.inside = lambda: land_tick() if ticks.depth == 1 else None
        land_tick()
        land_tick()
    assert (ticks.ran, ticks.deepest) == (2, 1)


def test_a_torch_without_the_private_tracing_hooks_is_never_tracing():
    from types import SimpleNamespace

    from perflab.toolkit.step_hooks import torch_is_tracing

    assert torch_is_tracing(SimpleNamespace(_C=SimpleNamespace())) is False
