"""The collectives as columns (analysis/multigpu/collective_table.py) against the per-collective forms they replace."""
import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from perflab.analysis.multigpu import collective_table as T
from perflab.analysis.multigpu import collectives as C
from perflab.analysis.multigpu.collective_sizes import message_bytes

REAL = Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"


def test_message_bytes_column_is_message_bytes_for_every_case():
    kinds = ["all_reduce", "all_gather", "reduce_scatter", "send_recv", None]
    counts = [None, 0, 1000, 500]
    dtypes = ["BFloat16", "float", "", None, "unknown"]
    cases = list(itertools.product(kinds, counts, counts, dtypes, [0, 1, 4]))
    strings = [k for k in kinds if k]
    dtype_names = [d for d in dtypes if d is not None]
    got = T.message_bytes_column(
        np.array([strings.index(k) if k else -1 for k, *_ in cases]), strings,
        np.array([np.nan if c[1] is None else c[1] for c in cases], dtype=float),
        np.array([np.nan if c[2] is None else c[2] for c in cases], dtype=float),
        np.array([dtype_names.index(c[3]) if c[3] is not None else -1 for c in cases]), dtype_names,
        np.array([c[4] for c in cases]))
    want = [message_bytes(*c) for c in cases]
    assert [None if g != g else g for g in got.tolist()] == want


def test_in_order_sum_adds_like_a_loop():
    rng = random.Random(3)
    values = [rng.uniform(0, 1e6) * 10 ** rng.randint(-6, 6) for _ in range(5000)]
    total = 0.0
    for v in values:
        total += v
    assert T.in_order_sum(np.array(values)) == total


@pytest.mark.skipif(not REAL.is_dir(), reason="peer traces not available")
def test_table_round_trips_through_the_dicts_of_a_real_trace():
    from perflab.trace.loader import load_timeline

    trace = load_timeline(REAL / "nccl_parser_config__nccl_data.json.gz")
    colls = C.collectives(trace)
    assert colls and T.from_dicts(colls).dicts() == colls
    table = C.collective_table(trace)
    assert table.dicts() == colls
    # p2p_waits on the columns: the time beyond the fastest P2P kernel of the same name and size
    want = {}
    for c in colls:
        if c["kind"] == "send_recv":
            want[(c["name"], c["bytes"])] = min(want.get((c["name"], c["bytes"]), np.inf), c["dur_us"])
    expected = [c["dur_us"] - want[(c["name"], c["bytes"])] if c["kind"] == "send_recv" else 0.0 for c in colls]
    assert C.p2p_waits(table).tolist() == expected


def test_enclosing_picks_the_latest_record_param_comms_else_the_latest_range():
    from perflab.analysis.multigpu.collective_build import _enclosing

    start = np.array([0.0, 1.0, 2.0, 3.0])
    end = np.array([10.0, 9.0, 2.5, 8.0])
    rpc = np.array([True, False, True, False])
    t = np.array([5.0, 2.2, 11.0])
    i = np.searchsorted(start, t, side="right") - 1
    # t=5: records 3 (range) and 1 (range) and 0 (rpc) enclose it -> 0; t=2.2: record 2 (rpc) -> 2; t=11: none
    assert _enclosing(start, end, rpc, t, i, 10.0).tolist() == [0, 2, -1]
    # records starting more than `longest` before t are not searched
    assert _enclosing(start, end, rpc, t, i, 2.0).tolist() == [3, 2, -1]
