"""An HF transformers Llama (random weights from a config, no download) running `generate`.

    python examples/stacks/hf_generate.py                     # eager, dynamic KV cache
    python examples/stacks/hf_generate.py --cache static      # static KV cache, compile disabled
    python examples/stacks/hf_generate.py --cache static --compile   # static cache + torch.compile
    perflab profile -- python examples/stacks/hf_generate.py

Each `generate` call prefills a batch of prompts and decodes `--new` tokens greedily.
"""
from __future__ import annotations

import argparse
import time

import torch


def build(device: str, layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    small = device != "cuda"
    cfg = LlamaConfig(vocab_size=32000 if not small else 512, hidden_size=2048 if not small else 64,
                      intermediate_size=5632 if not small else 176, num_hidden_layers=layers,
                      num_attention_heads=16 if not small else 4, num_key_value_heads=8 if not small else 2,
                      max_position_embeddings=2048)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval(), cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward (static cache)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, cfg = build(device, args.layers)
    kw = {"max_new_tokens": args.new, "min_new_tokens": args.new, "do_sample": False}
    if args.cache == "static":
        kw["cache_implementation"] = "static"
        model.generation_config.disable_compile = not args.compile
    elif args.compile:
        model.forward = torch.compile(model.forward)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device=device)
    times = []
    with torch.inference_mode():
        for _ in range(args.calls):
            t0 = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    label = f"{args.cache} cache{' + compile' if args.compile else ''}"
    print(f"{label}: generate calls {', '.join(f'{t:.2f}' for t in times)} s; "
          f"{args.new / times[-1]:.0f} tokens/s per sequence in the last; out {tuple(out.shape)}")


if __name__ == "__main__":
    main()
