"""Write small Nsight Systems SQLite exports with the sqlite3 module, for tests and the memory benchmark.

`ExportBuilder` simulates one host thread driving a GPU (a FIFO per stream, as in perflab.trace.builders.synthetic)
and records what Nsight Systems would: CUDA API rows, kernel/memcpy/memset rows under their correlation
ids, synchronization rows, NVTX ranges, OS runtime calls, diagnostics. `write(path, era=...)` lays the
tables out as one nsys generation did, so each schema trap can be tested alone:

- "2021": no metadata table, kernels without mangledName, no ENUM tables (nsys 2021.2)
- "2022.1": EXPORT_META_DATA, schema 2.9.1
- "2022.4": EXPORT_META_DATA, schema 3.0.0, ENUM_CUDA_MEMCPY_OPER appears
- "2025": META_DATA_EXPORT, schema 3.23.3, greenContextId/graphId/copyCount/deprecatedSyncType columns

Empty activity tables are left out, as nsys does. Times are integer nanoseconds.
"""
from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

ERAS = ("2021", "2022.1", "2022.4", "2025")
VERSIONS = {"2022.1": ("2022.1.1.61", "2.9.1", "EXPORT_META_DATA"), "2022.4": ("2022.4.2.1", "3.0.0", "EXPORT_META_DATA"),
            "2025": ("2025.5.1.121", "3.23.3", "META_DATA_EXPORT")}
COPY_KIND = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "PtoP": 10}
MEM_KIND = {"pageable": 0, "pinned": 1, "device": 2}
RUNTIME_CLASS, DRIVER_CLASS, BACKTRACE_CLASS = 0, 1, 67


def global_tid(pid: int, tid: int) -> int:
    return (1 << 48) | (pid << 24) | tid


def global_pid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


@dataclass
class ExportBuilder:
    pid: int = 4242
    tid: int = 4242
    device: int = 0
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    sms: int = 132
    now: int = 1_000_000
    launch_ns: int = 5_000
    latency_ns: int = 3_000
    strings: dict[str, int] = field(default_factory=dict)
    kernels: list = field(default_factory=list)
    memcpys: list = field(default_factory=list)
    memsets: list = field(default_factory=list)
    runtime: list = field(default_factory=list)
    syncs: list = field(default_factory=list)
    nvtx: list = field(default_factory=list)
    osrt: list = field(default_factory=list)
    diagnostics: list = field(default_factory=list)
    capture: dict = field(default_factory=dict)
    extra_gpus: list = field(default_factory=list)
    free_at: dict = field(default_factory=dict)
    corr: int = 100

    def sid(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
        return self.strings[text]

    def _call(self, name: str, dur: int, klass: int = RUNTIME_CLASS, pid: int | None = None, tid: int | None = None
              ) -> int:
        self.corr += 1
        self.runtime.append((self.now, self.now + dur, klass, global_tid(pid or self.pid, tid or self.tid),
                             self.corr, self.sid(name), 0, None))
        return self.corr

    def _gpu_slot(self, stream: int, dur: int) -> tuple[int, int]:
        start = max(self.now + self.latency_ns, self.free_at.get((self.device, stream), 0))
        self.free_at[(self.device, stream)] = start + dur
        return start, start + dur

    def host(self, ns: int) -> None:
        self.now += ns

    def kernel(self, name: str, dur_ns: int, *, grid=(264, 1, 1), block=(128, 1, 1), stream: int = 7,
               api: str = "cudaLaunchKernel_v7000", call_ns: int | None = None, record: bool = True,
               graph_id: int | None = None) -> int:
        corr = self._call(api, call_ns or self.launch_ns)
        start, end = self._gpu_slot(stream, dur_ns)
        if record:
            self.kernels.append(dict(start=start, end=end, deviceId=self.device, contextId=1, streamId=stream,
                                     correlationId=corr, globalPid=global_pid(self.pid), name=self.sid(name),
                                     grid=grid, block=block, graphId=graph_id))
        self.now += call_ns or self.launch_ns
        return end

    def memcpy(self, kind: str, src: str, dst: str, nbytes: int, dur_ns: int, *, stream: int = 7,
               blocking: bool = True) -> int:
        """cudaMemcpy (blocking: returns when the copy is done) or cudaMemcpyAsync."""
        api = "cudaMemcpy_v3020" if blocking else "cudaMemcpyAsync_v3020"
        start, end = self._gpu_slot(stream, dur_ns)
        call_end = end + 2_000 if blocking else self.now + 4_000
        self.corr += 1
        self.runtime.append((self.now, call_end, RUNTIME_CLASS, global_tid(self.pid, self.tid), self.corr,
                             self.sid(api), 0, None))
        self.memcpys.append(dict(start=start, end=end, deviceId=self.device, contextId=1, streamId=stream,
                                 correlationId=self.corr, globalPid=global_pid(self.pid), bytes=nbytes,
                                 copyKind=COPY_KIND[kind], srcKind=MEM_KIND[src], dstKind=MEM_KIND[dst]))
        self.now = call_end
        return end

    def memset(self, nbytes: int, dur_ns: int, stream: int = 7) -> None:
        corr = self._call("cudaMemsetAsync_v3020", 3_000)
        start, end = self._gpu_slot(stream, dur_ns)
        self.memsets.append(dict(start=start, end=end, deviceId=self.device, contextId=1, streamId=stream,
                                 correlationId=corr, globalPid=global_pid(self.pid), bytes=nbytes, memKind=2))
        self.now += 3_000

    def synchronize(self, api: str = "cudaDeviceSynchronize_v3020", sync_type: int = 4) -> None:
        """Blocks until every stream is idle; nsys records a synchronization row under the call's id."""
        done = max([self.now] + list(self.free_at.values()))
        end = done + 2_000
        self.corr += 1
        self.runtime.append((self.now, end, RUNTIME_CLASS, global_tid(self.pid, self.tid), self.corr, self.sid(api),
                             0, None))
        self.syncs.append(dict(start=self.now + 500, end=end - 500, deviceId=self.device, contextId=1,
                               streamId=0xFFFFFFFF, correlationId=self.corr, globalPid=global_pid(self.pid),
                               syncType=sync_type))
        self.now = end

    def api(self, name: str, dur_ns: int) -> None:
        self._call(name, dur_ns)
        self.now += dur_ns

    def os_call(self, name: str, dur_ns: int) -> None:
        self.osrt.append((self.now, self.now + dur_ns, 27, global_tid(self.pid, self.tid), None, self.sid(name), 0, 0,
                          None))
        self.now += dur_ns

    @contextlib.contextmanager
    def range(self, text: str, registered: bool = False):
        start = self.now
        yield
        self.nvtx.append((start, self.now, 59, text, global_tid(self.pid, self.tid), registered))

    def diagnostic(self, text: str, severity: int = 2, when: int = 0) -> None:
        self.diagnostics.append((when, 1, 1, severity, text, global_pid(self.pid)))

    def write(self, path: str | Path, era: str = "2025", *, duplicate_api: bool = False, latin1_user: bool = False
              ) -> Path:
        path = Path(path)
        con = sqlite3.connect(path)
        _write(con, self, era, duplicate_api, latin1_user)
        con.commit()
        con.close()
        return path


def _table(con: sqlite3.Connection, name: str, columns: list[str], rows: list[tuple], keep_empty: bool = False) -> None:
    if not rows and not keep_empty:
        return  # nsys leaves empty activity tables out
    con.execute(f'CREATE TABLE "{name}" ({", ".join(columns)})')
    con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(columns))})', rows)


def _write(con: sqlite3.Connection, b: ExportBuilder, era: str, duplicate_api: bool, latin1_user: bool) -> None:
    new = era == "2025"
    k_cols = ["start", "end", "deviceId", "contextId"] + (["greenContextId"] if new else []) + [
        "streamId", "correlationId", "globalPid", "demangledName", "shortName"] + (["mangledName"] if era != "2021" else []) + [
        "launchType", "cacheConfig", "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
        "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "localMemoryTotal", "gridId",
        "sharedMemoryExecuted", "graphNodeId", "sharedMemoryLimitConfig"] + (["graphId"] if new else [])
    rows = []
    for i, k in enumerate(b.kernels):
        v = {"start": k["start"], "end": k["end"], "deviceId": k["deviceId"], "contextId": k["contextId"],
             "greenContextId": None, "streamId": k["streamId"], "correlationId": k["correlationId"],
             "globalPid": k["globalPid"], "demangledName": k["name"], "shortName": k["name"], "mangledName": k["name"],
             "launchType": 1, "cacheConfig": 0, "registersPerThread": 32, "gridX": k["grid"][0], "gridY": k["grid"][1],
             "gridZ": k["grid"][2], "blockX": k["block"][0], "blockY": k["block"][1], "blockZ": k["block"][2],
             "staticSharedMemory": 0, "dynamicSharedMemory": 1024, "localMemoryPerThread": 0, "localMemoryTotal": 0,
             "gridId": i + 1, "sharedMemoryExecuted": 0, "graphNodeId": None, "sharedMemoryLimitConfig": 0,
             "graphId": k.get("graphId")}
        rows.append(tuple(v[c] for c in k_cols))
    _table(con, "CUPTI_ACTIVITY_KIND_KERNEL", k_cols, rows)

    m_cols = ["start", "end", "deviceId", "contextId"] + (["greenContextId"] if new else []) + [
        "streamId", "correlationId", "globalPid", "bytes", "copyKind", "deprecatedSrcId", "srcKind", "dstKind",
        "srcDeviceId", "srcContextId", "dstDeviceId", "dstContextId", "migrationCause", "graphNodeId"] + (
        ["virtualAddress"] if era != "2021" else []) + (["copyCount"] if new else [])
    rows = [tuple({**m, "greenContextId": None, "deprecatedSrcId": None, "srcDeviceId": 0, "srcContextId": 1,
                   "dstDeviceId": 0, "dstContextId": 1, "migrationCause": None, "graphNodeId": None,
                   "virtualAddress": None, "copyCount": 1}[c] for c in m_cols) for m in b.memcpys]
    _table(con, "CUPTI_ACTIVITY_KIND_MEMCPY", m_cols, rows)

    s_cols = ["start", "end", "deviceId", "contextId"] + (["greenContextId"] if new else []) + [
        "streamId", "correlationId", "globalPid", "value", "bytes", "graphNodeId", "memKind"]
    rows = [tuple({**m, "greenContextId": None, "value": 0, "graphNodeId": None}[c] for c in s_cols) for m in b.memsets]
    _table(con, "CUPTI_ACTIVITY_KIND_MEMSET", s_cols, rows)

    runtime = list(b.runtime)
    if duplicate_api:  # one nsys generation listed each call twice: a 'CUDA backtrace' row without the suffix
        names = {v: k for k, v in b.strings.items()}
        for r in b.runtime:
            base = names[r[5]].split("_v")[0]
            runtime.append((r[0] - 100, r[1] + 100, BACKTRACE_CLASS, r[3], r[4], b.sid(base), 0, 0))
    _table(con, "CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "end", "eventClass", "globalTid", "correlationId", "nameId",
                                                "returnValue", "callchainId"], runtime)

    y_cols = ["start", "end", "deviceId", "contextId"] + (["greenContextId"] if new else []) + [
        "streamId", "correlationId", "globalPid"] + (["deprecatedSyncType"] if new else []) + ["syncType", "eventId"] + (
        ["eventSyncId"] if new else [])
    rows = [tuple({**y, "greenContextId": None, "deprecatedSyncType": None, "eventId": None, "eventSyncId": None}[c]
                  for c in y_cols) for y in b.syncs]
    _table(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", y_cols, rows)

    n_cols = ["start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid",
              "textId", "domainId"]
    rows = [(s, e, t, None, None, None, None if reg else text, g, None, b.sid(text) if reg else None, 0)
            for s, e, t, text, g, reg in b.nvtx]
    _table(con, "NVTX_EVENTS", n_cols, rows)
    _table(con, "OSRT_API", ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue",
                             "nestingLevel", "callchainId"], b.osrt)

    _table(con, "StringIds", ["id INTEGER PRIMARY KEY", "value TEXT NOT NULL"],
           [(i, t) for t, i in b.strings.items()], keep_empty=True)
    gpus = [(b.device, b.gpu_name, b.sms)] + b.extra_gpus
    g_cols = ["vmId", "id", "name", "busLocation", "isDiscrete", "l2CacheSize", "totalMemory", "memoryBandwidth",
              "clockRate", "smCount", "chipName", "cuDevice", "computeMajor", "computeMinor", "maxBlocksPerSm",
              "maxWarpsPerSm", "threadsPerWarp"]
    _table(con, "TARGET_INFO_GPU", g_cols, [(0, i, name, f"0000:{i:02x}:00.0", 1, 50 << 20, 80 << 30, 3_350_000_000_000,
                                              1_980_000_000, sms, "GH100", i, 9, 0, 32, 64, 32) for i, name, sms in gpus])
    _table(con, "PROCESSES", ["globalPid", "pid", "name"], sorted({(global_pid(r[3] >> 24 & 0xFFFFFF),
                                                                  r[3] >> 24 & 0xFFFFFF, "python") for r in b.runtime}))
    _table(con, "DIAGNOSTIC_EVENT", ["timestamp", "timestampType", "source", "severity", "text", "globalPid"],
           b.diagnostics)
    if era != "2021":
        version, schema, table = VERSIONS[era]
        user = "Alexander Gei\udcdf" if latin1_user else "someone"
        rows = [("EXPORT_PRODUCT_VERSION", version), ("EXPORT_SCHEMA_VERSION", schema), ("EXPORT_USER", user)]
        con.execute(f"CREATE TABLE {table} (name TEXT, value TEXT)")
        for k, v in rows:
            if latin1_user and k == "EXPORT_USER":  # bytes that are not UTF-8, as a Windows export holds
                con.execute(f"INSERT INTO {table} VALUES (?, CAST(? AS TEXT))", (k, "Alexander Gei\xdf".encode("latin-1")))
            else:
                con.execute(f"INSERT INTO {table} VALUES (?, ?)", (k, v))
    if era in ("2022.4", "2025"):
        _table(con, "ENUM_CUDA_MEMCPY_OPER", ["id", "name", "label"], [(1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device")])
    if b.capture:
        _table(con, "META_DATA_CAPTURE", ["name", "value"], list(b.capture.items()))
