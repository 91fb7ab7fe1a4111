"""The multi-GPU recordings, on a machine of 2 or more GPUs (NCCL_NVLS_ENABLE=0), each in one call.

    record.py multigpu-puzzles [ID...] [--budget-s 540] [--gpu-tests] [--return-to DIR]
    record.py multigpu [--steps STEP,...] [--budget-s 540] [--dry] [--return-to DIR]

`multigpu-puzzles`: the multi-GPU puzzles (default: all of them, as many as the budget allows) recorded and
checked by `record.py puzzle` (solution passes, starter fails; nothing written for a puzzle that does not
behave, its check folders kept in failed/), the collective sweeps the doctor's comm-below-roof reads (into
this recording's PERFLAB_HOME), then the doctor rank by rank on what was recorded (`record.py
multigpu-doctor`: the planted cause first on the slow ranks, gone on the fix) and, with --gpu-tests, the
gpu-marked multi-GPU tests. Folder multigpu-puzzles/: rec/<NN-slug>/artifacts (copy into
src/perflab/catalog/), checks.jsonl (docs/catalog-checks/), doctor_checks.jsonl, topology.txt, logs/
(torchrun's), steps.log and a log per step.

`multigpu`: on every visible GPU, the steps named by --steps (default all):
  collectives  busbw sweeps of all_reduce, all_gather, reduce_scatter, all_to_all (`perflab bench`)
  scaling      `perflab scale` strong and weak over 1, 2, 4, ... GPUs (examples/scale_ddp_mlp.py; no traces kept)
  traces       `perflab profile` of the DDP example: exposed (one all-reduce after backward), ddp, straggler
               (5 ms of host work on the last rank), and `perflab doctor --json` on each
  interconnect the all-reduce sweep under each NCCL setting (`record.py interconnect`)
  gpu-tests    tests/gpu/test_multigpu_gpu.py
Folder multigpu/ (docs/multigpu/<date>-<gpu>x<n>-<what>/ takes the numbers; tests/data/multigpu/ the traces).
--dry runs the same plumbing on the CPU: gloo, 2 processes, tiny sizes.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from recorders.common import Session, child_env, describe_machine, gpu_count, perflab, record_py, work_folder

EXAMPLE = "examples/scale_ddp_mlp.py"
KINDS = "all_reduce,all_gather,reduce_scatter,all_to_all"
STEPS = ("collectives", "scaling", "traces", "interconnect", "gpu-tests")
TRACES = {"exposed": ["--sync-allreduce"], "ddp": [], "straggler": ["--straggle-ms", "5"]}


def puzzles(argv: list[str], prog: str = "record.py multigpu-puzzles") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*", help="puzzle ids (default: every multi-GPU puzzle)")
    ap.add_argument("--budget-s", type=float, default=540, help="seconds for everything, the packing included")
    ap.add_argument("--gpu-tests", action="store_true", help="then the gpu-marked multi-GPU tests")
    ap.add_argument("--return-to", type=Path, metavar="DIR", help="pack the results as DIR/multigpu-puzzles.tgz")
    args = ap.parse_args(argv)
    run = Session(work_folder("multigpu-puzzles"), args.budget_s)
    env = child_env(PERFLAB_DIST_LOGS=run.folder / "logs", PERFLAB_HOME=run.folder / "home")
    ngpu = max(gpu_count(), 2)
    run.log(f"topology ({gpu_count()} GPUs)")
    describe_machine(run.folder / "topology.txt", topology=True)

    run.log(f"record {' '.join(args.ids) or 'every multi-GPU puzzle'}")
    keep = 90 + (150 if args.gpu_tests else 0)   # the sweep, the doctor and the tests after the recordings
    want = max(run.left() - keep, 60)
    run.run([*record_py("puzzle", *(args.ids or multi_gpu_ids())), "--out", run.folder / "rec",
             "--jsonl", run.folder / "checks.jsonl", "--keep-failed", run.folder / "failed",
             "--budget-s", max(want - 60, 30)], "record.log", want, tail=25, env=env)

    run.log("collective sweeps (the doctor's measured roof)")
    run.run(perflab("bench", "--collectives", KINDS, "--gpus", ngpu), "collectives.log", 50, tail=8, env=env)
    run.log("the doctor rank by rank")
    run.run([*record_py("multigpu-doctor", *args.ids), "--root", run.folder / "rec",
             "--jsonl", run.folder / "doctor_checks.jsonl"], "doctor_checks.log", 60, tail=10, env=env)
    if args.gpu_tests:
        run.log("gpu tests")
        run.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                 "tests/gpu/test_multigpu_puzzles_gpu.py", "tests/gpu/test_multigpu_gpu.py"], "pytest_gpu.log", 150,
                env=env)
    shutil.rmtree(run.folder / "home" / "bench-tmp", ignore_errors=True)
    run.give_back(args.return_to)
    return 0


def multi_gpu_ids() -> list[str]:
    from recorders.multigpu_doctor import multi_gpu

    from perflab.puzzles.engine import catalog

    return multi_gpu(catalog.load_catalog())


def measure(argv: list[str], prog: str = "record.py multigpu") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {', '.join(STEPS)}")
    ap.add_argument("--budget-s", type=float, default=540, help="seconds for everything, the packing included")
    ap.add_argument("--dry", action="store_true", help="the plumbing on the CPU (gloo, 2 processes, tiny sizes)")
    ap.add_argument("--return-to", type=Path, metavar="DIR", help="pack the results as DIR/multigpu.tgz")
    args = ap.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    if unknown := [s for s in steps if s not in STEPS]:
        ap.error(f"unknown step(s) {', '.join(unknown)}; known: {', '.join(STEPS)}")
    if args.dry:
        n, max_bytes, model, strong, weak, iters = 2, 1 << 16, ["--hidden", "64", "--layers", "2"], 64, 32, 4
    else:
        n, max_bytes, model, strong, weak, iters = gpu_count(), 1 << 30, ["--hidden", "4096", "--layers", "8"], 2048, 512, 12
    if n < 2:
        print(f"{prog}: error: {n} GPU(s) here; the multi-GPU recordings need 2 or more (--dry: on the CPU)",
              file=sys.stderr)
        return 2
    counts = ",".join(str(2 ** i) for i in range(8) if 2 ** i <= n)
    run = Session(work_folder("multigpu"), args.budget_s)
    env = child_env(PERFLAB_DIST_LOGS=run.folder / "logs", PERFLAB_HOME=run.folder / "home")
    run.log(f"topology ({n} {'CPU processes' if args.dry else 'GPUs'}, counts {counts})")
    describe_machine(run.folder / "topology.txt", topology=True)
    if "collectives" in steps:
        run.log(f"collective busbw sweeps over {n} ranks")
        run.run(perflab("bench", "--collectives", KINDS, "--gpus", n, "--max-bytes", max_bytes,
                        "--plot", run.folder / f"collectives_{n}gpu.png"), "collectives.log", 60, tail=8, env=env)
        saved = run.folder / "home" / "collectives.json"   # where the doctor's comm-below-roof reads it
        if saved.is_file():
            shutil.copy(saved, run.folder / f"collectives_{n}gpu.json")
    if "scaling" in steps:
        for mode, batch in (("strong", strong), ("weak", weak)):
            run.log(f"scaling ({mode}) over {counts} GPUs")
            run.run(perflab("scale", "--gpus", counts, "--mode", mode, "--steps", 5, "--warmup", 3,
                            "--out", run.folder / f"scale_{mode}", "--", EXAMPLE, *model, "--batch", batch,
                            "--steps", iters), f"scale_{mode}.log", 75, tail=12, env=env)
            for traces in (run.folder / f"scale_{mode}").glob("n*/traces"):
                shutil.rmtree(traces)   # the numbers and plots stay, not the runs' traces
    if "traces" in steps:
        for name, extra in TRACES.items():
            run.log(f"traces: {name} on {n} ranks")
            run.run(perflab("profile", "--steps", 4, "--warmup", 4, "--out", run.folder / "traces" / name, "--",
                            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                            EXAMPLE, *model, "--batch", strong, "--steps", iters, *extra), f"{name}.log", 60, env=env)
            run.run(perflab("doctor", "--json", run.folder / "traces" / name), f"doctor_{name}.log", 30, tail=3,
                    env=env, stdout=f"doctor_{name}.json")
    if "interconnect" in steps:
        run.log("interconnect sweep")
        left = run.left()
        run.run([*record_py("interconnect", "--out", run.folder / "interconnect.json", "--gpus", n,
                            "--budget-s", max(left - 10, 10), *(["--max-bytes", max_bytes] if args.dry else []))],
                "interconnect.log", left, tail=8, env=env)
    if "gpu-tests" in steps and not args.dry:
        run.log("gpu tests")
        run.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                 "tests/gpu/test_multigpu_gpu.py"], "pytest_gpu.log", 120, env=env)
    shutil.rmtree(run.folder / "home" / "bench-tmp", ignore_errors=True)
    run.give_back(args.return_to)
    return 0
