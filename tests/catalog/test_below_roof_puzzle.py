"""below-roof (catalog 68): a bf16 projection with the bias folded into the weights (K = 4097) runs far below the
bf16 roof; the trace doctor names the op (rules/roof.py below_roof) and the Nsight Compute command for its kernel,
whose reports say why. The puzzle's contract, its workloads on the CPU, and the doctor on traces shaped like its
recording (the op's work and kernels as PyTorch records them, at the speeds public H100 measurements give for
misaligned and aligned bf16 GEMMs: see the puzzle's README). The GPU recording itself is checked by
test_puzzle_catalog.py / test_puzzle_ncu.py once it is shipped.
"""
from __future__ import annotations

import importlib.util
import re
import shlex
import shutil

import pytest

from perflab.analysis.ncu.ncu_plan import function_name
from perflab.doctor import diagnose
from perflab.puzzles.engine import catalog, checker
from perflab.trace.builders.synthetic import TraceBuilder

PUZZLE = catalog.find(catalog.load_catalog([catalog.BUILTIN]), "below-roof")
CEILINGS = PUZZLE.artifacts / "ceilings.json"
BF = "c10::BFloat16"
M, K, N = 2048, 4096, 4096
# cuBLAS kernels seen for bf16 GEMMs: on this H100 (the catalog's recordings) and, for 2-byte-aligned operands,
# in public reports (pytorch#181718, pytorch#146817, pegainfer#1046: CUTLASS align1 kernels)
ALIGN1 = ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>"
          "(cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1::Params)")
OTHER_CUTLASS = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
                 "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)")
GEMMS = [ALIGN1, OTHER_CUTLASS, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT",
         "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
         "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
         "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
         "void cutlass::Kernel2<cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1>"
         "(cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1::Params)",
         "ampere_bf16_s1688gemm_bf16_128x128_ldg8_f2f_stages_32x1_nn"]
CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_alignedK_contig<at::native::(anonymous namespace)::"
       "OpaqueType<2u>, unsigned int, 2, 128, 1, 16>(at::native::(anonymous namespace)::OpaqueType<2u>*, "
       "at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, "
       "unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)")
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)")
NVJET_BIAS = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
FIRST_STEP = 4     # the recording: [profile] warmup = 3 unprofiled steps, the profiler's warm-up step, then the steps


def module(variant: str):
    spec = importlib.util.spec_from_file_location(f"below_roof_{variant}", PUZZLE.file(variant))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the puzzle ---------------------------------------------------------------------------------------------

def test_contract_top_down_from_a_trace_finding_to_ncu():
    assert PUZZLE.level == 3 and PUZZLE.taxonomy[0] == PUZZLE.check.planted == "below-roof"
    assert PUZZLE.check.planted_in == "trace" and "ncu" in PUZZLE.tools and PUZZLE.check.speedup >= 1.5
    orders = {p.id: p.order for p in catalog.load_catalog([catalog.BUILTIN])}
    assert orders["roofline-practice"] < PUZZLE.order < orders["optimization-loop"] < orders["speed-of-light"]
    analyses = [q.analysis for q in PUZZLE.questions]
    assert analyses[0] == "doctor_top_id" and "ncu_top_id" in analyses and "gemm_speed_of_light" in analyses
    assert len(PUZZLE.hints) == 4 and "guide: principled approach - go top-down" in PUZZLE.seeds[0]
    assert "NVIDIA H100" in CEILINGS.read_text()   # the measured roofs the recording is judged against


@pytest.mark.parametrize("kernel", GEMMS)
def test_the_ncu_filter_takes_any_cublas_gemm_by_the_name_ncu_matches_and_by_the_reports_name(kernel):
    assert re.search(PUZZLE.ncu.kernel, function_name(kernel)) and re.search(PUZZLE.ncu.kernel, kernel)


@pytest.mark.parametrize("kernel", [CAT, FILL])
def test_the_ncu_filter_leaves_the_concatenation_and_the_fill_out(kernel):
    assert not re.search(PUZZLE.ncu.kernel, function_name(kernel)) and not re.search(PUZZLE.ncu.kernel, kernel)


def test_the_bias_trick_makes_rows_two_byte_aligned_and_the_fix_keeps_them_sixteen():
    w, s = module("slow"), module("solution")
    assert (w.SIZE["d_in"] + 1) * 2 % 16 == 2 and w.SIZE["d_in"] * 2 % 16 == 0
    assert (w.SMOKE_SIZE["d_in"] + 1) * 2 % 16 == 2   # the CPU size keeps the shapes' property
    slow, fixed = w.setup("cpu", 1), s.setup("cpu", 1)
    assert slow["w_aug"].stride(0) * slow["w_aug"].element_size() % 16 == 2
    assert fixed["w"].stride(0) * fixed["w"].element_size() % 16 == 0 and fixed["b"].dim() == 1


@pytest.mark.parametrize("seed", [0, 7])
def test_workload_and_solution_compute_the_same_projection_on_the_cpu(seed):
    import torch

    w, s = module("slow"), module("solution")
    state = w.setup("cpu", seed)
    ref, got = w.step(state), s.step(s.setup("cpu", seed))
    assert ref.dtype == torch.bfloat16 and ref.shape == (w.SMOKE_SIZE["tokens"], w.SMOKE_SIZE["d_out"])
    assert checker.compare(checker.snapshot(ref), checker.snapshot(got), PUZZLE) == ""
    x, wa = state["x"].float(), state["w_aug"].float()   # y = x W^T + b, the bias being W_aug's last column
    torch.testing.assert_close(ref.float(), x @ wa[:, :-1].T + wa[:, -1], rtol=2e-2, atol=2e-2)


# --- the doctor on traces shaped like the recording ---------------------------------------------------------

def slow_trace(tflops: float, steps: int = 6, router: bool = False) -> TraceBuilder:
    """Per step what workload.py launches: the ones fill, the concatenation, aten::linear -> aten::mm on the
    [2048, 4097] x [4097, 4096] operands with a CUTLASS align1 kernel at `tflops`. `router`: another, small
    CUTLASS GEMM (same function name, Kernel2) before it, as a model with more layers would have."""
    b = TraceBuilder()
    flop = 2.0 * M * (K + 1) * N
    for n in range(FIRST_STEP, FIRST_STEP + steps):
        with b.step(n):
            if router:
                b.op("aten::mm", [(OTHER_CUTLASS, 6.0, (8, 1, 1), (128, 1, 1))], dims=[[M, 64], [64, 16]],
                     dtypes=[BF, BF], cpu_us=10)
            b.op("aten::new_ones", [(FILL, 1.2, (4, 1, 1), (128, 1, 1))], dims=[[M, K], [], [], [], [], []],
                 dtypes=[BF, "ScalarList", "Scalar", "", "", "Scalar"])
            b.op("aten::cat", [(CAT, 16.0, (2048, 1, 1), (128, 1, 1))], dims=[[[M, K], [M, 1]], []],
                 dtypes=["TensorList", "Scalar"])
            with b.span("aten::linear", **{"Input Dims": [[M, K + 1], [N, K + 1]], "Input type": [BF, BF]}):
                b.op("aten::t", [], dims=[[N, K + 1]], dtypes=[BF], cpu_us=3)
                with b.span("aten::matmul", **{"Input Dims": [[M, K + 1], [K + 1, N]], "Input type": [BF, BF]}):
                    b.op("aten::mm", [(ALIGN1, flop / tflops / 1e6, (32, 16, 1), (128, 1, 1))],
                         dims=[[M, K + 1], [K + 1, N]], dtypes=[BF, BF], cpu_us=12)
            b.python(20)
    b.synchronize()
    return b


def fixed_trace(tflops: float, steps: int = 6) -> TraceBuilder:
    """solution.py: aten::linear -> aten::addmm (bias in the epilogue), one nvjet kernel at `tflops`."""
    b = TraceBuilder()
    flop = 2.0 * M * K * N
    for n in range(FIRST_STEP, FIRST_STEP + steps):
        with b.step(n):
            with b.span("aten::linear", **{"Input Dims": [[M, K], [N, K], [N]], "Input type": [BF, BF, BF]}):
                b.op("aten::t", [], dims=[[N, K]], dtypes=[BF], cpu_us=3)
                b.op("aten::addmm", [(NVJET_BIAS, flop / tflops / 1e6, (132, 1, 1), (384, 1, 1))],
                     dims=[[N], [M, K], [K, N], [], []], dtypes=[BF, BF, BF, "Scalar", "Scalar"], cpu_us=12)
            b.python(20)
    b.synchronize()
    return b


def doctor(builder: TraceBuilder, folder, measured: bool):
    """The doctor as replay sees the recording (the puzzle's measured ceilings beside the trace) or as the fix
    check sees a fresh re-profile on a machine without `perflab bench` results (the H100 datasheet)."""
    folder.mkdir(parents=True, exist_ok=True)
    if measured:
        shutil.copy(CEILINGS, folder / "ceilings.json")
    return diagnose(builder.write(folder / "t.trace.json.gz"))


# slow: bf16 GEMMs with a 2-byte-aligned K on an H100 ran at 71-115 TFLOP/s (meta-pytorch/float8_experimental#145);
# 250: a generous bound for a kernel that loads 2 bytes per instruction. fixed: ~760 TFLOP/s, what the catalog's
# H100 recordings show for aligned bf16 GEMMs with a bias epilogue of this size (27-before-after)
@pytest.mark.parametrize("measured", [True, False], ids=["measured-ceilings", "datasheet"])
@pytest.mark.parametrize("tflops", [115.0, 250.0])
def test_the_slow_gemm_is_below_roof_first_with_its_numbers(tmp_path, measured, tflops):
    report = doctor(slow_trace(tflops), tmp_path, measured)
    top = report.findings[0]
    assert top.id == "below-roof" and top.severity == "high", [(f.id, f.severity) for f in report.findings]
    mm = top.evidence["ops"][0]
    assert mm["op"] == "aten::mm" and mm["dims"] == "[[2048,4097],[4097,4096]]" and mm["bound"] == "compute"
    roof = 763.3 if measured else 989.4
    assert mm["tflops"] == pytest.approx(tflops, rel=1e-3)
    assert mm["pct_of_roof"] == pytest.approx(100 * tflops / roof, abs=0.2) and mm["grid_blocks"] == 512
    assert "align1" in mm["kernel"] and "healthy" not in report.ids()


@pytest.mark.parametrize("measured", [True, False], ids=["measured-ceilings", "datasheet"])
def test_the_fixed_gemm_near_the_roof_is_healthy(tmp_path, measured):
    report = doctor(fixed_trace(760.0), tmp_path, measured)
    assert report.findings[0].id == "healthy"
    assert not [f for f in report.findings if f.id == "below-roof" and f.severity in ("high", "medium")]
    assert checker.planted_standing(report.findings, PUZZLE.check.planted) == []


def _ncu_picks(command: str, trace, steps_before: int) -> list[str]:
    """What `ncu --kernel-name regex:R --launch-skip S --launch-count C` profiles in the program the trace was
    recorded from: its launches in order, the unrecorded steps before the first recorded one like a recorded one."""
    import numpy as np

    from perflab.analysis.steps.windows import profiler_steps
    from perflab.trace.model import KERNEL

    argv = shlex.split(command)
    regex, skip, count = (argv[argv.index(o) + 1] for o in ("--kernel", "--launch-skip", "--launch-count"))
    rows = np.flatnonzero(trace.kind == KERNEL)
    rows = rows[np.argsort(trace.ts[rows], kind="stable")]
    steps = profiler_steps(trace)
    first = [trace.name_of(int(r)) for r in rows if steps.start[0] <= trace.ts[r] < steps.end[0]]
    launches = first * steps_before + [trace.name_of(int(r)) for r in rows if trace.ts[r] >= steps.start[0]]
    matching = [k for k in launches if re.fullmatch(regex.strip("^$"), function_name(k))]
    return matching[int(skip):int(skip) + int(count)]


@pytest.mark.parametrize("router", [False, True], ids=["one-gemm", "another-cutlass-gemm-first"])
def test_the_finding_s_ncu_command_profiles_the_slow_gemm(tmp_path, router):
    from perflab.trace.kineto import load

    path = slow_trace(115.0, router=router).write(tmp_path / "t.trace.json.gz")
    top = diagnose(path).findings[0]
    command = top.evidence["ncu_command"]
    assert command.startswith("perflab ncu --kernel '^Kernel2$' --launch-skip ") and command in top.fix
    picked = _ncu_picks(command, load(path), FIRST_STEP)
    assert ALIGN1 in picked, (command, picked)   # with a router GEMM ncu takes the step's two and reads the match


def test_a_device_copy_far_below_roof_gets_no_ncu_command(tmp_path):
    b = TraceBuilder()
    nbytes = 256 << 20
    for n in range(1, 4):
        with b.step(n):
            with b.span("aten::copy_", **{"Input Dims": [[nbytes // 2], [nbytes // 2]], "Input type": [BF, BF]}) as ev:
                b.gpu_op("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 2500.0, 7, "cudaMemcpyAsync", 6.0,
                         ev["args"]["External id"], bytes=nbytes, **{"memory bandwidth (GB/s)": 107.0})
            b.python(30)
    b.synchronize()
    report = diagnose(b.write(tmp_path / "copy.trace.json.gz"))
    found = [f for f in report.findings if f.id == "below-roof"]
    assert found and found[0].evidence["ops"][0]["op"].startswith("Memcpy DtoD")
    assert found[0].evidence["ncu_command"] is None and "not a kernel" in found[0].fix
