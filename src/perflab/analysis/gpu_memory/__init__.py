"""GPU memory: snapshots, allocation history, peaks and the caching allocator."""
