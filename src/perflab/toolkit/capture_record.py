"""Inside the profiled process: keep what each CUDA-graph capture launched, even when it happens during warm-up.

A graph replayed in the recorded steps runs kernels that no op launched there: the ops ran once, while the graph
was captured, usually in the warm-up that perflab profile skips (a `torch.compile(mode="reduce-overhead")` function
records its graph on its first calls, HF's static cache on its first decode, a serving engine at start-up). Without
that capture the doctor cannot price the replays (analysis/steps/graph_capture.py). So while the main recording
is off, every capture (`CUDAGraph.capture_begin` ... `capture_end`, which `torch.cuda.graph` and every graphing
library call) is recorded by a short torch.profiler run of its own, with shapes, and its host events (the ops,
their launches, the begin and end of the capture) are written into the trace when it is saved. Stopping the
profiler only after `capture_end` returned keeps the hooks outside the captured region.
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

MAX_CAPTURES = 64            # captures kept per process (an engine capturing one graph per batch size has ~70)
EXTERNAL_ID_OFFSET = 1 << 40  # a capture's op ids, kept apart from the main recording's (each run counts from 1)
_KEEP = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"}
CAPTURES_KEY = "perflab_captures"


class CaptureRecorder:
    """Records captures while `busy()` says the main recording is off (see the module docstring)."""

    def __init__(self, torch: Any, busy: Callable[[], bool]):
        self.torch, self.busy = torch, busy
        self.captures: list[tuple[int | None, list[dict]]] = []
        self.skipped = 0
        self._prof: Any = None
        self.error: str | None = None

    def begin(self) -> None:
        if self._prof is not None or self.busy() or len(self.captures) >= MAX_CAPTURES or self.error:
            self.skipped += self._prof is None
            return
        try:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True)
            self._prof.start()
        except Exception as exc:   # never into the user's program: the capture just goes unrecorded
            self.error, self._prof = f"{type(exc).__name__}: {exc}", None

    def end(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        fd, name = tempfile.mkstemp(suffix=".json", prefix="perflab-capture-")
        os.close(fd)
        try:
            prof.stop()
            prof.export_chrome_trace(name)
            doc = json.loads(Path(name).read_text(encoding="utf-8"))
            events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
                      and str(e.get("cat", "")).lower() in _KEEP]
            self.captures.append((doc.get("baseTimeNanoseconds"), events))
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            Path(name).unlink(missing_ok=True)

    def merge_into(self, path: Path) -> int:
        """Write the captures' host events into the trace at `path` (gzipped or not); how many captures."""
        if not self.captures:
            return 0
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
        base = doc.get("baseTimeNanoseconds")
        for cap_base, events in self.captures:
            shift = (cap_base - base) / 1e3 if isinstance(base, int) and isinstance(cap_base, int) else 0.0
            for e in events:
                e["ts"] = float(e.get("ts", 0)) + shift
                args = e.get("args")
                if isinstance(args, dict) and isinstance(args.get("External id"), int):
                    args["External id"] += EXTERNAL_ID_OFFSET
            doc.setdefault("traceEvents", []).extend(events)
        doc[CAPTURES_KEY] = len(self.captures)
        tmp = path.with_name(path.name + ".captures.tmp")
        with opener(tmp, "wt", encoding="utf-8") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)
        return len(self.captures)


def install_capture_recorder(torch: Any, recorder: CaptureRecorder, hider: Any) -> Callable[[], None]:
    """Wrap CUDAGraph.capture_begin (record from before it) and capture_end (stop after it); the uninstaller."""
    graph_cls = getattr(getattr(getattr(torch, "cuda", None), "graphs", None), "CUDAGraph", None)
    if graph_cls is None:
        return lambda: None
    restores = []

    def wrap(attr: str, before: Callable[[], None] | None, after: Callable[[], None] | None) -> None:
        original = graph_cls.__dict__.get(attr)
        if original is None:
            return

        def hooked(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before()
            try:
                return original(*args, **kwargs)
            finally:
                if after is not None:
                    after()

        hooked.__wrapped__ = original  # type: ignore[attr-defined]
        hider.hide(lambda w: setattr(graph_cls, attr, w(hooked)))
        restores.append(lambda: setattr(graph_cls, attr, original))

    wrap("capture_begin", recorder.begin, None)
    wrap("capture_end", None, recorder.end)

    def uninstall() -> None:
        while restores:
            restores.pop()()
    return uninstall
