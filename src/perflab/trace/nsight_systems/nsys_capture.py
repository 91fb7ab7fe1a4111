"""What an Nsight Systems export says about its own capture: versions, settings, GPUs, diagnostics.

Nsight Systems records its own warnings in DIAGNOSTIC_EVENT: dropped or incomplete CUDA events,
tracing that did not start, a run cut short by --duration. These decide how far the numbers can be
trusted, so they travel with the trace (`meta["capture"]`) into every output, and they explain a
capture with no GPU rows (`why_no_gpu_work`) instead of leaving it to a guess.
"""
from __future__ import annotations

import re
import sqlite3
from collections import Counter

from perflab.trace.nsight_systems.nsys_db import Schema, clean, key_values

SEVERITY = {0: "unknown", 1: "info", 2: "warning", 3: "error", 4: "verbose"}
_DROPPED = re.compile(r"(?:dropped|lost|discarded)\D{0,40}?(\d[\d,]*)|(\d[\d,]*)\D{0,60}?(?:dropped|lost|discarded)", re.I)
_INCOMPLETE = re.compile(r"might (?:have not|not have|not) be(?:en)? (?:collected|started)|might be missing|"
                         r"not all .* collected|dropped|lost", re.I)
_VERSION_IN_PATH = re.compile(r"nsight[-_ ]systems[-/ ](\d{4}\.\d+(?:\.\d+)*)", re.I)
_COLLECTED = re.compile(r"Number of (CUDA|NVTX|OS runtime libraries) events collected:\s*([\d,]+)", re.I)


def export_info(conn: sqlite3.Connection, schema: Schema) -> dict:
    """nsys and export schema versions, platform; from the metadata table, else inferred from strings."""
    table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in schema.columns), None)
    kv = dict(key_values(conn, schema, table)) if table else {}
    info = {"metadata_table": table, "nsys_version": kv.get("EXPORT_PRODUCT_VERSION"),
            "schema_version": kv.get("EXPORT_SCHEMA_VERSION"), "platform": kv.get("EXPORT_PLATFORM"),
            "arch": kv.get("EXPORT_ARCH"), "exported_utc": kv.get("EXPORT_TIME_UTC"),
            "version_source": "metadata" if kv.get("EXPORT_PRODUCT_VERSION") else None}
    if not info["nsys_version"] and schema.has("StringIds", "value"):
        for (value,) in conn.execute("SELECT value FROM StringIds WHERE value LIKE '%ight%ystems%' LIMIT 50"):
            m = _VERSION_IN_PATH.search(str(value))
            if m:
                info.update(nsys_version=m.group(1), version_source="inferred from a path in the export")
                break
    return info


def capture_settings(conn: sqlite3.Connection, schema: Schema) -> dict:
    """The recording options that matter for reading it (META_DATA_CAPTURE, from nsys 2023.3)."""
    rows = key_values(conn, schema, "META_DATA_CAPTURE")
    if not rows:
        return {}
    out: dict = {"processes": {}}
    for key, value in rows:
        if key in ("RUN_DURATION_MS", "START_DELAY_MS"):
            out[key.lower()] = _int(value)
        elif key in ("START_TRIGGER", "STOP_TRIGGER"):
            out[key.lower()] = value
        elif key == "CAPTURE_EVENT_TYPE":
            out.setdefault("event_types", []).append(value)
        m = re.fullmatch(r"PROCESS_(\d+):(COLLECT_\w+_TRACE|COMMAND)", key)
        if m:
            proc = out["processes"].setdefault(m.group(1), {})
            proc[m.group(2).lower()] = value if m.group(2) == "COMMAND" else value.lower() == "true"
    return out


def diagnostics(conn: sqlite3.Connection, schema: Schema) -> dict:
    """Warnings and errors nsys recorded (deduplicated, with counts), events it dropped, what it collected."""
    t = "DIAGNOSTIC_EVENT"
    if not schema.has(t, "text"):
        return {"table": False, "messages": [], "dropped_events": 0, "incomplete": False, "collected": {}}
    sev = '"severity"' if schema.has(t, "severity") else "2"
    ts = '"timestamp"' if schema.has(t, "timestamp") else "0"
    counts: Counter = Counter()
    first_ts: dict[tuple[str, str], float] = {}
    dropped, incomplete, collected = 0, False, {}
    for when, level, text in conn.execute(f'SELECT {ts}, {sev}, text FROM "{t}" ORDER BY {ts}'):
        text = clean(" ".join(str(text or "").split()))
        level = SEVERITY.get(_int(level), "unknown")
        for kind, number in _COLLECTED.findall(text):
            collected[kind] = collected.get(kind, 0) + _int(number.replace(",", ""))
        m = _DROPPED.search(text)
        if m:
            dropped += _int((m.group(1) or m.group(2)).replace(",", ""))
        if _INCOMPLETE.search(text):
            incomplete = True
        if level in ("warning", "error") or m:
            key = (level, text)
            counts[key] += 1
            first_ts.setdefault(key, (_int(when) or 0) / 1e3)
    messages = [{"severity": lvl, "text": txt, "count": n, "first_us": first_ts[(lvl, txt)],
                 "dropped": bool(_DROPPED.search(txt))} for (lvl, txt), n in counts.items()]
    return {"table": True, "messages": messages, "dropped_events": dropped, "incomplete": incomplete,
            "collected": collected}


def devices(conn: sqlite3.Connection, schema: Schema) -> list[dict]:
    """One entry per CUDA device, keyed like Kineto's deviceProperties (id = CUDA device ordinal)."""
    out = []
    if schema.has("TARGET_INFO_GPU", "name", "smCount"):
        cuda = "cuDevice" if schema.has("TARGET_INFO_GPU", "cuDevice") else "id"
        cols = {c: (c if schema.has("TARGET_INFO_GPU", c) else "NULL") for c in
                ("id", "computeMajor", "computeMinor", "totalMemory", "memoryBandwidth", "clockRate", "busLocation",
                 "chipName", "maxBlocksPerSm", "maxWarpsPerSm", "threadsPerWarp")}
        sql = (f'SELECT {cuda}, name, smCount, {cols["computeMajor"]}, {cols["computeMinor"]}, {cols["totalMemory"]}, '
               f'{cols["memoryBandwidth"]}, {cols["clockRate"]}, {cols["busLocation"]}, {cols["chipName"]}, '
               f'{cols["id"]}, {cols["maxBlocksPerSm"]}, {cols["maxWarpsPerSm"]}, {cols["threadsPerWarp"]} '
               "FROM TARGET_INFO_GPU")
        for cu, name, sms, major, minor, mem, bw, clock, bus, chip, gid, blocks, warps, warp in conn.execute(sql):
            if not _int(sms):  # display adapters listed beside the CUDA GPU on Windows (no SMs)
                continue
            out.append(_device(cu, name, sms, major, minor, mem, bw, clock, bus, chip, gid, blocks, warps, warp))
    elif schema.has("TARGET_INFO_CUDA_GPU", "name", "deviceId"):
        cols = {c: (c if schema.has("TARGET_INFO_CUDA_GPU", c) else "NULL") for c in
                ("numMultiprocessors", "computeCapabilityMajor", "computeCapabilityMinor", "globalMemorySize",
                 "globalMemoryBandwidth", "coreClockRate", "pciBusId", "maxBlocksPerMultiprocessor",
                 "maxWarpsPerMultiprocessor", "numThreadsPerWarp")}
        seen = set()
        for row in conn.execute(f'SELECT deviceId, name, {cols["numMultiprocessors"]}, {cols["computeCapabilityMajor"]}, '
                                f'{cols["computeCapabilityMinor"]}, {cols["globalMemorySize"]}, '
                                f'{cols["globalMemoryBandwidth"]}, {cols["coreClockRate"]}, {cols["pciBusId"]}, '
                                f'{cols["maxBlocksPerMultiprocessor"]}, {cols["maxWarpsPerMultiprocessor"]}, '
                                f'{cols["numThreadsPerWarp"]} FROM TARGET_INFO_CUDA_GPU'):
            if row[0] in seen:
                continue
            seen.add(row[0])
            # this older table gives bandwidth in kB/s and the clock in kHz
            out.append(_device(row[0], row[1], row[2], row[3], row[4], row[5],
                               None if row[6] is None else _int(row[6]) * 1000,
                               None if row[7] is None else _int(row[7]) * 1000, row[8], None, row[0], *row[9:12]))
    if not out and schema.has("TARGET_INFO_GPU", "name"):  # an export that lists only the GPUs' names
        key = schema.first("TARGET_INFO_GPU", "cuDevice", "deviceId", "id")
        rows = conn.execute(f'SELECT {key or "rowid - 1"}, name FROM TARGET_INFO_GPU').fetchall()
        out = [_device(i, name, 0, 0, 0, 0, 0, 0, "", "", i) for i, name in rows]
    return sorted(out, key=lambda d: d["id"])


def _device(cu, name, sms, major, minor, mem, bw, clock, bus, chip, gid, blocks=None, warps=None, warp=None) -> dict:
    return {"id": _int(cu), "name": clean(str(name or "unknown GPU")), "numSms": _int(sms),
            "computeMajor": _int(major), "computeMinor": _int(minor), "totalGlobalMem": _int(mem),
            "memoryBandwidthBytesPerS": _int(bw), "clockRateHz": _int(clock), "busLocation": clean(str(bus or "")),
            "chip": clean(str(chip or "")), "nsysGpuId": _int(gid), "maxBlocksPerSm": _int(blocks),
            "maxWarpsPerSm": _int(warps), "warpSize": _int(warp) or 32}


def processes(conn: sqlite3.Connection, schema: Schema) -> dict[int, str]:
    if not schema.has("PROCESSES", "pid", "name"):
        return {}
    return {_int(pid): clean(str(name or "")) for pid, name in conn.execute("SELECT pid, name FROM PROCESSES")}


def thread_names(conn: sqlite3.Connection, schema: Schema) -> dict[int, str]:
    """globalTid -> thread name (ThreadNames points into StringIds)."""
    if not schema.has("ThreadNames", "nameId", "globalTid") or not schema.has("StringIds", "id", "value"):
        return {}
    sql = "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
    return {_int(g): clean(str(v)) for g, v in conn.execute(sql)}


def why_no_gpu_work(capture: dict, api_calls: Counter, launches: int) -> str:
    """Why a capture holds no kernel, copy or memset row, from what the file itself records."""
    settings = capture.get("settings") or {}
    procs = settings.get("processes") or {}
    cuda_flags = [p.get("collect_cuda_trace") for p in procs.values() if "collect_cuda_trace" in p]
    diag = capture.get("diagnostics") or {}
    duration = settings.get("run_duration_ms")
    calls = sum(api_calls.values())
    if cuda_flags and not any(cuda_flags):
        return ("CUDA tracing was off for this capture (its settings record COLLECT_CUDA_TRACE=false): record again "
                "with `nsys profile --trace=cuda,nvtx,osrt ...`")
    if calls == 0 and capture.get("tables", {}).get("runtime") is False:
        return ("the export has no CUDA API or GPU activity table: CUDA was not traced (or the program never used "
                "CUDA); record with `nsys profile --trace=cuda,nvtx,osrt ...`")
    top = ", ".join(f"{n} x{c}" for n, c in api_calls.most_common(4))
    if launches == 0:
        cut = ""
        if duration:
            cut = f" The capture stopped after {duration / 1e3:g} s"
            cut += (" and nsys warns that CUDA events may be missing" if diag.get("incomplete") else "")
            cut += ": it most likely ended before the program's GPU work began."
        elif diag.get("incomplete"):
            cut = " nsys warns that CUDA events may be missing: the capture was most likely cut short."
        return (f"the program made {calls} CUDA API call(s) ({top}) but launched no kernel, copy or memset in the "
                f"captured window.{cut} Record longer (a larger --duration, or --capture-range=cudaProfilerApi around "
                "the part to study) and let the program reach its GPU work")
    dropped = diag.get("dropped_events") or 0
    lost = f"; nsys reports {dropped:,} dropped events" if dropped else ""
    return (f"the program launched GPU work {launches} time(s) but the export holds none of it{lost}: the GPU records "
            "were never flushed (the capture ended or the process was killed before CUPTI's buffers were read). Let "
            "the program exit normally, or call cudaProfilerStop() and use --flush-on-cudaprofilerstop=true")


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def capture_summary(trace) -> dict:
    """The capture facts every output carries: versions, GPUs, nsys's warnings and dropped events."""
    capture = trace.meta.get("capture") or {}
    export = capture.get("export") or {}
    diag = capture.get("diagnostics") or {}
    settings = capture.get("settings") or {}
    return {"nsys_version": export.get("nsys_version"), "version_source": export.get("version_source"),
            "export_schema": export.get("schema_version"), "platform": export.get("platform"),
            "gpus": [d["name"] for d in capture.get("devices") or []],
            "dropped_events": diag.get("dropped_events", 0), "possibly_incomplete": diag.get("incomplete", False),
            "warnings": [m for m in diag.get("messages", []) if m["severity"] in ("warning", "error")],
            "duplicate_api_rows": capture.get("duplicate_api_rows", 0),
            "run_duration_ms": settings.get("run_duration_ms"), "nvtx_steps": trace.meta.get("nvtx_steps"),
            "pid": trace.meta.get("pid"), "no_gpu_work": capture.get("no_gpu_work"),
            "unusable": capture.get("unusable") or {}}


def capture_notes(trace) -> list[str]:
    """One line each: what nsys dropped or warned about, and rows the reader removed."""
    capture = trace.meta.get("capture") or {}
    diag = capture.get("diagnostics") or {}
    notes = []
    if diag.get("dropped_events"):
        said = "; ".join(m["text"][:300] for m in diag.get("messages", []) if m.get("dropped"))
        notes.append(f"nsys dropped {diag['dropped_events']:,} events during this capture; it says: {said}")
    seen = set()
    for m in diag.get("messages", []):
        if m["severity"] in ("warning", "error") and not m.get("dropped") and "Does the process use" not in m["text"] \
                and "might have not been started" not in m["text"] and m["text"] not in seen:
            seen.add(m["text"])
            notes.append(f"nsys {m['severity']}: {m['text'][:300]}")
    if (capture.get("tables") or {}).get("graph_trace"):
        notes.append("CUDA graphs were traced whole (nsys --cuda-graph-trace=graph): each graph launch is one row named "
                     "'Graph Exec N'; record with --cuda-graph-trace=node to see their kernels")
    from perflab.trace.nsight_systems.nsys_checks import notes as unusable_notes

    notes += unusable_notes(capture.get("unusable") or {})
    if capture.get("duplicate_api_rows"):
        notes.append(f"{capture['duplicate_api_rows']:,} CUDA API rows listed twice under one correlation id were "
                     "counted once")
    return notes[:8]
