"""Interval arithmetic against a brute-force sampling of the same sets."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from perflab.analysis.idle.intervals import Coverage, complement, difference, intersect, length, merge, overlap_length

STEP = 0.5
GRID = np.arange(0, 140, STEP) + STEP / 2

spans = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 30)), max_size=15).map(
    lambda xs: (np.array([float(a) for a, _ in xs]), np.array([float(a + d) for a, d in xs])))


def sampled(s, e):
    inside = np.zeros(GRID.size, dtype=bool)
    for a, b in zip(s, e):
        inside |= (GRID >= a) & (GRID < b)
    return inside


@settings(max_examples=200, deadline=None)
@given(a=spans, b=spans, lo=st.integers(0, 60), width=st.integers(0, 80))
def test_against_brute_force(a, b, lo, width):
    in_a, in_b = sampled(*a), sampled(*b)
    assert length(*a) == in_a.sum() * STEP
    assert overlap_length(a, b) == (in_a & in_b).sum() * STEP
    s, e = intersect(a, b)
    assert (np.diff(s) > 0).all() if s.size > 1 else True
    assert (e - s).sum() == (in_a & in_b).sum() * STEP
    assert (e - s).sum() + (difference(a, b)[1] - difference(a, b)[0]).sum() == length(*a)
    hi = lo + width
    window = (GRID >= lo) & (GRID < hi)
    gs, ge = complement(*a, lo, hi)
    assert (ge - gs).sum() == (~in_a & window).sum() * STEP
    cov = Coverage(*a)
    assert cov.covered(np.array([lo]), np.array([hi]))[0] == (in_a & window).sum() * STEP
    ms, me = merge(*a)
    assert (ms[1:] > me[:-1]).all() and cov.total() == length(*a)
