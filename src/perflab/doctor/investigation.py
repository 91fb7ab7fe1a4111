"""The merged, top-down report of one program's evidence: the timeline (level 1), the kernels that would save the
most at their speed of light under Nsight Compute (level 2), the allocator's history when memory is the issue
(level 3). Each level carries its finding, its estimated gain, the evidence, and the commands that reproduce it.

    from perflab.doctor.investigation import build
    inv = build("perflab-work/investigate/20261124-101500")   # what `perflab investigate` wrote, or any folder
    inv.to_dict()["headline"]                                  # holding a trace, ncu reports, a snapshot

`perflab investigate` writes the folder and its record (investigation.json: the program, the options, how each
level's run went); `perflab doctor FOLDER` calls build() on it, so both print the same report. Without a record
(evidence gathered by hand) the levels are read from the files alone.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.doctor.finding import SEVERITY_ORDER
from perflab.doctor.investigation_files import Evidence, by_hand, number, runnable_here, scan, section, strings, text
from perflab.doctor.investigation_kernels import Reports, kernel_entries
from perflab.doctor.investigation_memory import memory_entry, memory_reasons, not_needed
from perflab.doctor.investigation_system import KERNELS, MIN_GAIN_PCT, Level1, read_level1, system_entry
from perflab.doctor.registry import severity_for

SCHEMA = "perflab.investigation/1"
NAMES = {1: ("system", "torch.profiler + the doctor"), 2: ("kernel", "Nsight Compute + the kernel doctor"),
         3: ("memory", "allocator history + the memory doctor")}


@dataclass
class Investigation:
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data

    @property
    def headline(self) -> dict[str, Any]:
        return self.data["headline"]

    def level(self, n: int) -> dict[str, Any]:
        return self.data["levels"][n - 1]


def options_of(record: dict[str, Any]) -> dict[str, Any]:
    o = section(record, "options")
    num = {k: number(o.get(k)) for k in ("steps", "warmup", "kernels", "min_gain_pct", "max_launches", "slice_s")}
    return {"steps": int(num["steps"] or 10), "warmup": int(num["warmup"] if num["warmup"] is not None else 3),
            "kernels": int(num["kernels"] if num["kernels"] is not None else KERNELS),
            "min_gain_pct": num["min_gain_pct"] if num["min_gain_pct"] is not None else MIN_GAIN_PCT,
            "max_launches": int(num["max_launches"] or 8), "marker": text(o.get("marker")) or None,
            "target": text(o.get("target")) or None}


def build(folder: str | Path, *, level1: Level1 | None = None) -> Investigation:
    """The merged report of `folder` (see the module doc). `level1`: level 1 already read (by the run itself)."""
    folder = Path(folder)
    ev = scan(folder)
    rec = ev.record
    opts = options_of(rec)
    recorded = strings(rec.get("program")) or None
    program = runnable_here(recorded)  # for the by-hand commands; the report names what ran
    l1 = level1 or read_level1(ev.traces, folder, kernels=opts["kernels"], min_gain_pct=opts["min_gain_pct"],
                               max_launches=opts["max_launches"], program=program)
    levels = [_system(l1, rec, program, opts, folder), _kernels(l1, ev, rec, program, folder),
              _memory(ev, rec, program, folder, opts)]
    device = (l1.trace.meta.get("device_name") if l1.trace is not None else None) or \
        text(section(rec, "levels", "1", "memory").get("device"))
    data = {"schema": SCHEMA, "program": recorded, "folder": str(folder), "device": device or "",
            "recorded_by_perflab": bool(rec), "started": text(rec.get("started")) or None,
            "wall_s": number(rec.get("wall_s")), "headline": headline(levels), "levels": levels,
            "files_not_read": [{"file": n, "why": w} for n, w in ev.other]}
    return Investigation(data)


def _prog(program: list[str] | None) -> str:
    return shlex.join(program) if program else "python YOUR_SCRIPT.py"


def _level(n: int, status: str, **rest: Any) -> dict[str, Any]:
    name, tool = NAMES[n]
    return {"level": n, "name": name, "tool": tool, "status": status, **rest}


def _system(l1: Level1, rec: dict, program: list[str] | None, opts: dict, folder: Path) -> dict[str, Any]:
    r = section(rec, "levels", "1")
    entry = system_entry(l1)
    extra = (f" --marker {shlex.quote(opts['marker'])}" if opts["marker"] else "") + \
        (f" --target {shlex.quote(opts['target'])}" if opts["target"] else "")
    commands = {"record": f"perflab profile --steps {opts['steps']} --warmup {opts['warmup']}{extra} "
                          f"--out {shlex.quote(str(by_hand(folder) / 'level1'))} -- {_prog(program)}"}
    if l1.paths:
        commands["read"] = f"perflab doctor {shlex.quote(str(l1.paths[0] if len(l1.paths) == 1 else folder))}"
    status = text(r.get("status")) or ("done" if l1.report is not None else "missing")
    if status == "done" and l1.report is None:
        status = "failed"
    notes = list(entry.pop("notes", []))
    if text(r.get("error")):
        notes.insert(0, text(r["error"]))
    if l1.error and l1.paths:
        notes.append(l1.error)
    top = entry["verdict"] if l1.report is not None else (text(r.get("error")) or l1.error or "no trace")
    if status in ("failed", "timed-out") and l1.report is not None:
        top = f"(the program {'ran past its time limit' if status == 'timed-out' else 'failed'}; the partial trace " \
              f"says) {top}"
    return _level(1, status, took_s=number(r.get("took_s")), top_line=top, commands=commands, notes=notes,
                  log=text(r.get("log")) or None, output_tail=text(r.get("output_tail")) or None,
                  returncode=number(r.get("returncode")), **entry)


def _kernels(l1: Level1, ev: Evidence, rec: dict, program: list[str] | None, folder: Path) -> dict[str, Any]:
    r = section(rec, "levels", "2")
    recorded = r.get("kernels") if isinstance(r.get("kernels"), list) else []
    reports = Reports(ev.ncu)
    entries, others = kernel_entries(l1, reports, recorded, program, folder) if l1.trace is not None else \
        ([], kernel_entries(Level1(), reports, [], program, folder)[1])
    done = [e for e in entries if e.get("report")]
    ran = [e for e in entries if e["status"] != "not-run"]
    if text(r.get("status")) == "skipped":
        status = "skipped"
    elif not entries:
        status = "not-needed" if l1.report is not None else ("done" if others else "missing")
    elif not ran:
        status = "not-run"
    else:
        status = "done" if len(done) == len(entries) else "partial" if done else "failed"
    why = text(r.get("why")) or l1.why or (l1.error or "")
    first = done[0] if done else (entries[0] if entries else None)
    if first is not None:
        f = first.get("finding")
        top = (f"{first['function']}: up to {first['gain_pct']:.1f} % of the step to gain at its speed of light"
               + (f"; ncu: {ncu_words(f)} (~{first['ncu_gain_pct']:.1f} % of the step)" if f and
                  first.get("ncu_gain_pct") is not None else f"; {first['verdict']}"))
    elif others:
        top = f"{others[0]['report_file']}: {others[0]['verdict']}"
    else:
        top = why or "no kernel to profile"
    gain, unit = kernel_gain(first)
    return _level(2, status, took_s=number(r.get("took_s")), top_line=top, why=why, kernels=entries,
                  other_reports=others, finding=first.get("finding") if first else None, gain_pct=gain,
                  gain_unit=unit, notes=[text(r["error"])] if text(r.get("error")) else [])


def ncu_words(f: dict) -> str:
    """A kernel finding's summary without the kernel's name in front (the entry names it)."""
    kernel = str((f.get("evidence") or {}).get("kernel") or "")
    summary = f["summary"]
    return summary[len(kernel) + 2:] if kernel and summary.startswith(kernel + ": ") else summary


def kernel_gain(k: dict | None) -> tuple[float | None, str]:
    """What working on this kernel would give, as a share of the step: ncu's estimate when ncu profiled it (the
    kernel doctor's gain on its time, times the kernel's share of the step), else its gap to its speed of light."""
    if k is None:
        return None, ""
    if k.get("ncu_gain_pct") is not None:
        return k["ncu_gain_pct"], "% of step time (ncu's estimate on the kernel's time)"
    return k["gain_pct"], "% of step time (up to: the kernel's gap to its speed of light)"


def _memory(ev: Evidence, rec: dict, program: list[str] | None, folder: Path, opts: dict) -> dict[str, Any]:
    r = section(rec, "levels", "3")
    stats = section(rec, "levels", "1", "memory") or None
    reasons = strings(r.get("reasons")) or memory_reasons(stats, text(section(rec, "levels", "1").get("output_tail")))
    target = f" --target {shlex.quote(opts['target'])}" if opts["target"] else ""
    commands = {"record": f"perflab memory record{target} --out {shlex.quote(str(by_hand(folder) / 'memory.json.gz'))} "
                          f"-- {_prog(program)}"}
    status = text(r.get("status"))
    if not ev.snapshots:
        why = text(r.get("error")) or (not_needed(stats) if not reasons else "; ".join(reasons))
        status = status or ("not-needed" if not reasons else "missing")
        return _level(3, status, took_s=number(r.get("took_s")), reasons=reasons, top_line=why, why=why,
                      finding=None, commands=commands, notes=[], log=text(r.get("log")) or None, trigger=stats)
    entry = memory_entry(ev.snapshots, stats, reasons)
    if r.get("from_level1") is True:
        entry["notes"].append("the allocator's history was recorded in level 1's run: allocations made while the "
                              "timeline was recorded carry no stack (\"(no stack recorded)\"); `perflab memory record` "
                              "below records them all with their stacks")
    commands["read"] = f"perflab doctor {shlex.quote(str(folder / entry['file']))}"
    status = "failed" if entry.get("error") else "done"
    if not reasons:
        reasons = ["a memory snapshot is in the folder"]
    return _level(3, status, took_s=number(r.get("took_s")), reasons=reasons, top_line=entry["verdict"],
                  why="; ".join(reasons), commands=commands, log=text(r.get("log")) or None, trigger=stats,
                  oom=any("out of GPU memory" in x or "out-of-memory" in x for x in reasons), **entry)


def headline(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Where to act first: the level whose finding ranks highest (severity, then the share of step time it would
    give back); a program that ran out of memory is a memory problem first. Memory gains are shares of memory, not
    of time: memory leads only with a higher severity than the time levels."""
    l1, l2, l3 = levels
    f3 = l3.get("finding")
    if l3.get("oom") and f3:
        return _head(3, "memory", f3, None, l3)
    cands = []
    f1 = l1.get("finding")
    if f1 and f1["id"] != "healthy":
        cands.append((SEVERITY_ORDER[f1["severity"]], -f1["gain_pct"], 0, 1))
    k = (l2.get("kernels") or [None])[0]
    same = f1 is not None and k is not None and (k.get("finding") or {}).get("id") == f1["id"]
    if k is not None and not same:   # ncu naming the timeline's cause backs level 1, whose text quotes it
        gain = kernel_gain(k)[0] or 0.0
        cands.append((SEVERITY_ORDER[severity_for(gain) or "info"], -gain, 0, 2))
    if f3 and f3["id"] != "healthy":
        cands.append((SEVERITY_ORDER[f3["severity"]], 0.0, 1, 3))
    if l1.get("status") != "done" and not cands:  # no steady-state evidence: nothing was judged, say so
        text_ = f"Not judged: level 1 {l1.get('status', 'missing')}: " + (l1.get("top_line") or "no evidence") + \
            " Record again (a longer --timeout, fewer --steps) before reading anything into it."
        return {"level": 1, "scope": "incomplete", "text": text_, "gain_pct": 0.0, "gain_unit": "", "kernel": None}
    if not cands:
        text_ = "Nothing to fix at any level: " + (l1.get("top_line") or "no evidence")
        return {"level": 1, "scope": "healthy", "text": text_, "gain_pct": 0.0, "gain_unit": "", "kernel": None}
    rank, *_, best = min(cands)
    unjudged = _still_unjudged(f1, l2)
    if rank >= SEVERITY_ORDER["low"] and unjudged is not None:  # little found, but most of the time never judged
        head = headline_of(best, l1, l2, l3, f1, k, f3)
        return {"level": head["level"], "scope": "incomplete", "gain_pct": head["gain_pct"],
                "gain_unit": head["gain_unit"], "kernel": head["kernel"],
                "text": f"Not judged yet: {unjudged:.0f} % of the GPU time is in kernels the timeline cannot price and "
                        f"Nsight Compute has not read; what was read: {head['text'].rstrip('.')}. Read more kernels "
                        "(`perflab investigate --kernels N`) before concluding that nothing is left."}
    if rank >= SEVERITY_ORDER["low"]:  # the best a level offers is a few per cent: say that, not "act on"
        head = headline_of(best, l1, l2, l3, f1, k, f3)
        gain = head["gain_pct"]
        where = head["text"].rstrip(".")
        return {"level": head["level"], "scope": "healthy", "gain_pct": gain, "gain_unit": head["gain_unit"],
                "kernel": head["kernel"],
                "text": f"Nothing big left at any level; the largest gain: {where}."}
    return headline_of(best, l1, l2, l3, f1, k, f3)


def _still_unjudged(f1: dict | None, l2: dict) -> float | None:
    """The share of GPU time level 1 could not price and level 2 did not read (None when under a quarter):
    the not-judged note's unpriced share less the kernels Nsight Compute read, as shares of the step."""
    ev = (f1 or {}).get("evidence") or {}
    share = ev.get("unjudged_gpu_time_pct")
    if not isinstance(share, (int, float)) or share <= 0:
        return None
    busy = ev.get("gpu_busy_pct") if isinstance(ev.get("gpu_busy_pct"), (int, float)) else 100.0
    read = sum(100.0 * kk["time_us"] / kk["step_us"] for kk in (l2.get("kernels") or [])
               if kk.get("finding") and kk.get("step_us") and kk.get("time_us"))
    left = share * busy / 100.0 - read  # both as shares of the step
    return left if left >= 25.0 else None


def headline_of(best: int, l1: dict, l2: dict, l3: dict, f1: dict | None, k: dict | None,
                f3: dict | None) -> dict[str, Any]:
    if best == 1:
        scope = "kernel" if f1["level"] == "kernel" else f1["level"]
        return _head(1, scope, f1, k if scope == "kernel" else None, l1)
    if best == 2:
        return _head(2, "kernel", k.get("finding"), k, l2)
    return _head(3, "memory", f3, None, l3)


def _head(level: int, scope: str, f: dict | None, kernel: dict | None, entry: dict) -> dict[str, Any]:
    if level == 2 or (kernel is not None and scope == "kernel"):
        ncu = f"; ncu: {ncu_words(kernel['finding'])}" if kernel.get("finding") else ""
        share = f"{100 * kernel['time_us'] / kernel['step_us']:.0f} % of the step" if kernel.get("step_us") else ""
        if level == 1 and f:   # the timeline's finding leads; ncu's reading of the kernel backs it
            text_ = f"{f['summary']} The kernel: {kernel['function']} ({share}){ncu}."
            gain = f["gain_pct"]
        else:
            gain, _ = kernel_gain(kernel)
            text_ = (f"{kernel['function']} ({share}, at {kernel['pct_of_roof'] or 0:.0f} % of its roof by the "
                     f"timeline){ncu}; ~{gain:.1f} % of the step to gain.")
        return {"level": level, "scope": "kernel", "text": text_, "gain_pct": gain, "gain_unit": "% of step time",
                "kernel": kernel["kernel"], "function": kernel["function"]}
    unit = (f or {}).get("gain_unit") or ("% of reserved memory" if scope == "memory" else "% of step time")
    return {"level": level, "scope": scope, "text": entry.get("top_line") or (f or {}).get("summary", ""),
            "gain_pct": (f or {}).get("gain_pct", 0.0), "gain_unit": unit, "kernel": None}
