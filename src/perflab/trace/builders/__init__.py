"""Traces built in code for tests and examples, with the event shapes of recorded ones (kernels, graphs, pipelines)."""
