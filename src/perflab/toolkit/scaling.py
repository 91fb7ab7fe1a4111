"""`perflab scale`: run a script under torchrun at several GPU counts; strong/weak efficiency and the
communication share of each point.

The script is launched with PyTorch's own launcher (`python -m torch.distributed.run`; multi-node
through its --nnodes/--rdzv-* options, passed through unchanged). perflab tells it the mode and
where to report through the environment:

    PERFLAB_SCALE_MODE   strong | weak   (strong: split a fixed global batch; weak: a fixed batch per rank)
    PERFLAB_SCALE_DIR    folder where `report_step_times` writes steps.rank{RANK}.json

A script calls `scaling.per_rank_batch(global_batch)` and `scaling.report_step_times(times_ms)`;
both work unchanged outside `perflab scale`. Without a report, step times come from the per-rank
traces. With profiling on (the default), each worker also writes a torch.profiler trace (perflab's
profile bootstrap, one trace per rank), and the communication time is isolated from those traces
(analysis.multigpu.collectives: NCCL kernel time, the part compute does not hide, waiting for late ranks).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError

ENV_TORCHRUN = "PERFLAB_TORCHRUN"      # extra torchrun options for perflab's own jobs (multi-node rendezvous)


def torchrun_args() -> list[str]:
    import shlex

    return shlex.split(os.environ.get(ENV_TORCHRUN, ""))


def multi_node() -> bool:
    """$PERFLAB_TORCHRUN names a rendezvous over several nodes."""
    return any(a.startswith(("--nnodes", "--rdzv")) for a in torchrun_args())

ENV_DIR = "PERFLAB_SCALE_DIR"
ENV_MODE = "PERFLAB_SCALE_MODE"
MODES = ("strong", "weak")
SCHEMA = "perflab.scale/1"


# -- inside the script -----------------------------------------------------------------------------------
def scale_mode() -> str:
    mode = os.environ.get(ENV_MODE, "strong")
    return mode if mode in MODES else "strong"


def world_size() -> int:
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        return 1


def per_rank_batch(global_batch: int) -> int:
    """The batch one rank processes: strong scaling splits global_batch, weak scaling keeps it per rank."""
    if scale_mode() == "weak":
        return global_batch
    return max(math.ceil(global_batch / world_size()), 1)


def report_step_times(times_ms: Sequence[float], *, samples_per_step: int | None = None) -> Path | None:
    """Write this rank's step times (steady state, ms) for `perflab scale`; a no-op outside it."""
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return None
    rank = os.environ.get("RANK", "0")
    path = Path(folder) / f"steps.rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": int(rank), "world_size": world_size(), "mode": scale_mode(),
                                "step_ms": [float(t) for t in times_ms], "samples_per_step": samples_per_step}))
    return path


# -- the launcher side -----------------------------------------------------------------------------------
def parse_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise PerflabError(f"--gpus takes a comma-separated list of counts like 1,2,4 (got {text!r})") from None
    if not counts or counts[0] < 1:
        raise PerflabError(f"--gpus needs counts >= 1 (got {text!r})")
    return counts


def torchrun_command(cmd: Sequence[str], nproc: int, torchrun_args: Sequence[str] = ()) -> list[str]:
    """`python -m torch.distributed.run --nproc-per-node N [passthrough] script.py ARGS`.

    cmd is `script.py ARGS`, `python script.py ARGS` or `-m module ARGS`. Without rendezvous options
    the run is single-node (--standalone)."""
    cmd = list(cmd)
    if not cmd:
        raise PerflabError("give the script to scale after --, e.g. `perflab scale -- train.py --steps 20`")
    if Path(cmd[0]).name.startswith("python") and len(cmd) > 1:
        cmd = cmd[1:]
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise PerflabError("`-m` needs a module name")
        cmd = ["--module", *cmd[1:]]
    elif not cmd[0].endswith(".py") or not Path(cmd[0]).is_file():
        raise PerflabError(f"{cmd[0]}: not a Python script here; give `-- script.py ARGS` or `-- -m module ARGS`")
    multi_node = any(a.startswith(("--nnodes", "--rdzv", "--master", "--node")) for a in torchrun_args)
    launch = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if not multi_node:
        launch.append("--standalone")
    return [*launch, *torchrun_args, *cmd]


def check_gpus(counts: Sequence[int], multi_node: bool) -> str:
    """cuda when GPUs are visible (refusing counts above them on one node), else cpu (gloo processes)."""
    try:
        import torch
    except ImportError:
        raise PerflabError("perflab scale needs PyTorch (torch.distributed.run): pip install torch") from None
    if not torch.cuda.is_available():
        return "cpu"
    have = torch.cuda.device_count()
    if not multi_node and max(counts) > have:
        raise PerflabError(f"--gpus asks for {max(counts)} GPUs per node and this machine has {have}; "
                           "use smaller counts or several nodes (--nnodes, --rdzv-endpoint)")
    return "cuda"


@contextlib.contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_point(cmd: Sequence[str], nproc: int, folder: Path, *, mode: str, torchrun_args: Sequence[str] = (),
              profile: bool = True, steps: int = 5, warmup: int = 3, marker: str | None = None,
              timeout: float | None = None) -> dict[str, Any]:
    """One GPU count: run, collect step reports and traces, measure communication."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("steps.rank*.json"):
        old.unlink()
    launch = torchrun_command(cmd, nproc, torchrun_args)
    env = {ENV_DIR: str(folder.resolve()), ENV_MODE: mode}
    traces_dir = folder / "traces"
    with _environment(env):
        if profile:
            from perflab.toolkit.profile import find_target, profile_command

            run = profile_command(launch, out=traces_dir, steps=steps, warmup=warmup, marker=marker,
                                  target=find_target(list(cmd)))
            code = run.returncode
        else:
            try:
                code = subprocess.run(launch, timeout=timeout, check=False).returncode
            except subprocess.TimeoutExpired:
                code = 124
    point: dict[str, Any] = {"nproc": nproc, "returncode": code, "command": launch}
    reports = sorted(folder.glob("steps.rank*.json"))
    per_rank = {}
    for p in reports:
        d = json.loads(p.read_text())
        times = sorted(d["step_ms"])
        if times:
            per_rank[int(d["rank"])] = times[len(times) // 2]
    traces = sorted(traces_dir.glob("*.trace.json.gz")) if profile and traces_dir.is_dir() else []
    comm = communication(traces_dir) if traces else None
    if not per_rank and comm:
        per_rank = {r["rank"]: r["step_ms"] for r in comm["per_rank"]}
        point["step_source"] = "traces"
    else:
        point["step_source"] = "script report"
    point["per_rank_step_ms"] = per_rank
    point["step_ms"] = max(per_rank.values()) if per_rank else None  # a step is done when every rank is
    point["spread_pct"] = (100.0 * (max(per_rank.values()) - min(per_rank.values())) / max(per_rank.values())
                           if len(per_rank) > 1 and max(per_rank.values()) > 0 else 0.0)
    point["communication"] = comm
    point["traces"] = str(traces_dir) if traces else None
    return point


def communication(traces_dir: Path) -> dict[str, Any] | None:
    """Per rank, ms per step: NCCL kernel time, exposed part, wait for late ranks; and bus bandwidth."""
    from perflab.analysis.multigpu.collectives import multirank_summary
    from perflab.trace.kineto import load_ranks

    try:
        traces = load_ranks(traces_dir)
    except PerflabError:
        return None
    summary = multirank_summary(traces)
    keep = ("rank", "step_ms", "comm_ms", "exposed_comm_ms", "wait_ms", "comm_overlap_pct", "compute_ms")
    per_rank = [{k: r[k] for k in keep} for r in summary["per_rank"]]
    worst = max(per_rank, key=lambda r: r["exposed_comm_ms"])
    return {"per_rank": per_rank, "exposed_comm_ms": worst["exposed_comm_ms"], "comm_ms": worst["comm_ms"],
            "traced_step_ms": worst["step_ms"], "by_kind": summary["collectives"]["by_kind"],
            "straggler": summary["straggler"]}


def efficiency(points: list[dict], mode: str) -> None:
    """Adds speedup and efficiency against the smallest count (strong: T1*n1/(Tn*n); weak: T1/Tn)."""
    base = next((p for p in points if p.get("step_ms")), None)
    for p in points:
        if base is None or not p.get("step_ms"):
            p["speedup"] = p["efficiency_pct"] = None
            continue
        ratio = base["step_ms"] / p["step_ms"]
        if mode == "strong":
            p["speedup"] = ratio
            p["efficiency_pct"] = 100.0 * ratio * base["nproc"] / p["nproc"]
        else:
            p["speedup"] = ratio * p["nproc"] / base["nproc"]  # throughput ratio
            p["efficiency_pct"] = 100.0 * ratio
        comm = p.get("communication")
        if comm and comm.get("traced_step_ms"):
            p["exposed_comm_pct"] = 100.0 * comm["exposed_comm_ms"] / comm["traced_step_ms"]
        else:
            p["exposed_comm_pct"] = None


def run_scaling(cmd: Sequence[str], counts: Sequence[int], out: Path, *, mode: str = "strong",
                torchrun_args: Sequence[str] = (), profile: bool = True, steps: int = 5, warmup: int = 3,
                marker: str | None = None, on_point=None) -> dict[str, Any]:
    if mode not in MODES:
        raise PerflabError(f"--mode is strong or weak (got {mode!r})")
    multi_node = any(a.startswith(("--nnodes", "--rdzv")) for a in torchrun_args)
    device = check_gpus(counts, multi_node)
    torchrun_command(cmd, 1, torchrun_args)  # validate before any run
    out = Path(out)
    points = []
    for n in counts:
        if on_point:
            on_point(n)
        p = run_point(cmd, n, out / f"n{n}", mode=mode, torchrun_args=torchrun_args, profile=profile,
                      steps=steps, warmup=warmup, marker=marker)
        points.append(p)
        if p["returncode"] != 0:
            break
    efficiency(points, mode)
    result = {"schema": SCHEMA, "mode": mode, "device": device, "counts": list(counts),
              "torchrun_args": list(torchrun_args), "points": points, "environment": _environment_facts(device)}
    from perflab.outputs import write_output

    write_output(out / "scaling.json", json.dumps(result, indent=1, default=str), force=True,
                 make_parents=True)  # the folder: checked (check_folder) or made (new_folder) before the sweep
    return result


def _environment_facts(device: str) -> dict[str, Any]:
    import datetime as dt
    import platform
    import socket

    import torch

    facts = {"torch": torch.__version__, "python": platform.python_version(), "host": socket.gethostname(),
             "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
             "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}
    if device == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["gpus_visible"] = torch.cuda.device_count()
        facts["cuda"] = torch.version.cuda
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError, TypeError):
            facts["nccl"] = None
    return facts


def table_rows(result: dict) -> list[tuple[str, ...]]:
    rows = []
    for p in result["points"]:
        comm = p.get("communication") or {}
        kinds = comm.get("by_kind") or {}
        bw = [f"{k} {d['busbw_gbps']:.1f}" for k, d in kinds.items() if d.get("busbw_gbps") is not None]
        rows.append((
            str(p["nproc"]), _f(p.get("step_ms")), _f(p.get("spread_pct"), 1), _f(p.get("speedup"), 2),
            _f(p.get("efficiency_pct"), 1), _f(comm.get("comm_ms")), _f(comm.get("exposed_comm_ms")),
            _f(p.get("exposed_comm_pct"), 1), ", ".join(bw) or "-",
            "ok" if p["returncode"] == 0 else f"exit {p['returncode']}"))
    return rows


TABLE_HEADER = ("GPUs", "step ms", "rank spread %", "speedup", "efficiency %", "comm ms", "exposed comm ms",
                "exposed comm %", "busbw GB/s", "run")


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def plot(result: dict, path: Path, *, force: bool = False) -> Path:
    """Step time split into exposed communication and the rest, with efficiency on a second axis."""
    from perflab.report.plotting import pyplot, save_figure

    plt = pyplot()

    pts = [p for p in result["points"] if p.get("step_ms")]
    if not pts:
        raise PerflabError("no step times to plot (did the script call perflab.toolkit.scaling.report_step_times "
                           "or run with profiling on?)")
    xs = [str(p["nproc"]) for p in pts]
    exposed = []
    for p in pts:
        share = (p.get("exposed_comm_pct") or 0.0) / 100.0
        exposed.append(p["step_ms"] * share)
    rest = [p["step_ms"] - e for p, e in zip(pts, exposed)]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(xs, rest, label="compute and other", color="#4c72b0")
    ax.bar(xs, exposed, bottom=rest, label="exposed communication", color="#dd8452")
    ax.set_xlabel("GPUs (processes)")
    ax.set_ylabel("step time (ms, slowest rank)")
    ax2 = ax.twinx()
    ax2.plot(xs, [p.get("efficiency_pct") or 0.0 for p in pts], "k.-", label=f"{result['mode']} efficiency")
    ax2.set_ylabel("efficiency %")
    ax2.set_ylim(0, max(110.0, max((p.get("efficiency_pct") or 0.0) for p in pts) * 1.1))
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    env = result.get("environment", {})
    ax.set_title(f"{result['mode']} scaling on {env.get('gpu', result.get('device'))}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, force=force, dpi=110)
