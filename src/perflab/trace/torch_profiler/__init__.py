"""The parts of the Kineto (torch.profiler) reader: typed events, columns, lenient paths, folders of ranks, parallel reads, NCCL arguments."""
