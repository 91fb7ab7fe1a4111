"""The work model: FLOPs and the fewest bytes per op, from the arguments torch.profiler records."""
import json

import pytest

from perflab.analysis.work.op_args import decode
from perflab.analysis.work.op_work import work_of

BF16, F32, FP8 = "c10::BFloat16", "float", "c10::Float8_e4m3fn"


def work(name, dims, types, concrete=None, kernel=""):
    args = decode(json.dumps(dims), json.dumps(types), json.dumps(concrete) if concrete is not None else "")
    return work_of(name, args, kernel)


def test_matmul_family_counts_two_flops_per_multiply_add_and_each_operand_once():
    w = work("aten::mm", [[64, 128], [128, 256]], [BF16, BF16])
    assert w.family == "matmul" and w.path == "bf16" and w.flops == 2 * 64 * 128 * 256
    assert w.bytes == 2 * (64 * 128 + 128 * 256 + 64 * 256)
    a = work("aten::addmm", [[256], [64, 128], [128, 256], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"])
    assert a.flops == w.flops and a.bytes == w.bytes + 2 * 256
    b = work("aten::bmm", [[8, 64, 128], [8, 128, 32]], [F32, F32], kernel="sm80_xmma_gemm_f32f32_tf32f32")
    assert b.flops == 2 * 8 * 64 * 128 * 32 and b.path == "tf32"
    assert work("aten::mm", [[64, 128], [128, 256]], [F32, F32], kernel="volta_sgemm_128x64_nn").path == "fp32"
    lin = work("aten::linear", [[2, 7, 128], [256, 128], [256]], [BF16, BF16, BF16])
    assert lin.flops == 2 * 14 * 128 * 256
    assert work("aten::mm", [[64, 128], [64, 256]], [BF16, BF16]) is None   # inner sizes disagree: not priced


def test_weight_only_matmul_runs_at_the_activation_precision_and_reads_narrow_weights():
    w = work("aten::_weight_int8pack_mm", [[1, 4096], [11008, 4096], [11008]], [BF16, "signed char", BF16])
    assert w.path == "bf16" and w.weight.narrow and w.bytes == 1 * 4096 * 2 + 11008 * 4096 + 11008 * 2 + 11008 * 2


def test_convolution_output_size_comes_from_the_recorded_stride_and_padding():
    w = work("aten::convolution", [[10, 256, 14, 14], [512, 256, 3, 3], [], [], [], [], [], [], []],
             [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
             ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    out = 10 * 512 * 7 * 7
    assert w.flops == 2 * out * 256 * 9 and w.bytes == 2 * (10 * 256 * 196 + 512 * 256 * 9 + out) and not w.notes
    guessed = work("aten::cudnn_convolution", [[32, 3, 224, 224], [64, 3, 7, 7]], [F32, F32])
    assert guessed.notes and "assumed" in guessed.notes[0]


def test_attention_is_four_flops_per_score_element_and_half_when_causal():
    q = [1, 8, 2048, 64]
    full = work("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []],
                [BF16] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "False", "False", ""])
    causal = work("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []],
                  [BF16] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "True", "False", ""])
    assert full.flops == 4 * 8 * 2048 * 2048 * 64 and causal.flops == full.flops / 2
    assert full.bytes == 4 * 8 * 2048 * 64 * 2          # q, k, v read and o written: never the scores
    unknown = work("aten::_scaled_dot_product_flash_attention", [q, q, q], [BF16] * 3)
    assert unknown.flops == causal.flops and unknown.notes     # not recorded: the lower bound


def test_elementwise_bytes_follow_the_operands_and_a_wrapped_python_scalar_does_not_promote():
    scaled = work("aten::mul", [[16384, 4096], []], [F32, "double"])
    assert scaled.bytes == 16384 * 4096 * 4 * 2 + 8
    added = work("aten::add", [[4096, 2048], [4096, 2048], []], [F32, F32, "Scalar"])
    assert added.bytes == 3 * 4096 * 2048 * 4
    inplace = work("aten::add_", [[4096, 2048], [2048], []], [F32, F32, "Scalar"])
    assert inplace.bytes == 2 * 4096 * 2048 * 4 + 2048 * 4
    out_arg = work("aten::add", [[4096, 2048], [4096, 2048], [], [4096, 2048]], [F32, F32, "Scalar", F32])
    assert out_arg.bytes == added.bytes                     # add(a, b, out=c): c is written, not read
    assert work("aten::eq", [[100], [100]], [F32, F32]).bytes == 100 * 4 * 2 + 100   # a bool result


def test_casts_read_the_source_width_and_write_the_target_width():
    c = work("aten::copy_", [[8192, 3072], [8192, 3072], []], [BF16, FP8, "Scalar"])
    assert c.family == "cast" and c.weight.narrow and c.bytes == 8192 * 3072 * 3 and c.out_bytes == 8192 * 3072 * 2
    to = work("aten::_to_copy", [[1024], [], [], [], [], [], []], [F32, "Scalar", "", "", "", "Scalar", ""],
              ["", "15", "", "", "", "False", ""])
    assert to.bytes == 1024 * 4 + 1024 * 2                  # dtype code 15: bfloat16
    assert work("aten::copy_", [[64], [64], []], [F32, F32, "Scalar"]).family == "copy"


def test_unknown_and_custom_ops_are_not_priced():
    assert work("aten::frobnicate", [[10]], [F32]) is None
    assert work("mylib::fused_thing", [[10]], [F32]) is None
    assert work("_C::rms_norm", [[4, 512], [4, 512], [512], []], [BF16, BF16, BF16, "Scalar"]).bytes == 2 * (2048 * 2 + 512)


@pytest.mark.parametrize("bad", ["not json", "{}", "[1, 2"])
def test_broken_argument_records_decode_to_nothing(bad):
    assert decode(bad, "[]") is None
