"""Record torch.profiler traces of the stacks inference engineers run (on the GPU machine).

    python3 scripts/recorders/stack_traces.py --out DIR [--budget-s S] [NAME ...]

(`record.py stacks` and `record.py graph-capture` run it, each as a process of its own under a time limit.)

Each recording runs the programs of examples/stacks/ the way their users do and profiles them with
plain torch.profiler (record_shapes on), independent of perflab's own hooks: these traces are
fixtures for the doctor on compiled and graphed programs. `*_cold` windows include the first calls
(compilation, autotuning, one-time plan building); the others start in the steady state. A
manifest.json names the GPU, versions, date and what each window holds.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "stacks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def profiled(path: Path, calls, *, steps: bool = True):
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        for call in calls:
            call()
            if steps:
                prof.step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return path


def block_recording(kind: str, mode: str, cold: bool, calls: int = 12):
    def run(path: Path) -> dict:
        cb = load("compiled_block")
        fn, dtype = cb.build(kind, mode, "cuda", 2048, 5632, 16)
        x = torch.randn(8, 512, 2048, device="cuda", dtype=dtype)
        with torch.inference_mode():
            t0 = time.perf_counter()
            if not cold:
                for _ in range(3):
                    fn(x)
                torch.cuda.synchronize()
            warm = time.perf_counter() - t0
            profiled(path, [lambda: fn(x)] * calls)
        return {"program": f"examples/stacks/compiled_block.py --as {kind} --mode {mode}",
                "window": "first calls (compile/autotune) included" if cold else f"steady state after {warm:.1f} s",
                "calls": calls, "steps": "ProfilerStep per call"}
    return run


def graphed_decode(path: Path) -> dict:
    from perflab.workloads import llama
    from perflab.workloads.cuda_graph import capture

    batch, steps = 16, 60
    model = llama.build(llama.LLAMA_3_2_1B, "cuda", 0, batch=batch, max_seq=512)
    tokens = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    positions = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    with torch.inference_mode():
        graph, logits = capture(lambda: model.forward_slots(tokens, positions))

        def step():
            graph.replay()
            tokens.copy_(logits.argmax(-1, keepdim=True))
            positions.add_(1)
        for _ in range(5):
            step()
        positions.fill_(100)
        torch.cuda.synchronize()
        profiled(path, [step] * steps, steps=False)
    return {"program": "examples/stacks/graphed_decode.py (Llama-3.2-1B shapes, batch 16)",
            "window": "steady state, no ProfilerStep (a serving loop)", "calls": steps, "steps": "none"}


def graphed_decode_capture(path: Path) -> dict:
    """The graphed decode with its capture inside the window: the profiler runs from before torch.cuda.graph
    captures the forward (with the two warm-up calls on a side stream) through 20 replays."""
    from perflab.workloads import llama
    from perflab.workloads.cuda_graph import capture

    batch, steps = 16, 20
    model = llama.build(llama.LLAMA_3_2_1B, "cuda", 0, batch=batch, max_seq=512)
    tokens = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    positions = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.inference_mode(), torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        graph, logits = capture(lambda: model.forward_slots(tokens, positions))
        positions.fill_(100)
        torch.cuda.synchronize()
        for _ in range(steps):
            graph.replay()
            tokens.copy_(logits.argmax(-1, keepdim=True))
            positions.add_(1)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return {"program": "examples/stacks/graphed_decode.py (Llama-3.2-1B shapes, batch 16)",
            "window": "the graph's capture (after two side-stream warm-up calls), then replays; no ProfilerStep",
            "calls": steps, "steps": "none"}


def hf_recording(cache: str, compile_: bool, cold: bool):
    def run(path: Path) -> dict:
        hf = load("hf_generate")
        model, cfg = hf.build("cuda", 8)
        kw = {"max_new_tokens": 32, "min_new_tokens": 32, "do_sample": False}
        if cache == "static":
            kw["cache_implementation"] = "static"
            model.generation_config.disable_compile = not compile_
        ids = torch.randint(0, cfg.vocab_size, (4, 128), device="cuda")
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            t0 = time.perf_counter()
            if not cold:
                for _ in range(2):
                    model.generate(ids, attention_mask=mask, **kw)
                torch.cuda.synchronize()
            warm = time.perf_counter() - t0
            profiled(path, [lambda: model.generate(ids, attention_mask=mask, **kw)] * 2)
        return {"program": f"examples/stacks/hf_generate.py --cache {cache}{' --compile' if compile_ else ''} "
                           "--layers 8 --batch 4 --prompt 128 --new 32",
                "window": "first generate calls included" if cold else f"steady state after {warm:.1f} s",
                "calls": 2, "steps": "ProfilerStep per generate call"}
    return run


RECORDINGS = {
    "block_fn_default": block_recording("function", "default", False),
    "block_fn_default_cold": block_recording("function", "default", True, calls=8),
    "block_module_default": block_recording("module", "default", False),
    "block_module_reduce_overhead": block_recording("module", "reduce-overhead", False),
    "block_fn_eager": block_recording("function", "eager", False),
    "graphed_decode": graphed_decode,
    "hf_eager_dynamic_cold": hf_recording("dynamic", False, True),
    "hf_eager_dynamic": hf_recording("dynamic", False, False),
    "hf_static_eager": hf_recording("static", False, False),
    "hf_static_compiled": hf_recording("static", True, False),
    "block_fn_max_autotune": block_recording("function", "max-autotune", False),
}

# Windows that hold a CUDA graph's capture (`record.py graph-capture`): recorded only when named.
CAPTURE_RECORDINGS = {
    "graphed_decode_capture": graphed_decode_capture,
    "block_module_reduce_overhead_cold": block_recording("module", "reduce-overhead", True, calls=8),
    "hf_static_compiled_cold": hf_recording("static", True, True),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("names", nargs="*", default=list(RECORDINGS))
    args = ap.parse_args()
    known = {**RECORDINGS, **CAPTURE_RECORDINGS}
    if unknown := [n for n in args.names if n not in known]:
        ap.error(f"unknown recording(s) {', '.join(unknown)}; known: {', '.join(known)}")
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    manifest = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "python": sys.version.split()[0],
                "date": datetime.date.today().isoformat(), "traces": {}}
    try:
        import transformers
        manifest["transformers"] = transformers.__version__
    except ImportError:
        pass
    for name in args.names:
        if time.perf_counter() - start > args.budget_s:
            print(f"{name}: skipped (budget)", flush=True)
            continue
        t0 = time.perf_counter()
        path = args.out / f"{name}.trace.json.gz"
        try:
            info = known[name](path)
        except Exception as exc:  # one broken stack must not cost the others
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            manifest["traces"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        info["record_s"] = round(time.perf_counter() - t0, 1)
        manifest["traces"][path.name] = info
        print(f"{name}: {path.stat().st_size / 1e6:.1f} MB in {info['record_s']} s", flush=True)
        torch._dynamo.reset()
        (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
