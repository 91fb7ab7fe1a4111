"""The summaries `nsys stats` prints, computed from the trace model, so a Kineto trace gets them too.

cuda_gpu_kern_sum, cuda_api_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum and nvtx_sum, with
nsys's columns: times in integer nanoseconds (Avg/Med/StdDev as floats), sizes in MB (10^6 bytes),
StdDev the sample standard deviation (0 for one instance), rows by total time (or size), largest first.
Copies are named as nsys names them ("[CUDA memcpy Host-to-Device]"). On a Kineto trace the NVTX
summary covers record_function ranges (user annotations), the closest thing it records.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from perflab.trace.model import CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, USER_ANNOTATION, Trace

REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum")
TITLES = {"cuda_gpu_kern_sum": "CUDA GPU Kernel Summary", "cuda_api_sum": "CUDA API Summary",
          "cuda_gpu_mem_time_sum": "CUDA GPU MemOps Summary (by Time)",
          "cuda_gpu_mem_size_sum": "CUDA GPU MemOps Summary (by Size)", "nvtx_sum": "NVTX Range Summary"}
_TIME_COLS = ["Time (%)", "Total Time (ns)", "{count}", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"]
_SIZE_COLS = ["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"]
_COPY = re.compile(r"Memcpy (\w+) \(([^)]*)\)")
_KIND_LABEL = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device", "HtoH": "Host-to-Host",
               "PtoP": "Peer-to-Peer", "HtoA": "Host-to-Array", "AtoH": "Array-to-Host", "AtoA": "Array-to-Array",
               "AtoD": "Array-to-Device", "DtoA": "Device-to-Array"}
NVTX_STYLE = {59: "PushPop", 60: "StartEnd", 70: "PushPop", 71: "StartEnd"}


@dataclass
class StatsTable:
    name: str
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"title": self.title, "columns": self.columns, "rows": self.rows}


def operation(name: str) -> str:
    """nsys's label of a copy or memset row ("Memcpy HtoD (Pageable -> Device)" -> "[CUDA memcpy Host-to-Device]")."""
    if name.startswith("Memset"):
        return "[CUDA memset]"
    m = _COPY.match(name)
    if not m:
        return "[CUDA memcpy Unknown]"
    label = _KIND_LABEL.get(m.group(1), "Unknown")
    if "Unified" in m.group(2):
        label = "Unified " + label
    return f"[CUDA memcpy {label}]"


def _grouped(keys: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Per distinct key (sorted by key): count, sum, mean, median, min, max, sample std."""
    if keys.size == 0:
        empty = np.zeros(0)
        return {"key": keys, "count": empty, "sum": empty, "mean": empty, "med": empty, "min": empty,
                "max": empty, "std": empty}
    order = np.argsort(keys, kind="stable")  # one sort by group; medians by selection within each group
    keys, values = keys[order], values[order]
    del order
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    ends = np.concatenate((starts[1:], [keys.size]))
    count = ends - starts
    total = np.add.reduceat(values, starts)
    mean = total / count
    med = np.array([np.median(values[a:b]) for a, b in zip(starts.tolist(), ends.tolist())])
    dev = values - np.repeat(mean, count)
    ss = np.add.reduceat(dev * dev, starts)
    std = np.where(count > 1, np.sqrt(ss / np.maximum(count - 1, 1)), 0.0)
    return {"key": keys[starts], "count": count, "sum": total, "mean": mean, "med": med,
            "min": np.minimum.reduceat(values, starts), "max": np.maximum.reduceat(values, starts), "std": std}


def _time_table(name: str, count_label: str, label_col: list[str], labels: list, g: dict,
                extra: list | None = None) -> StatsTable:
    cols = [c.format(count=count_label) for c in _TIME_COLS] + label_col
    table = StatsTable(name, TITLES[name], cols)
    total = float(g["sum"].sum())
    for i in np.argsort(-g["sum"], kind="stable").tolist():
        row = [round(100.0 * float(g["sum"][i]) / total, 1) if total else 0.0, int(round(g["sum"][i])), int(g["count"][i]),
               round(float(g["mean"][i]), 1), round(float(g["med"][i]), 1), int(round(g["min"][i])),
               int(round(g["max"][i])), round(float(g["std"][i]), 1)]
        table.rows.append(row + ([extra[i]] if extra is not None else []) + [labels[i]])
    return table


def _ns(trace: Trace, rows: np.ndarray) -> np.ndarray:
    return np.round(trace.dur[rows] * 1e3)


def kern_sum(trace: Trace) -> StatsTable:
    rows = np.flatnonzero(trace.kind == KERNEL)
    g = _grouped(trace.name[rows].astype(np.int64), _ns(trace, rows))
    return _time_table("cuda_gpu_kern_sum", "Instances", ["Name"], [trace.names[k] for k in g["key"].tolist()], g)


def api_sum(trace: Trace) -> StatsTable:
    rows = np.flatnonzero(trace.kind == RUNTIME)
    g = _grouped(trace.name[rows].astype(np.int64), _ns(trace, rows))
    return _time_table("cuda_api_sum", "Num Calls", ["Name"], [trace.names[k] for k in g["key"].tolist()], g)


def _mem_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray, list[str]]:
    rows = np.flatnonzero(np.isin(trace.kind, (MEMCPY, MEMSET)))
    ops = sorted({operation(n) for n in (trace.names[i] for i in np.unique(trace.name[rows]).tolist())})
    table = np.full(len(trace.names), -1, np.int64)
    for i in np.unique(trace.name[rows]).tolist():
        table[i] = ops.index(operation(trace.names[i]))
    return rows, table[trace.name[rows]], ops


def mem_time_sum(trace: Trace) -> StatsTable:
    rows, keys, ops = _mem_rows(trace)
    g = _grouped(keys, _ns(trace, rows))
    return _time_table("cuda_gpu_mem_time_sum", "Count", ["Operation"], [ops[k] for k in g["key"].tolist()], g)


def mem_size_sum(trace: Trace) -> StatsTable:
    rows, keys, ops = _mem_rows(trace)
    g = _grouped(keys, np.nan_to_num(trace.nbytes[rows], nan=0.0) / 1e6)
    table = StatsTable("cuda_gpu_mem_size_sum", TITLES["cuda_gpu_mem_size_sum"], list(_SIZE_COLS))
    for i in np.argsort(-g["sum"], kind="stable").tolist():
        table.rows.append([round(float(g["sum"][i]), 3), int(g["count"][i]), round(float(g["mean"][i]), 3),
                           round(float(g["med"][i]), 3), round(float(g["min"][i]), 3), round(float(g["max"][i]), 3),
                           round(float(g["std"][i]), 3), ops[int(g["key"][i])]])
    return table


def nvtx_sum(trace: Trace) -> StatsTable:
    """NVTX ranges (nsys), or record_function ranges (Kineto), by style and name; step ranges that the
    nsys reader renamed ProfilerStep#N keep the name they had in the file."""
    nsys = trace.meta.get("source") == "nsys"
    kinds = (USER_ANNOTATION, CPU_OP) if nsys else (USER_ANNOTATION,)
    rows = np.flatnonzero(np.isin(trace.kind, kinds) & (trace.dur >= 0))
    if nsys and "os_runtime" in trace.cats:
        rows = rows[trace.cat[rows] != trace.cats.index("os_runtime")]
    style = trace.extra.get("nvtx_style")
    codes = style[rows].astype(np.int64) if style is not None else np.full(rows.size, 59, np.int64)
    keys = trace.name[rows].astype(np.int64) * 256 + np.clip(codes, 0, 255)
    g = _grouped(keys, _ns(trace, rows))
    original = ((trace.meta.get("nvtx_steps") or {}).get("original_names") or {})
    labels = [original.get(trace.names[k // 256], trace.names[k // 256]) for k in g["key"].tolist()]
    styles = [NVTX_STYLE.get(int(k % 256), "PushPop") for k in g["key"].tolist()]
    return _time_table("nvtx_sum", "Instances", ["Range"], labels, g, extra=styles)


_BUILDERS = {"cuda_gpu_kern_sum": kern_sum, "cuda_api_sum": api_sum, "cuda_gpu_mem_time_sum": mem_time_sum,
             "cuda_gpu_mem_size_sum": mem_size_sum, "nvtx_sum": nvtx_sum}


def stats_tables(trace: Trace, reports: tuple[str, ...] | list[str] = REPORTS) -> list[StatsTable]:
    out = []
    for name in reports:
        table = _BUILDERS[name](trace)
        if name == "nvtx_sum":
            table.columns.insert(len(table.columns) - 1, "Style")
        out.append(table)
    return out
