"""The stacks inference engineers run (torch.compile'd blocks, CUDA-graphed decodes, HF generate), on one GPU.

    record.py stacks [--budget-s 420] [--return-to DIR]
    record.py graph-capture [--budget-s 400] [--return-to DIR]
    record.py stack-checks [--parts tests,hf-profiles,investigate] [--budget-s 540] [--return-to DIR]

`stacks`: the stacks fixtures (torch.profiler traces of examples/stacks/, recorders/stack_traces.py; to
tests/data/stacks/), Nsight Compute reports of two elementwise kernels that run at their DRAM roof (float4 SiLU,
a + b; `ncu --clock-control none --set full`; to tests/data/ncu/roof_*), and what `perflab profile` and
`perflab investigate` say of a compiled block. Folder stacks/.

`graph-capture`: traces whose window holds a CUDA graph's capture as well as its replays (graphed_decode_capture,
block_module_reduce_overhead_cold, hf_static_compiled_cold; to tests/data/stacks/, manifest.json ->
manifest.capture.json), the doctor on each, and capture_summary.json: how many replays were priced from their
capture (analysis/steps/graph_capture.py). Folder graph_capture/.

`stack-checks`, the parts named by --parts (default all):
  tests        tests/gpu/test_compiled_stacks_gpu.py: profile and investigate on a compiled block (three modes)
               and a CUDA-graphed decode; each run's output and trace kept (to tests/data/stacks/gpu-run/)
  hf-profiles  `perflab profile` on HF generate: eager, static cache, static cache + compile
  investigate  `perflab investigate` (level 1, one kernel under Nsight Compute) on the graphed decode, a compiled
               module in reduce-overhead mode and HF generate with a static cache + torch.compile
  serving      tests/gpu/test_serving_traces_gpu.py: a serving loop with vLLM-style annotations (whole and chunked
               prefills), graph replays priced from the capture perflab profile records in warm-up (a reduce-overhead
               block, HF static cache with and without compile), fp32 attention; runs, traces and doctor JSON kept
               (`-k EXPR` through --select)
Folder stack_checks/.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from recorders.common import REPO, Session, describe_machine, perflab, scratch, work_folder

TRACES = REPO / "scripts" / "recorders" / "stack_traces.py"
CAPTURES = ("graphed_decode_capture", "block_module_reduce_overhead_cold", "hf_static_compiled_cold")
ROOFS = {"silu": "torch.nn.functional.silu(x)", "add": "x + y"}
PARTS = ("tests", "hf-profiles", "investigate", "serving")
HF = {"dynamic": [], "static": ["--cache", "static"], "compiled": ["--cache", "static", "--compile"]}
INVESTIGATED = (["examples/stacks/graphed_decode.py", "--steps", "600"],
                ["examples/stacks/compiled_block.py", "--as", "module", "--mode", "reduce-overhead", "--iters", "3000"],
                ["examples/stacks/hf_generate.py", "--cache", "static", "--compile", "--calls", "8"])


def _args(argv: list[str], prog: str, budget: float, parts: bool = False) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=budget, help="seconds for everything, the packing included")
    if parts:
        ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
        ap.add_argument("--select", default="", metavar="EXPR", help="the serving part: pytest -k EXPR")
    ap.add_argument("--return-to", type=Path, metavar="DIR", help="pack the results into DIR as one .tgz")
    args = ap.parse_args(argv)
    if parts and (unknown := [p for p in args.parts.split(",") if p and p not in PARTS]):
        ap.error(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    return args


def fixtures(argv: list[str], prog: str = "record.py stacks") -> int:
    args = _args(argv, prog, 420)
    run = Session(work_folder("stacks"), args.budget_s)
    describe_machine(run.folder / "gpu.txt")
    from perflab.toolkit.ncu_runner import find_ncu

    ncu = str(find_ncu())
    for name, expr in ROOFS.items():
        run.log(f"ncu: {name} at its DRAM roof")
        program = ("import torch; x=torch.randn(1<<28, device='cuda'); y=torch.randn(1<<28, device='cuda'); "
                   f"torch.cuda.synchronize(); {expr}; torch.cuda.synchronize()")
        run.run([ncu, "--clock-control", "none", "--set", "full", "-k", "regex:vectorized_elementwise", "-c", "1",
                 "-f", "-o", run.folder / f"roof_{name}", sys.executable, "-c", program], f"roof_{name}.log", 60, tail=3)
    run.log("stack traces")
    half = run.left() / 2
    run.run([sys.executable, TRACES, "--out", run.folder, "--budget-s", max(half - 40, 10)], "record.log", half)
    for tag, block in (("function_default", ["--as", "function", "--mode", "default"]),
                       ("module_reduce_overhead", ["--as", "module", "--mode", "reduce-overhead"])):
        run.log(f"perflab profile: compiled block, {tag}")
        out = scratch(run, f"profile_{tag}")
        run.run(perflab("profile", "--out", out, "--", sys.executable, "examples/stacks/compiled_block.py", *block,
                        "--iters", 2000), f"profile_{tag}.log", 120, tail=5)
        for trace in sorted(out.rglob("trace.json.gz"))[:1]:
            shutil.copy(trace, run.folder / f"profile_{tag}.trace.json.gz")
    run.log("perflab investigate: compiled block")
    run.run(perflab("investigate", "--timeout", 100, "--ncu-timeout", 40, "--out", scratch(run, "investigation"), "--",
                    sys.executable, "examples/stacks/compiled_block.py", "--iters", 2000), "investigate_block.log", 150,
            tail=5)
    run.give_back(args.return_to)
    return 0


def graph_capture(argv: list[str], prog: str = "record.py graph-capture") -> int:
    args = _args(argv, prog, 400)
    run = Session(work_folder("graph_capture"), args.budget_s)
    describe_machine(run.folder / "gpu.txt")
    run.log("traces whose window holds the capture")
    want = max(run.left() - 120, 60)
    run.run([sys.executable, TRACES, "--out", run.folder, "--budget-s", max(want - 60, 10), *CAPTURES],
            "record.log", want)
    for trace in sorted(run.folder.glob("*.trace.json.gz")):
        base = trace.name.removesuffix(".trace.json.gz")
        run.log(f"the doctor on {trace.name}")
        run.run(perflab("doctor", trace), f"{base}.doctor.log", 60, tail=8, stdout=f"{base}.doctor.txt")
        run.run(perflab("doctor", "--json", trace), f"{base}.doctor.err", 60, tail=0, stdout=f"{base}.doctor.json")
    run.log("replays priced from their capture")
    summary = run.folder / "capture_summary.json"
    try:
        summary.write_text(json.dumps(capture_summary(run.folder), indent=1), encoding="utf-8")
        print(summary.read_text(encoding="utf-8"))
    except Exception as exc:  # the traces still come back
        (run.folder / "capture_summary.err").write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
    run.give_back(args.return_to)
    return 0


def capture_summary(folder: Path) -> dict:
    """Per trace: the launches of each capture, the graph replays, the kernel time and what of it was modelled."""
    from perflab.analysis.steps.graph_capture import captures
    from perflab.analysis.steps.windows import analysis_windows
    from perflab.analysis.work.op_work import op_work
    from perflab.trace import kineto

    out = {}
    for path in sorted(folder.glob("*.trace.json.gz")):
        trace = kineto.load(path)
        work = op_work(trace, analysis_windows(trace))
        out[path.name] = {"captures": [int(c.launches.size) for c in captures(trace)], "replays": work.graph_replays,
                          "kernel_us": work.kernel_us, "modelled_us": work.modelled_us,
                          "unmodelled": {k: {"us": v["us"], "kernels": v["kernels"]} for k, v in work.unmodelled.items()}}
    return out


def checks(argv: list[str], prog: str = "record.py stack-checks") -> int:
    args = _args(argv, prog, 540, parts=True)
    parts = [p for p in args.parts.split(",") if p]
    run = Session(work_folder("stack_checks"), args.budget_s)
    describe_machine(run.folder / "environment.txt")
    if "tests" in parts:
        run.log("gpu tests: profile and investigate on compiled and graphed programs")
        from recorders.common import child_env

        run.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rA",
                 "tests/gpu/test_compiled_stacks_gpu.py"], "pytest.log", 185, tail=25,
                env=child_env(PERFLAB_GPU_ARTIFACTS=run.folder / "compiled_stacks"))
    if "serving" in parts:
        run.log("gpu tests: serving loops and graph replays under perflab profile")
        from recorders.common import child_env

        select = ["-k", args.select] if args.select else []
        run.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rA", *select,
                 "tests/gpu/test_serving_traces_gpu.py"], "serving_pytest.log", 420, tail=25,
                env=child_env(PERFLAB_GPU_ARTIFACTS=run.folder / "serving"))
    if "hf-profiles" in parts:
        for name, extra in HF.items():
            run.log(f"perflab profile: HF generate, {name}")
            run.run(perflab("profile", "--steps", 10, "--warmup", 5, "--out", run.folder / "hf_profiles" / name, "--",
                            sys.executable, "examples/stacks/hf_generate.py", *extra, "--calls", 4),
                    f"hf_profile_{name}.log", 75, tail=12)
    if "investigate" in parts:
        for i, program in enumerate(INVESTIGATED, 1):
            run.log(f"perflab investigate: {' '.join(program)}")
            run.run(perflab("investigate", "--memory", "never", "--kernels", 1, "--ncu-timeout", 25, "--timeout", 45,
                            "--out", scratch(run, f"investigation_{i}"), "--", sys.executable, *program),
                    f"investigate_{i}.log", 72, tail=12)
    run.give_back(args.return_to)
    return 0
