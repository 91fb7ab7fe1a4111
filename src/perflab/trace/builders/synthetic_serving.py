"""Synthetic serving loops and compiled-function loops, for tests: the event shapes an engine's profiler writes.

`serving_loop`: one forward per scheduler step inside the engine's iteration annotation (vLLM's
`execute_context_N(T)_generation_M(G)`), a batch of decoding requests, and now and then a long prompt prefilled in
the same forward (or `chunk` tokens of it per iteration: chunked prefill). The host either runs ahead (no sync:
the sampled tokens stay on the GPU) or waits for each iteration's result. GEMM time grows with the tokens.

`compiled_loop`: steps that call a torch.compile'd function, with Dynamo's compile phases in every step (a new
shape each call) or only in the first ones.
"""
from __future__ import annotations

from perflab.trace.builders.synthetic import ELEMENTWISE, GEMM, TraceBuilder

LAYERS = 8
HIDDEN = 4096


def _forward(b: TraceBuilder, tokens: int, us_per_token: float, base_us: float) -> None:
    for _ in range(LAYERS):
        b.op("aten::mm", [(GEMM, base_us + us_per_token * tokens, (132, 1, 1), (384, 1, 1))], cpu_us=20.0,
             dims=[[tokens, HIDDEN], [HIDDEN, HIDDEN]], dtypes=["c10::BFloat16", "c10::BFloat16"])
        b.op("aten::add", [(ELEMENTWISE, 5.0 + 0.01 * tokens, (max(tokens, 1) * 4, 1, 1), (256, 1, 1))], cpu_us=12.0,
             dims=[[tokens, HIDDEN], [tokens, HIDDEN]], dtypes=["c10::BFloat16", "c10::BFloat16"])


def serving_loop(iterations: int = 40, *, decode: int = 8, prompt: int = 4096, every: int = 8, chunk: int | None = None,
                 host_ahead: bool = True, us_per_token: float = 0.9, base_us: float = 40.0,
                 embedding: bool = False, prefill_alone: bool = False) -> TraceBuilder:
    """A serving loop (see the module docstring); `embedding`: each forward starts with an aten::embedding whose
    indices carry the batch's tokens (for readings from shapes); `prefill_alone`: a prompt is prefilled in an iteration
    of its own, no decode beside it (vLLM V0 without chunked prefill), while the running requests wait."""
    b = TraceBuilder()
    pending = 0          # prompt tokens still to prefill (chunked)
    for i in range(iterations):
        if i % every == every // 2:
            pending += prompt
        take = pending if chunk is None else min(pending, chunk)
        pending -= take
        ctx = 1 if take else 0
        if take and prefill_alone:
            with b.span(f"execute_context_1({take})_generation_0(0)", cat="user_annotation"):
                _forward(b, take, us_per_token, base_us)
                if not host_ahead:
                    b.item()
            take, ctx = 0, 0
        with b.span(f"execute_context_{ctx}({take})_generation_{decode}({decode})", cat="user_annotation"):
            if embedding:
                b.op("aten::embedding", [(ELEMENTWISE, 4.0, (8, 1, 1), (128, 1, 1))], cpu_us=10.0,
                     dims=[[128256, HIDDEN], [take + decode]], dtypes=["c10::BFloat16", "long int"])
            _forward(b, take + decode, us_per_token, base_us)
            if not host_ahead:
                b.item()
    b.synchronize()
    return b


COMPILE_PHASES = ("dynamo", "compile_attempt_0 (dynamo_timed)", "OutputGraph.call_user_compiler (dynamo_timed)",
                  "inductor_compile")


def compiled_loop(steps: int = 8, *, recompile_every_step: bool = True, compile_ms: float = 40.0) -> TraceBuilder:
    """Steps calling one compiled function on a sequence one longer each step; Dynamo compiles it again in every
    step (recompile_every_step) or only in the first."""
    b = TraceBuilder()
    for n in range(steps):
        seq = 64 + n
        with b.step(n):
            compiles = recompile_every_step or n == 0
            with b.span("TorchDynamo Cache Lookup"):
                b.now += 3.0
            if compiles:
                cid = f"0/{n if recompile_every_step else 0}"
                with b.span(f"dynamo_data: compile_id={cid}", cat="user_annotation"):
                    b.now += 1.0
                for phase in COMPILE_PHASES:
                    with b.span(phase, cat="user_annotation"):
                        b.now += compile_ms * 1e3 / len(COMPILE_PHASES)
            region = f"0/{n if recompile_every_step else 0}"
            with b.span(f"Torch-Compiled Region: {region}", cat="user_annotation"):
                b.op("triton_poi_fused_add_mul_0", [("triton_poi_fused_add_mul_0", 30.0, (seq, 1, 1), (128, 1, 1))],
                     cpu_us=8.0, dims=[[seq, 1024], [seq, 1024]], dtypes=["float", "float"])
                b.op("aten::mm", [(GEMM, 60.0, (16, 1, 1), (256, 1, 1))], cpu_us=10.0,
                     dims=[[seq, 1024], [1024, 1024]], dtypes=["float", "float"])
    b.synchronize()
    return b
