"""perflab profile's bootstrap: `perflab profile` puts this folder first on PYTHONPATH.

Every Python process of the profiled command imports it at start-up. Only the process running the
target script or module (named in $PERFLAB_PROFILE) sets up profiling; every process then runs the
sitecustomize this one shadows, if there is one. Keep it small: it runs in launchers too.
"""
import os
import sys


def _is_target(config):
    script = config.get("script")
    if script:
        return bool(sys.argv and sys.argv[0]) and os.path.realpath(sys.argv[0]) == script
    argv = getattr(sys, "orig_argv", [])  # sys.argv[0] is still "-m" here
    return any(a == "-m" and b == config.get("module") for a, b in zip(argv, argv[1:]))


def _perflab_profile():
    raw = os.environ.get("PERFLAB_PROFILE")
    if not raw:
        return
    import json

    config = json.loads(raw)
    if not _is_target(config):
        return
    del os.environ["PERFLAB_PROFILE"]  # processes the script starts itself are not profiled again
    try:
        if config.get("mode") == "memory":  # perflab memory record: the allocator's history, no profiler
            from perflab.toolkit.memory_record import bootstrap
        else:
            from perflab.toolkit.steps import bootstrap

        bootstrap(config)
    except Exception as exc:  # never break the user's program
        sys.stderr.write(f"perflab: not profiling {sys.executable} ({type(exc).__name__}: {exc})\n")


def _run_shadowed_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_perflab_profile()
_run_shadowed_sitecustomize()
