#!/usr/bin/env python3
"""perflab doctor vs Holistic Trace Analysis 0.5.0, side by side.

    python benchmarks/doctor_vs_hta.py            # agreement table on every peer trace + speed/memory
    python benchmarks/doctor_vs_hta.py --no-speed # agreement only
    python benchmarks/doctor_vs_hta.py --big      # also: synthesize a ~5 GB trace and diagnose it
    python benchmarks/doctor_vs_hta.py --trace T.json.gz --rounds 3 [--no-hta]   # speed/memory on one trace
    python benchmarks/doctor_vs_hta.py --trace T.json --no-hta --against OLD/src  # also perflab from another tree

HTA runs in its own virtual environment (.bench/hta-venv, created on first use with
`pip install holistictraceanalysis==0.5.0`). Every measured run is a fresh process started by a small
launcher (never forked from this process, whose peak RSS a forked child would inherit); the launcher reports
its wall time and peak RSS. Beside HTA and perflab runs the floor: a msgspec typed decode of the fields a
timeline needs, and perflab's time and memory are printed against both.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fresh_process import measured   # benchmarks/fresh_process.py: this script's folder is on sys.path

ROOT = Path(__file__).resolve().parents[1]
PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", str(Path(__file__).resolve().parents[2] / "shared" / "peer-traces" / "hta")))
BENCH = ROOT / ".bench"
VENV = BENCH / "hta-venv"
HTA_PY = VENV / "bin" / "python"
TOLERANCE_PP = 0.5

HTA_BREAKDOWNS = r'''
import json, logging, os, sys, tempfile, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
for p in sys.argv[1:]:
    os.symlink(os.path.abspath(p), os.path.join(d, os.path.basename(p)))
out = {}
try:
    ta = TraceAnalysis(trace_dir=d)
except BaseException as e:
    print(json.dumps({"load_error": f"{type(e).__name__}: {e}"})); sys.exit()
out["ranks"] = sorted(ta.t.traces)
def run(key, fn):
    try:
        out[key] = fn().to_dict("records")
    except BaseException as e:
        out[key + "_error"] = f"{type(e).__name__}: {e}".strip()
run("temporal", lambda: ta.get_temporal_breakdown(visualize=False))
run("idle", lambda: ta.get_idle_time_breakdown(visualize=False)[0])
if "idle_error" in out and out["ranks"]:
    r = out["ranks"][0]
    run("idle_rank", lambda: ta.get_idle_time_breakdown(ranks=[r], visualize=False)[0])
print(json.dumps(out, default=str))
'''

HTA_FULL = r'''
import logging, os, sys, tempfile, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
os.symlink(os.path.abspath(sys.argv[1]), os.path.join(d, os.path.basename(sys.argv[1])))
ta = TraceAnalysis(trace_dir=d)
rank = sorted(ta.t.traces)[0]
ta.get_temporal_breakdown(visualize=False)
ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
ta.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)
'''


def ensure_hta() -> None:
    if HTA_PY.exists():
        return
    print(f"creating {VENV} with holistictraceanalysis==0.5.0 ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(HTA_PY), "-m", "pip", "install", "-q", "holistictraceanalysis==0.5.0"], check=True)


# The floor: a msgspec typed decode of the fields a timeline needs (kind, name, start, duration, thread and the
# ids that link a launch to its kernel), nothing else computed. What any reader of this file must at least pay.
FLOOR = r'''
import gzip, sys
from typing import Union
import msgspec
Num = Union[int, float, str]
class Args(msgspec.Struct, gc=False):
    correlation: Num = -1
    external_id: Num = msgspec.field(name="External id", default=-1)
    stream: Num = -1
    device: Num = -1
class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: Num = 0
    dur: Num = 0
    tid: Union[int, str] = 0
    args: Args = msgspec.field(default_factory=Args)
class Doc(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []
path = sys.argv[1]
data = gzip.open(path, "rb").read() if open(path, "rb").read(2) == b"\x1f\x8b" else open(path, "rb").read()
doc = msgspec.json.decode(data, type=Doc)
print(len(doc.traceEvents))
'''


# -- agreement ---------------------------------------------------------------------------------
def hta_breakdowns(paths: list[Path]) -> dict:
    out = subprocess.run([str(HTA_PY), "-c", HTA_BREAKDOWNS, *map(str, paths)], capture_output=True, text=True)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"load_error": (out.stderr.strip().splitlines() or ["no output"])[-1]}


def _hta_idle_pct(rows: list[dict]) -> dict[tuple[int, str], float]:
    totals: dict[int, float] = {}
    for r in rows:
        totals[r["stream"]] = totals.get(r["stream"], 0.0) + float(r["idle_time"] or 0.0)
    return {(r["stream"], r["idle_category"]): 100.0 * float(r["idle_time"] or 0.0) / totals[r["stream"]]
            for r in rows if totals[r["stream"]] > 0}


def _our_idle_pct(result: dict) -> dict[tuple[int, str], float]:
    totals: dict[int, float] = {}
    for r in result["streams"]:
        totals[r["stream"]] = totals.get(r["stream"], 0.0) + r["idle_us"]
    return {(r["stream"], r["category"]): 100.0 * r["idle_us"] / totals[r["stream"]]
            for r in result["streams"] if totals[r["stream"]] > 0}


def compare(paths: list[Path]) -> dict:
    from perflab.analysis.reports.hta_breakdown import idle_time_breakdown, temporal_breakdown
    from perflab.errors import PerflabError
    from perflab.trace.kineto import load

    h = hta_breakdowns(paths)
    try:
        traces = [load(p) for p in paths]
    except PerflabError as exc:
        return {"ours": f"error: {exc}", "hta": h}
    ours_t = {r["rank"]: r for r in temporal_breakdown(traces)}
    row = {"ranks": sorted(ours_t)}
    if "temporal" in h:
        diffs = []
        for r in h["temporal"]:
            o = ours_t.get(r["rank"], {})
            diffs += [abs(o.get(f"{k}_pct", float("inf")) - r[f"{k}_time_pctg"]) for k in ("idle", "compute", "non_compute")]
            if abs(o.get("kernel_us", float("inf")) - r["kernel_time(us)"]) > 0.5:
                diffs.append(float("inf"))  # not the same span: the numbers agree by accident
        row["temporal"] = ("idle/compute/other " + " | ".join(
            f"r{r['rank']}: {r['idle_time_pctg']:.2f}/{r['compute_time_pctg']:.2f}/{r['non_compute_time_pctg']:.2f}"
            for r in h["temporal"]), max(diffs))
    else:
        row["temporal"] = (f"HTA fails: {h.get('temporal_error', h.get('load_error', '?'))[:40]}",
                           "; ".join(o.get("error", f"ok {o.get('idle_pct')}")[:40] for o in ours_t.values()))
    idle_key = "idle" if "idle" in h else ("idle_rank" if "idle_rank" in h else None)
    ours_i = idle_time_breakdown(traces, rank=None if idle_key == "idle" else traces[0].rank)
    if idle_key:
        hp, op = _hta_idle_pct(h[idle_key]), _our_idle_pct(ours_i)
        keys = set(hp) | set(op)
        diff = max((abs(hp.get(k, 0.0) - op.get(k, 0.0)) for k in keys), default=0.0)
        note = "" if idle_key == "idle" else f"HTA default fails ({h.get('idle_error', '')[:30]}); ranks=[{ours_i['rank']}]"
        row["idle"] = (f"{len({r['stream'] for r in h[idle_key]})} streams", diff, note)
    else:
        row["idle"] = (f"HTA fails: {h.get('idle_error', h.get('load_error', '?'))[:30]}",
                       ours_i.get("error", f"ours: {ours_i.get('idle_pct')}")[:40], "")
    return row


def agreement() -> bool:
    files = sorted(PEER.glob("*.json*"))
    cases = [(f.name[:44], [f]) for f in files]
    ranks = sorted(PEER.glob("trace_filter__sampled_rank-*"))
    if len(ranks) > 1:
        cases.append(("trace_filter rank-0 + rank-1 (one job)", ranks))
    ok = True
    print(f"\n== agreement with HTA 0.5.0 (tolerance {TOLERANCE_PP} pp) ==")
    print(f"{'trace':46s} {'temporal: HTA %':58s} {'max |d| pp':>10s}   idle-time (per stream)  max |d| pp")
    for name, paths in cases:
        row = compare(paths)
        if "temporal" not in row:
            print(f"{name:46s} {row['ours']}")
            ok = False
            continue
        t_text, t_diff = row["temporal"]
        i_text, i_diff, note = row["idle"]
        t_ok = isinstance(t_diff, float) and t_diff <= TOLERANCE_PP
        i_ok = isinstance(i_diff, float) and i_diff <= TOLERANCE_PP
        ok &= (t_ok or not isinstance(t_diff, float)) and (i_ok or not isinstance(i_diff, float))
        t_cell = f"{t_diff:10.3f}" if isinstance(t_diff, float) else f"  ours: {t_diff}"
        i_cell = f"{i_diff:10.3f}" if isinstance(i_diff, float) else f"  ours: {i_diff}"
        print(f"{name:46s} {t_text[:58]:58s} {t_cell}   {i_text:22s} {i_cell}  {note}")
    print("agreement:", "OK" if ok else "DIFFERENCES ABOVE TOLERANCE")
    return ok


# -- speed ---------------------------------------------------------------------------------------
def replicate(src: Path, copies: int | None, out: Path, target_bytes: float = 0.0) -> Path:
    """The trace repeated `copies` times in time (ids offset so links stay unique), written as JSON.

    copies=None: as many copies as it takes to reach target_bytes."""
    import gzip
    import re

    import orjson

    opener = gzip.open if src.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(src, "rb") as fh:
        doc = orjson.loads(fh.read())
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000
    max_id = max([0] + [int(e["args"].get("correlation", 0)) for e in events if isinstance(e.get("args"), dict)]
                 + [int(e["args"].get("External id", 0)) for e in events if isinstance(e.get("args"), dict)]
                 + [int(e["id"]) for e in events if isinstance(e.get("id"), int)]) + 1
    steps = [int(m.group(1)) for e in events if (m := re.match(r"ProfilerStep#(\d+)", str(e.get("name", ""))))]
    n_steps = (max(steps) - min(steps) + 1) if steps else 0
    if copies is None:
        copies = max(1, round(target_bytes / len(orjson.dumps(events))))
    tmp = out.with_suffix(".partial")
    with open(tmp, "wb") as fh:
        head = orjson.dumps(doc)
        fh.write(head[:-1] + (b',"traceEvents":[' if len(head) > 2 else b'"traceEvents":['))
        first = True
        for k in range(copies):
            shifted = []
            for e in events:
                if k == 0 or "ts" not in e:
                    if k == 0:
                        shifted.append(e)
                    continue
                e = dict(e)
                e["ts"] = e["ts"] + k * span
                if isinstance(e.get("id"), int):
                    e["id"] += k * max_id
                args = e.get("args")
                if isinstance(args, dict) and ("correlation" in args or "External id" in args):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int) and args[key] >= 0:
                            args[key] += k * max_id
                    e["args"] = args
                if n_steps and str(e.get("name", "")).startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{int(e['name'][13:]) + k * n_steps}"
                shifted.append(e)
            blob = orjson.dumps(shifted)[1:-1]
            if blob:
                fh.write((b"" if first else b",") + blob)
                first = False
        fh.write(b"]}")
    tmp.rename(out)
    return out


def speed(path: Path, label: str, rounds: int = 1, hta: bool = True, against: Path | None = None) -> None:
    """Wall time and peak memory of HTA, perflab's doctor and the floor, each in a fresh process, interleaved
    over `rounds` (the medians are printed); then perflab against HTA and against the floor. `against`: the src
    folder of another perflab checkout (a baseline), run the same way in the same rounds."""
    import statistics

    size = f"{path.stat().st_size / 1e6:.0f} MB " + ("gzip" if path.suffix == ".gz" else "of JSON")
    print(f"\n== speed and memory: {label} ({size}) ==", flush=True)
    tools = {"perflab": [sys.executable, "-m", "perflab", "doctor", "--json", str(path)],
             "floor": [sys.executable, "-c", FLOOR, str(path)]}
    if hta:
        tools = {"HTA 0.5.0": [str(HTA_PY), "-c", HTA_FULL, str(path)], **tools}
    if against is not None:
        tools = {"baseline": ["env", f"PYTHONPATH={against.resolve()}", *tools["perflab"]], **tools}
    runs: dict[str, list] = {name: [] for name in tools}
    for _ in range(rounds):   # timed runs: nothing samples memory beside them
        for name, cmd in tools.items():
            runs[name].append(measured(cmd, sample_memory=False))
    peaks = {name: measured(cmd)[1] for name, cmd in tools.items()}   # one sampled run each, for memory
    got = {name: (statistics.median(r[0] for r in rs), max(peaks[name], *(r[1] for r in rs)),
                  max(r[2] for r in rs), statistics.median(r[3] for r in rs)) for name, rs in runs.items()}
    what = {"HTA 0.5.0": "load + temporal, idle-time, kernel breakdowns, comm/comp overlap, launch stats",
            "perflab": "load + every analysis + rules + JSON report",
            "floor": "msgspec typed decode of the fields a timeline needs",
            "baseline": f"perflab doctor from {against}"}
    print(f"{'':10s} {'wall s':>8s} {'CPU s':>7s} {'peak MB':>8s}   (times: medians of {rounds} unsampled runs, each a "
          "fresh process; memory: the larger of its own peak RSS and, from one more run, its process tree's peak PSS)")
    for name, (wall, rss, rc, cpu) in got.items():
        print(f"{name:10s} {wall:8.2f} {cpu:7.2f} {rss:8.0f}   ({what[name]}){'' if rc == 0 else f'  exit {rc}'}")
    ours = got["perflab"]
    if "HTA 0.5.0" in got:
        h = got["HTA 0.5.0"]
        print(f"perflab vs HTA:   {h[0] / ours[0]:.1f}x faster, {100 * ours[1] / h[1]:.0f}% of HTA's peak memory")
    f = got["floor"]
    for name in ("baseline", "perflab") if "baseline" in got else ("perflab",):
        ours = got[name]
        print(f"{name} vs floor: {ours[0] / f[0]:.2f}x the floor's wall time (goal <= 1.5x), {ours[3] / f[3]:.2f}x its "
              f"CPU time, {ours[1] / f[1]:.2f}x its memory")


def big(target_gb: float) -> None:
    src = PEER / "df_index_resolver__df_index_resolver.json.gz"
    with tempfile.TemporaryDirectory(dir=BENCH) as d:
        out = Path(d) / "big.json"
        t0 = time.perf_counter()
        replicate(src, None, out, target_bytes=target_gb * 1e9)
        print(f"\n== big trace: {out.stat().st_size / 1e9:.2f} GB of JSON, df_index_resolver repeated in time "
              f"(synthesized in {time.perf_counter() - t0:.0f} s) ==", flush=True)
        wall, rss, rc, _ = measured([sys.executable, "-m", "perflab", "doctor", "--json", str(out)])
        print(f"perflab doctor: {wall:.1f} s wall, {rss:.0f} MB peak RSS, exit {rc}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-speed", action="store_true", help="skip the 10x speed/memory comparison")
    parser.add_argument("--big", action="store_true", help="also diagnose a synthesized ~5 GB trace")
    parser.add_argument("--big-gb", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the speed comparison")
    parser.add_argument("--trace", type=Path, help="only the speed comparison, on this trace (no agreement)")
    parser.add_argument("--no-hta", action="store_true", help="with --trace: perflab against the floor only")
    parser.add_argument("--against", type=Path, help="with --trace: also time perflab from this src folder")
    args = parser.parse_args()
    BENCH.mkdir(exist_ok=True)
    if args.trace:
        if not args.no_hta:
            ensure_hta()
        speed(args.trace, args.trace.name, rounds=args.rounds, hta=not args.no_hta, against=args.against)
        return 0
    ensure_hta()
    sys.path.insert(0, str(ROOT / "src"))
    ok = agreement()
    if not args.no_speed:
        src = PEER / "df_index_resolver__df_index_resolver.json.gz"
        x10 = BENCH / "df_index_resolver_x10.json"
        if not x10.exists():
            print("writing the 10x trace ...", flush=True)
            replicate(src, 10, x10)
        speed(src, "df_index_resolver", rounds=args.rounds)
        speed(x10, "df_index_resolver x10", rounds=args.rounds)
    if args.big:
        big(args.big_gb)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
