"""serving.png: the two schedules of a serving puzzle side by side (serving.json, evidence/serving.py).

Six panels: live rows per decode forward over the stream's time (how full the batch ran); the TTFT
distribution (CDF over requests); the per-token latency (TPOT) distribution; latency against throughput
(each schedule's requests/s with its median and p90 TTFT and end-to-end latency); each forward's time against
the prompt tokens it prefilled; the decode gaps (inter-token latency) over the stream's time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


COLORS = {"slow": "tab:red", "solution": "tab:blue"}
LABELS = {"slow": "slow (workload)", "solution": "solution"}


def _cdf(ax: Any, values: list[float], color: str, label: str) -> None:
    xs = sorted(values)
    ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", color=color, label=label)


def plot(doc: dict[str, Any], path: Path, title: str = "") -> Path:
    from perflab.analysis.engines import serving
    from perflab.report.plotting import pyplot

    plt = pyplot()
    fig, ((occ, ttft, steps), (tpot, tradeoff, gaps)) = plt.subplots(2, 3, figsize=(17, 8))
    for variant, run in doc["variants"].items():
        log, summ = run["log"], run["summary"]
        color, label = COLORS.get(variant, "gray"), LABELS.get(variant, variant)
        f = log["forwards"]
        decode = [i for i, k in enumerate(f["kind"]) if k in serving.DECODING]
        occ.plot([f["end_ms"][i] for i in decode], [f["live"][i] for i in decode], drawstyle="steps-post",
                 lw=1, alpha=0.8, color=color, label=f"{label}: {summ['mean_live_rows']:.1f} of {log['slots']} rows live")
        reqs = serving.requests(log)
        _cdf(ttft, [r["ttft_ms"] for r in reqs], color, f"{label}: median {summ['ttft_p50_ms']:.0f} ms")
        _cdf(tpot, [r["tpot_ms"] for r in reqs if r["tpot_ms"] is not None], color,
             f"{label}: median {summ['tpot_p50_ms']:.3f} ms")
        ends = f["end_ms"]
        tokens = f.get("prefill_tokens") or [log["prompt_len"] if k == "prefill" else 0 for k in f["kind"]]
        steps.scatter(tokens, [e - p for e, p in zip(ends, [0.0] + ends[:-1])], s=6, alpha=0.5, color=color,
                      label=label)
        times = [[ends[i] for i in fw] for fw in log["token_forwards"]]
        gaps.scatter([t for ts in times for t in ts[1:]], [b - a for ts in times for a, b in zip(ts, ts[1:])], s=4,
                     alpha=0.5, color=color,
                     label=f"{label}: ITL p99 {summ['itl_p99_ms']:.3g} ms" if "itl_p99_ms" in summ else label)
        rps = summ["requests_per_s"]
        for key, marker, what in (("ttft", "o", "TTFT"), ("latency", "s", "latency")):
            tradeoff.plot([rps, rps], [summ[f"{key}_p50_ms"], summ[f"{key}_p90_ms"]], "-", color=color, alpha=0.5)
            tradeoff.plot([rps], [summ[f"{key}_p50_ms"]], marker, color=color, label=f"{label}: {what} p50 (to p90)")
    occ.set_xlabel("time since the requests arrived (ms)")
    occ.set_ylabel("rows of a decode forward serving a request")
    occ.set_title("how full each decode forward ran")
    ttft.set_xlabel("time to first token (ms)")
    ttft.set_title("TTFT over the requests (CDF)")
    tpot.set_xlabel("time per output token after the first (ms)")
    tpot.set_title("per-token latency over the requests (CDF)")
    for ax in (ttft, tpot):
        ax.set_ylabel("fraction of requests")
    tradeoff.set_xlabel("throughput over the stream (requests/s)")
    tradeoff.set_ylabel("ms")
    tradeoff.set_title("latency vs throughput")
    steps.set_xlabel("prompt tokens the forward prefilled")
    steps.set_ylabel("forward time (ms)")
    steps.set_title("step time vs prefill tokens")
    gaps.set_xlabel("time since the stream's start (ms)")
    gaps.set_ylabel("gap before the token (ms)")
    gaps.set_title("decode gaps of the running requests")
    for ax in (occ, ttft, tpot, tradeoff, steps, gaps):
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)
    a = doc.get("analytic") or {}
    if a:
        fig.text(0.5, 0.005, f"{a['requests']} requests, {a['slots']} slots: {a['static_forwards']} forward passes "
                 f"static, {a['continuous_forwards']} continuous (ratio {a['ratio']:.2f})", ha="center", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
