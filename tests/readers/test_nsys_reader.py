"""The Nsight Systems reader on small exports written with sqlite3 (tests/nsys_exports.py), one schema trap each."""
from __future__ import annotations

import sqlite3
import tracemalloc

import numpy as np
import pytest

from nsys_exports import ERAS, ExportBuilder
from perflab.errors import UnreadableInput
from perflab.trace import nsys, sniff
from perflab.trace.model import CPU_OP, KERNEL, MEMCPY, MEMSET, OTHER, RUNTIME, SYNC, USER_ANNOTATION


def _workload(b: ExportBuilder, steps: int = 3) -> ExportBuilder:
    for step in range(steps):
        with b.range(f"step {step}"):
            b.memcpy("HtoD", "pageable", "device", 4 << 20, 400_000)
            for _ in range(4):
                b.kernel("void gemm_kernel<128>(float*, float const*)", 50_000, grid=(264, 1, 1), block=(256, 1, 1))
            b.memset(1 << 20, 2_000)
            b.synchronize()
            b.host(100_000)
    return b


@pytest.mark.parametrize("era", ERAS)
def test_every_schema_generation_reads_to_the_same_rows(tmp_path, era):
    trace = nsys.load(_workload(ExportBuilder()).write(tmp_path / "a.sqlite", era=era))
    kinds = {k: int((trace.kind == k).sum()) for k in (KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, USER_ANNOTATION)}
    assert kinds == {KERNEL: 12, MEMCPY: 3, MEMSET: 3, RUNTIME: 3 * (1 + 4 + 1 + 1), SYNC: 3, USER_ANNOTATION: 3}
    k = np.flatnonzero(trace.kind == KERNEL)
    assert {trace.name_of(r) for r in k} == {"void gemm_kernel<128>(float*, float const*)"}
    assert set(trace.grid[k].tolist()) == {264} and set(trace.block[k].tolist()) == {256}
    assert np.allclose(trace.dur[k], 50.0)
    copies = np.flatnonzero(trace.kind == MEMCPY)
    assert {trace.name_of(r) for r in copies} == {"Memcpy HtoD (Pageable -> Device)"}  # Kineto's naming
    assert trace.nbytes[copies].sum() == 3 * (4 << 20)
    api = {trace.name_of(r) for r in np.flatnonzero(trace.kind == RUNTIME)}
    assert api == {"cudaMemcpy", "cudaLaunchKernel", "cudaMemsetAsync", "cudaDeviceSynchronize"}  # no _v7000
    assert trace.meta["device_properties"][0]["numSms"] == 132
    # every GPU row is linked to the call that launched it
    from perflab.analysis.steps.links import launch_of

    gpu = np.flatnonzero(np.isin(trace.kind, (KERNEL, MEMCPY, MEMSET)))
    assert (launch_of(trace)[gpu] >= 0).all()


def test_versions_from_whichever_metadata_table_the_export_has(tmp_path):
    b = _workload(ExportBuilder(), 1)
    assert nsys.load(b.write(tmp_path / "old.sqlite", era="2021")).meta["capture"]["export"]["nsys_version"] is None
    t = nsys.load(b.write(tmp_path / "mid.sqlite", era="2022.1"))
    assert (t.meta["nsys_version"], t.meta["schema_version"]) == ("2022.1.1.61", "2.9.1")
    t = nsys.load(b.write(tmp_path / "new.sqlite", era="2025"))
    assert t.meta["capture"]["export"]["metadata_table"] == "META_DATA_EXPORT" and t.meta["nsys_version"] == "2025.5.1.121"


def test_text_that_is_not_utf8_is_read_not_fatal(tmp_path):
    path = _workload(ExportBuilder(), 1).write(tmp_path / "win.sqlite", era="2022.1", latin1_user=True)
    con = sqlite3.connect(path)
    con.execute("INSERT INTO StringIds VALUES (9999, CAST(? AS TEXT))", (b"kernel_\xe9t\xe9\x07",))
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9999")
    con.commit()
    con.close()
    trace = nsys.load(path)
    names = {trace.name_of(r) for r in np.flatnonzero(trace.kind == KERNEL)}
    assert names == {"kernel_\xe9t\xe9"}  # Latin-1 decoded, the control character dropped


def test_each_call_listed_twice_under_one_correlation_id_counts_once(tmp_path):
    b = _workload(ExportBuilder(), 2)
    once = nsys.load(b.write(tmp_path / "once.sqlite"))
    twice = nsys.load(b.write(tmp_path / "twice.sqlite", duplicate_api=True))
    assert (twice.kind == RUNTIME).sum() == (once.kind == RUNTIME).sum() == 14
    assert twice.meta["capture"]["duplicate_api_rows"] == 14
    # the runtime row (with the suffix, stripped) wins over the backtrace row, and keeps its times
    r1, r2 = (np.flatnonzero(t.kind == RUNTIME) for t in (once, twice))
    assert np.array_equal(once.ts[r1], twice.ts[r2])


def test_empty_activity_tables_are_left_out_and_that_is_fine(tmp_path):
    b = ExportBuilder()
    b.kernel("only_kernel", 10_000)
    trace = nsys.load(b.write(tmp_path / "k.sqlite"))
    assert int((trace.kind == KERNEL).sum()) == 1 and not (trace.kind == MEMCPY).any()
    assert trace.meta["capture"]["tables"]["memcpy"] is False


def test_recognized_by_content_not_by_name(tmp_path):
    path = _workload(ExportBuilder(), 1).write(tmp_path / "profile.db")
    assert sniff.sniff(path) == sniff.NSYS
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    assert sniff.sniff(other) == sniff.SQLITE
    with pytest.raises(UnreadableInput, match="not an Nsight Systems export"):
        nsys.load(other)


def test_sync_records_take_the_name_of_the_call_that_waited(tmp_path):
    b = ExportBuilder()
    b.kernel("k", 10_000)
    b.synchronize("cudaThreadSynchronize_v3020", sync_type=1)  # the 2022 numbering: 1 meant a context sync
    b.kernel("k", 10_000, stream=9)
    b.synchronize("cudaStreamSynchronize_v3020", sync_type=2)  # the 2025 numbering: 2 means a stream sync
    trace = nsys.load(b.write(tmp_path / "s.sqlite"))
    syncs = [trace.name_of(r) for r in np.flatnonzero(trace.kind == SYNC)]
    assert syncs == ["Context Sync", "Stream Sync"]
    from perflab.analysis.idle.syncs import sync_rows

    assert [trace.name_of(r) for r in sync_rows(trace)] == ["cudaThreadSynchronize", "cudaStreamSynchronize"]


def test_os_calls_inside_a_cuda_call_belong_to_it(tmp_path):
    b = ExportBuilder()
    b.kernel("k", 10_000)
    b.os_call("poll", 300_000)        # the launching thread blocked in poll: host time of its own
    start = b.now
    b.api("cudaMalloc_v3020", 200_000)
    b.osrt.append((start + 1_000, start + 150_000, 27, b.osrt[0][3], None, b.sid("ioctl"), 0, 0, None))
    trace = nsys.load(b.write(tmp_path / "o.sqlite"))
    by_name = {trace.name_of(r): int(trace.kind[r]) for r in np.flatnonzero(trace.cat == trace.cats.index("os_runtime"))}
    assert by_name == {"poll": CPU_OP, "ioctl": OTHER}


def test_pytorch_operator_ranges_are_ops_and_step_ranges_are_steps(tmp_path):
    b = ExportBuilder()
    for i in range(3):
        with b.range(f"iteration {i + 5}"):
            with b.range("aten::mm, seq = 12, op_id = 3, sizes = [[8, 8], [8, 8]]"):
                b.kernel("gemm", 5_000)
            with b.range("my_stage"):
                b.host(1_000)
    trace = nsys.load(b.write(tmp_path / "t.sqlite"))
    ops = {trace.name_of(r) for r in np.flatnonzero(trace.kind == CPU_OP)}
    ann = {trace.name_of(r) for r in np.flatnonzero(trace.kind == USER_ANNOTATION)}
    assert ops == {"aten::mm"}
    assert ann == {"ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7", "my_stage"}
    assert trace.meta["nvtx_steps"]["original_names"]["ProfilerStep#5"] == "iteration 5"
    custom = nsys.load(tmp_path / "t.sqlite", nvtx_steps=r"my_stage")
    assert {custom.name_of(r) for r in np.flatnonzero(custom.kind == USER_ANNOTATION)} >= {"ProfilerStep#1",
                                                                                          "ProfilerStep#3"}
    none = nsys.load(tmp_path / "t.sqlite", nvtx_steps=None)
    assert "iteration 5" in none.names and not any(n.startswith("ProfilerStep") for n in none.names)


def test_several_processes_become_ranks_with_their_own_correlation_ids(tmp_path):
    a = ExportBuilder(pid=100, tid=100)
    b = ExportBuilder(pid=200, tid=200, device=1, strings=a.strings, extra_gpus=[])  # same correlation ids
    for _ in range(3):
        a.kernel("rank0_kernel", 20_000)
        b.kernel("rank1_kernel", 40_000)
        b.kernel("rank1_kernel", 40_000)
    a.extra_gpus = [(1, "NVIDIA A100-SXM4-80GB", 108)]
    for name in ("kernels", "runtime"):
        getattr(a, name).extend(getattr(b, name))
    path = a.write(tmp_path / "mp.sqlite")
    ranks = nsys.load_ranks(path)
    assert [t.meta["pid"] for t in ranks] == [200, 100]          # most GPU time first
    assert [t.meta["device_name"] for t in ranks] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    from perflab.analysis.steps.links import launch_of

    for t, kernel in zip(ranks, ("rank1_kernel", "rank0_kernel")):
        k = np.flatnonzero(t.kind == KERNEL)
        assert {t.name_of(r) for r in k} == {kernel}
        assert (launch_of(t)[k] >= 0).all() and (t.extra["pid"][launch_of(t)[k]] == t.meta["pid"]).all()


def test_reading_keeps_memory_near_the_model_it_builds(tmp_path):
    b = ExportBuilder()
    for i in range(20_000):
        b.kernel(f"kernel_{i % 20}", 3_000, grid=(i % 500 + 1, 1, 1))
        if i % 100 == 99:
            b.synchronize("cudaStreamSynchronize_v3020", 2)
    path = b.write(tmp_path / "m.sqlite")
    tracemalloc.start()
    trace = nsys.load(path, chunk_rows=2048)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    model = sum(getattr(trace, c).nbytes for c in nsys.COLUMNS if getattr(trace, c).strides != (0,))
    model += sum(v.nbytes for v in trace.extra.values())
    assert len(trace) == 20_000 * 2 + 2 * 200
    assert peak < 2.5 * model, (peak, model)  # chunks of numpy, not Python rows: no multiple of the export
    assert trace.external_id.strides == (0,)   # a column with no value anywhere takes no memory


def test_parallel_reading_of_large_tables_gives_the_same_trace(tmp_path, monkeypatch):
    from perflab.trace.nsight_systems import nsys_db

    b = ExportBuilder()
    for i in range(3000):
        b.kernel(f"kernel_{i % 13}", 2_000 + i % 50, grid=(i % 300 + 1, 1, 1))
    path = b.write(tmp_path / "p.sqlite")
    monkeypatch.setenv("PERFLAB_READ_WORKERS", "1")
    one = nsys.load(path)
    monkeypatch.setenv("PERFLAB_READ_WORKERS", "2")
    monkeypatch.setattr(nsys_db, "PARALLEL_RANGE_ROWS", 700)
    assert len(nsys_db._rowid_ranges(sqlite3.connect(path), "CUPTI_ACTIVITY_KIND_KERNEL")) == 5
    two = nsys.load(path)
    for col in ("name", "ts", "dur", "grid", "correlation", "kind"):
        assert np.array_equal(getattr(one, col), getattr(two, col)), col
    assert one.names == two.names


def test_a_value_of_the_wrong_type_is_coerced_not_fatal(tmp_path):
    b = ExportBuilder()
    for _ in range(5):
        b.kernel("k", 10_000)
    path = b.write(tmp_path / "w.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET registersPerThread = 'lots' WHERE rowid = 3")
    con.commit()
    con.close()
    trace = nsys.load(path)
    regs = trace.extra["registers"][trace.kind == KERNEL]
    assert regs.size == 5 and sorted(regs.tolist()) == [-1, 32, 32, 32, 32]


def test_gpu_names_from_whatever_target_table_the_export_has(tmp_path):
    b = ExportBuilder(gpu_name="Tesla V100-SXM2-16GB")
    b.kernel("k", 10_000)
    path = b.write(tmp_path / "g.sqlite")
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE TARGET_INFO_GPU RENAME TO old")
    con.execute("CREATE TABLE TARGET_INFO_GPU (vmId, deviceId, name, busLocation, isDiscrete)")
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'Tesla V100-SXM2-16GB', '0000:00:00.0', 1)")
    con.commit()
    con.close()
    assert nsys.load(path).meta["device_name"] == "Tesla V100-SXM2-16GB"
