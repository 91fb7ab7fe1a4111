"""Synthesize Kineto traces of simple workloads, for tests and benchmarks.

A tiny simulator of eager PyTorch on one GPU: a host thread issues operators (CPU time), each
launching kernels that a FIFO stream runs when it is free; blocking calls wait for the streams.
The output has the event shapes the PyTorch profiler writes (cpu_op, cuda_runtime, kernel,
gpu_memcpy, ac2g flows, ProfilerStep annotations, deviceProperties, distributedInfo), so the
readers and rules see what they see on real traces.
"""
from __future__ import annotations

import contextlib
import gzip
from pathlib import Path
from typing import Iterator

import orjson

H100 = "NVIDIA H100 80GB HBM3"
LAUNCH_US = 5.0          # CPU time of one cudaLaunchKernel
LAUNCH_LATENCY_US = 3.0  # from the launch call to the earliest kernel start
RETURN_US = 3.0          # a blocking call returns this long after the GPU finished


class TraceBuilder:
    def __init__(self, device_name: str = H100, *, rank: int | None = None, world_size: int = 1,
                 pid: int = 4242, tid: int = 4242, start_us: float = 1_000_000.0, ns_resolution: bool = True,
                 device: int = 0) -> None:
        self.device_name, self.rank, self.world_size = device_name, rank, world_size
        self.pid, self.tid, self.device = pid, tid, device
        self.now = start_us
        self.start = start_us
        self.free_at: dict[int, float] = {}
        self.events: list[dict] = []
        self._corr = 1000
        self._ext = 1
        self._ns = ns_resolution

    # -- low level ------------------------------------------------------------------------
    def _t(self, t: float) -> float:
        return round(t, 3) if self._ns else float(int(round(t)))

    def _x(self, cat: str, name: str, ts: float, dur: float, *, pid=None, tid=None, **args) -> dict:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid if pid is None else pid,
              "tid": self.tid if tid is None else tid, "ts": self._t(ts), "dur": self._t(max(dur, 0.0))}
        if args:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def gpu_op(self, cat: str, name: str, gpu_us: float, stream: int, call: str, call_us: float,
               ext: int, **gpu_args) -> tuple[dict, float, float]:
        """A runtime call at `now` that enqueues one GPU op; returns (the call event, op start, op end)."""
        self._corr += 1
        corr = self._corr
        call_ev = self._x("cuda_runtime", call, self.now, call_us,
                          **{"External id": ext, "cbid": 211, "correlation": corr})
        start = max(self.now + LAUNCH_LATENCY_US, self.free_at.get(stream, 0.0))
        end = start + gpu_us
        self.free_at[stream] = end
        self._x(cat, name, start, gpu_us, pid=self.device, tid=stream,
                **{"External id": ext, "device": self.device, "context": 1, "stream": stream, "correlation": corr,
                   **gpu_args})
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": self._t(self.now),
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": self.device, "tid": stream, "ts": self._t(start),
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})
        self.now += call_us
        return call_ev, start, end

    @contextlib.contextmanager
    def span(self, name: str, cat: str = "cpu_op", **args) -> Iterator[dict]:
        """An operator (or annotation) around whatever runs inside the block."""
        ev = self._x(cat, name, self.now, 0.0, **{"External id": self._next_ext(), **args})
        start = self.now
        yield ev
        ev["dur"] = self._t(self.now - start)

    # -- workload vocabulary --------------------------------------------------------------
    @contextlib.contextmanager
    def step(self, number: int) -> Iterator[None]:
        with self.span(f"ProfilerStep#{number}", cat="user_annotation"):
            yield

    def op(self, name: str, kernels: list[tuple], *, cpu_us: float = 8.0, stream: int = 7,
           dims: list | None = None, dtypes: list | None = None) -> None:
        """An aten op spending cpu_us on the host and launching kernels: (name, gpu_us[, grid, block])."""
        args = {}
        if dims is not None:
            args["Input Dims"] = dims
        if dtypes is not None:
            args["Input type"] = dtypes
        with self.span(name, **args) as ev:
            self.now += cpu_us * 0.7
            for k in kernels:
                kname, gpu_us = k[0], k[1]
                grid = list(k[2]) if len(k) > 2 else [max(1, int(gpu_us * 10)), 1, 1]
                block = list(k[3]) if len(k) > 3 else [256, 1, 1]
                self.gpu_op("kernel", kname, gpu_us, stream, "cudaLaunchKernel", LAUNCH_US,
                            ev["args"]["External id"], grid=grid, block=block, queued=0,
                            **{"registers per thread": 32, "shared memory": 0})
            self.now += cpu_us * 0.3

    def graph_replay(self, kernels: list[tuple], stream: int = 7, launch_us: float = 15.0) -> None:
        """CUDAGraph.replay(): one cudaGraphLaunch; the captured kernels run back to back."""
        with self.span("CUDAGraph::replay") as ev:
            self._corr += 1
            corr = self._corr
            self._x("cuda_runtime", "cudaGraphLaunch", self.now, launch_us,
                    **{"External id": ev["args"]["External id"], "correlation": corr})
            t = max(self.now + 4 * LAUNCH_LATENCY_US, self.free_at.get(stream, 0.0))
            for k in kernels:
                self._x("kernel", k[0], t, k[1], pid=self.device, tid=stream,
                        **{"device": self.device, "stream": stream, "correlation": corr,
                           "grid": [8, 1, 1], "block": [128, 1, 1]})
                t += k[1] + 0.5
            self.free_at[stream] = t
            self.now += launch_us

    def host(self, name: str, us: float) -> None:
        """CPU work that launches nothing (a CPU aten op, preprocessing)."""
        with self.span(name):
            self.now += us

    def python(self, us: float) -> None:
        """Unprofiled Python time."""
        self.now += us

    def dataloader(self, us: float) -> None:
        with self.span("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", cat="user_annotation"):
            self.now += us

    def _wait_all(self, call: str, cat: str = "cuda_runtime", streams: list[int] | None = None) -> None:
        busy_until = max((t for s, t in self.free_at.items() if streams is None or s in streams), default=0.0)
        end = max(self.now + 1.0, busy_until + RETURN_US)
        self._corr += 1
        self._x(cat, call, self.now, end - self.now, **{"cbid": 131, "correlation": self._corr})
        self.now = end

    def synchronize(self) -> None:
        """torch.cuda.synchronize()."""
        self._wait_all("cudaDeviceSynchronize")

    def item(self, stream: int = 7) -> None:
        """tensor.item(): a tiny device-to-pageable copy that blocks until the stream drains."""
        with self.span("aten::item") as outer, self.span("aten::_local_scalar_dense"):
            self.now += 4.0
            call, start, end = self.gpu_op("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 1.5, stream,
                                           "cudaMemcpyAsync", 6.0, outer["args"]["External id"], bytes=4,
                                           **{"memory bandwidth (GB/s)": 0.003})
            # the call itself blocks: the destination is pageable
            self.now = end + RETURN_US
            call["dur"] = self._t(self.now - call["ts"])
            self._wait_all("cudaStreamSynchronize", streams=[stream])

    def copy(self, nbytes: int, *, direction: str = "h2d", pageable: bool = True, non_blocking: bool = False,
             stream: int = 7, gbps: float | None = None, dims: list | None = None) -> None:
        """tensor.to(...) between host and device; `dims`: its recorded Input Dims (record_shapes)."""
        gbps = gbps or (12.0 if pageable else 24.0)
        host = "Pageable" if pageable else "Pinned"
        name = (f"Memcpy HtoD ({host} -> Device)" if direction == "h2d" else f"Memcpy DtoH (Device -> {host})")
        dma_us = nbytes / (gbps * 1e3)
        shapes = {"Input Dims": dims} if dims is not None else {}
        with self.span("aten::to", **shapes) as outer, self.span("aten::_to_copy"), self.span("aten::copy_"):
            call, start, end = self.gpu_op("gpu_memcpy", name, dma_us, stream, "cudaMemcpyAsync", 8.0,
                                           outer["args"]["External id"], bytes=nbytes,
                                           **{"memory bandwidth (GB/s)": gbps})
            if pageable:  # staged through a pinned buffer: the call returns when the copy is done
                self.now = end + RETURN_US
                call["dur"] = self._t(self.now - call["ts"])
            if not non_blocking:
                self._wait_all("cudaStreamSynchronize", streams=[stream])

    def collective(self, gpu_us: float, stream: int = 20, name: str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)") -> None:
        with self.span("c10d::allreduce_") as ev:
            self.now += 10.0
            self.gpu_op("kernel", name, gpu_us, stream, "cudaLaunchKernel", LAUNCH_US, ev["args"]["External id"],
                        grid=[16, 1, 1], block=[512, 1, 1])

    def wait_stream(self, waiter: int, waited: int) -> None:
        """Make `waiter` wait until `waited` is done (cudaStreamWaitEvent)."""
        self.free_at[waiter] = max(self.free_at.get(waiter, 0.0), self.free_at.get(waited, 0.0))
        self._corr += 1
        self._x("cuda_runtime", "cudaStreamWaitEvent", self.now, 3.0, **{"cbid": 147, "correlation": self._corr})
        self.now += 3.0

    # -- output ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        end = max([self.now] + list(self.free_at.values()))
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": self.device, "name": self.device_name, "totalGlobalMem": 85_000_000_000,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        }
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        meta = [
            {"name": "process_name", "ph": "M", "ts": self._t(self.start), "pid": self.pid, "tid": 0,
             "args": {"name": "python"}},
            {"name": "thread_name", "ph": "M", "ts": self._t(self.start), "pid": self.pid, "tid": self.tid,
             "args": {"name": "thread 1 (python)"}},
            {"name": "process_name", "ph": "M", "ts": self._t(self.start), "pid": self.device, "tid": 0,
             "args": {"name": f"CUDA:{self.device}"}},
        ]
        span = {"ph": "X", "cat": "Trace", "ts": self._t(self.start), "dur": self._t(end - self.start),
                "pid": "Spans", "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}
        doc["traceEvents"] = meta + self.events + [span]
        doc["traceName"] = "synthetic"
        doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
        return doc

    def write(self, path: str | Path) -> Path:
        return write_document(path, self.to_dict())


def document(events: list[dict], *, device_name: str = H100, rank: int | None = None, world_size: int = 1,
             **extra) -> dict:
    """A Kineto document around hand-made events."""
    doc: dict = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": device_name}]}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
    doc["traceEvents"] = events
    doc.update(extra)
    return doc


def write_document(path: str | Path, doc: dict) -> Path:
    """Write JSON; gzip-compressed when the name ends in .gz."""
    path = Path(path)
    data = orjson.dumps(doc)
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=1)
    from perflab.outputs import write_output

    return write_output(path, data, force=True, make_parents=True)


# -- scenarios: one small workload per bottleneck, and their fixed versions -------------------
GEMM = "nvjet_tst_192x192_64x4_1x2_h_bz_coopB_TNT"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
               "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
       "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >")
ARGMAX = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<float>, unsigned int, long, 4> >"


def launch_bound(steps: int = 5, ops: int = 400, kernel_us: float = 2.5, cpu_us: float = 14.0) -> TraceBuilder:
    """Batch-1 model of many tiny eager ops: the host cannot launch fast enough."""
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            for i in range(ops):
                b.op("aten::add" if i % 2 else "aten::mul", [(ELEMENTWISE if i % 2 else MUL, kernel_us)], cpu_us=cpu_us)
                b.python(3.0)
    b.synchronize()  # final sync outside the steps
    return b


def cuda_graph_replay(steps: int = 5, ops: int = 400, kernel_us: float = 2.5) -> TraceBuilder:
    """The fix of launch_bound: one graph launch per step, kernels back to back."""
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            b.graph_replay([(ELEMENTWISE, kernel_us)] * ops, launch_us=12.0)
            b._wait_all("cudaStreamSynchronize", streams=[7])
    return b


def decode_with_item(steps: int = 3, tokens: int = 32, layers: int = 6, kernel_us: float = 4.0,
                     host_us: float = 15.0, item: bool = True) -> TraceBuilder:
    """A decode loop: one CUDA-graph replay per token, then the next token id goes to the host
    (.item()) and back (torch.tensor(...) then copy_ into the graph's input). item=False: the token
    stays on the GPU and the replays are queued back to back."""
    b = TraceBuilder()
    kernels = [(GEMM if i % 2 else ELEMENTWISE, kernel_us) for i in range(2 * layers)] + [(ARGMAX, 6.0)]
    for n in range(steps):
        with b.step(n):
            for _ in range(tokens):
                b.graph_replay(kernels)
                if item:
                    b.item()
                    b.python(host_us)
                    b.copy(8, pageable=True)
                    with b.span("aten::copy_") as ev:
                        b.gpu_op("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 1.0, 7, "cudaMemcpyAsync", 5.0,
                                 ev["args"]["External id"], bytes=8)
                    b.python(5.0)
    return b


def pageable_inputs(steps: int = 5, mb: float = 64.0, layers: int = 40, kernel_us: float = 120.0,
                    pageable: bool = True) -> TraceBuilder:
    """Inputs copied from pageable host memory each step, then compute on the same stream."""
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            b.copy(int(mb * 1e6), pageable=pageable, non_blocking=not pageable, stream=7 if pageable else 9)
            if not pageable:
                b.wait_stream(7, 9)
            for _ in range(layers):
                b.op("aten::mm", [(GEMM, kernel_us, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
    b.synchronize()
    return b


def gpu_bound(steps: int = 5, layers: int = 60, kernel_us: float = 900.0, name: str = GEMM) -> TraceBuilder:
    """Large GEMMs back to back: the host runs ahead, the GPU is always busy."""
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            for _ in range(layers):
                b.op("aten::mm", [(name, kernel_us, (132, 1, 1), (384, 1, 1))], cpu_us=15.0)
            b.op("aten::add", [(ELEMENTWISE, 20.0)], cpu_us=10.0)
    b.synchronize()
    return b


def host_bound(steps: int = 5, host_ms: float = 8.0, layers: int = 20, kernel_us: float = 200.0) -> TraceBuilder:
    """CPU preprocessing (no GPU work) between the GPU parts of each step."""
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            b.host("aten::cat", host_ms * 600)
            b.host("aten::sort", host_ms * 400)
            for _ in range(layers):
                b.op("aten::mm", [(GEMM, kernel_us, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            b.synchronize()
    return b


def input_bound(steps: int = 5, load_ms: float = 10.0, layers: int = 20, kernel_us: float = 200.0) -> TraceBuilder:
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            b.dataloader(load_ms * 1000)
            b.copy(2_000_000, pageable=False, non_blocking=True, stream=7)
            for _ in range(layers):
                b.op("aten::mm", [(GEMM, kernel_us, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            b.synchronize()
    return b


def exposed_allreduce(steps: int = 5, layers: int = 20, kernel_us: float = 300.0, comm_us: float = 2500.0,
                      overlap: bool = False) -> TraceBuilder:
    b = TraceBuilder(rank=0, world_size=8)
    for n in range(steps):
        with b.step(n):
            for i in range(layers):
                b.op("aten::mm", [(GEMM, kernel_us, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
                if overlap and i == layers // 2:
                    b.collective(comm_us)
            if not overlap:
                b.wait_stream(20, 7)
                b.collective(comm_us)
                b.wait_stream(7, 20)
            b.synchronize()
    return b


def elementwise_chain(steps: int = 5, chains: int = 30, length: int = 5, kernel_us: float = 60.0,
                      fused: bool = False) -> TraceBuilder:
    """Chains of same-shape elementwise ops (fused=True: one kernel per chain)."""
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            for _ in range(chains):
                b.op("aten::mm", [(GEMM, 200.0, (132, 1, 1), (384, 1, 1))], cpu_us=10.0)
                for k in range(1 if fused else length):
                    name = "triton_poi_fused_add_mul_gelu_0" if fused else (ELEMENTWISE if k % 2 else MUL)
                    b.op("aten::add", [(name, kernel_us * (1.3 if fused else 1.0), (4096, 1, 1), (128, 1, 1))],
                         cpu_us=6.0)
    b.synchronize()
    return b


def dequantize_then_gemm(steps: int = 5, layers: int = 40, gemm_us: float = 150.0, dequant_us: float = 90.0,
                         fused: bool = False) -> TraceBuilder:
    """Weight-only int8: each layer converts the int8 weight to bf16 in its own kernel, then a GEMM."""
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            for _ in range(layers):
                if fused:
                    b.op("aten::_weight_int8pack_mm", [("gemv_int8_bf16_fused_kernel", gemm_us)], cpu_us=10.0)
                    continue
                b.op("aten::_to_copy", [("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda"
                                         "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>", dequant_us)],
                     cpu_us=8.0, dims=[[4096, 4096]], dtypes=["signed char"])
                b.op("aten::mm", [(GEMM, gemm_us, (132, 1, 1), (384, 1, 1))], cpu_us=10.0)
    b.synchronize()
    return b


def fp32_gemms(steps: int = 5, layers: int = 40, kernel_us: float = 800.0, tf32: bool = False) -> TraceBuilder:
    name = ("sm90_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"
            if tf32 else "ampere_sgemm_128x64_tn")
    return gpu_bound(steps, layers, kernel_us, name)
