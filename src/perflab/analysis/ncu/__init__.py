"""Nsight Compute reports read as physics: speed of light per unit, memory traffic, plans and comparisons."""
