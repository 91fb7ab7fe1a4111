"""perflab: GPU inference profiling — puzzles, a trace doctor and a toolkit."""

__version__ = "0.1.0"

# The toolkit's API, imported on first use so that `import perflab` stays light (no torch, no NVML).
_LAZY = {
    "profile": "perflab.toolkit.profile",
    "auto_profile": "perflab.toolkit.profile",
    "GPUMonitor": "perflab.toolkit.monitor",
    "timer": "perflab.toolkit.timing",
    "energy": "perflab.toolkit.energy",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'perflab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
