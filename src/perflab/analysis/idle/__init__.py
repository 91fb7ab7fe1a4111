"""Where GPU time is lost between kernels: gaps and their causes on the host, syncs, waits, launches, streams and the critical path."""
