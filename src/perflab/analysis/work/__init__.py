"""The work ops and kernels do (FLOPs, bytes from shapes) against the GPU's ceilings: op work, roofline, speed of light."""
