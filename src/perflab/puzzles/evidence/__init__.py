"""Evidence kinds: what a puzzle records besides its torch.profiler traces, one module per kind."""
