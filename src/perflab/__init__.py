"""perflab: GPU inference profiling — puzzles, a trace doctor and a toolkit."""

__version__ = "0.1.0"
