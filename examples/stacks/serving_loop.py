"""A serving loop as an engine runs it: one forward per scheduler step for a batch of decoding requests, now and
then a long prompt prefilled in the same step, and the host running ahead of the GPU (the sampled tokens stay on the
GPU and feed the next step; nothing waits for them). Each step is annotated the way vLLM annotates its iterations:
`execute_context_N(T)_generation_M(G)`.

The model is a small Llama-like decoder in bf16 (RMSNorm, attention with a KV cache, SwiGLU), written in plain torch
so it runs anywhere torch does; on a GPU its decode forward is a CUDA graph, captured before the loop. `--chunk N` prefills at most N prompt tokens per step (chunked prefill, the fix).

    perflab profile --marker 'execute_context_.*' -- python examples/stacks/serving_loop.py
    perflab profile --marker 'execute_context_.*' -- python examples/stacks/serving_loop.py --chunk 512
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


class Decoder(torch.nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, kv_heads: int, hidden: int, vocab: int, max_len: int,
                 slots: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim, bias=False)
                                       for _ in range(layers))
        self.o = torch.nn.ModuleList(torch.nn.Linear(dim, dim, bias=False) for _ in range(layers))
        self.up = torch.nn.ModuleList(torch.nn.Linear(dim, 2 * hidden, bias=False) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(hidden, dim, bias=False) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        # the KV cache: one slot per request, max_len positions
        self.register_buffer("k", torch.zeros(layers, slots, kv_heads, max_len, self.head_dim), persistent=False)
        self.register_buffer("v", torch.zeros(layers, slots, kv_heads, max_len, self.head_dim), persistent=False)

    def forward(self, tokens: torch.Tensor, slots: torch.Tensor, start: torch.Tensor, length: int) -> torch.Tensor:
        """tokens [B, T] at positions start[b]..start[b]+T-1 of KV slots[b], attending over the first `length`
        positions of their cache (a Python int: the host never waits for the GPU); the last position's logits."""
        b, t = tokens.shape
        x = self.embed(tokens)
        pos = start[:, None] + torch.arange(t, device=tokens.device)[None, :]
        for i in range(len(self.qkv)):
            h = F.rms_norm(x, (x.shape[-1],))
            q, k, v = self.qkv[i](h).split([self.heads * self.head_dim, self.kv_heads * self.head_dim,
                                            self.kv_heads * self.head_dim], dim=-1)
            q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            rows = slots[:, None, None]
            self.k[i][rows, torch.arange(self.kv_heads, device=x.device)[None, :, None], pos[:, None, :]] = k
            self.v[i][rows, torch.arange(self.kv_heads, device=x.device)[None, :, None], pos[:, None, :]] = v
            keys, values = self.k[i][slots, :, :length], self.v[i][slots, :, :length]
            # each query attends over the cache up to its own position (a prompt's chunk: causally)
            mask = torch.arange(length, device=x.device)[None, None, None, :] <= pos[:, None, :, None]
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
            x = x + self.o[i](a.transpose(1, 2).reshape(b, t, -1))
            g, u = self.up[i](F.rms_norm(x, (x.shape[-1],))).chunk(2, dim=-1)
            x = x + self.down[i](F.silu(g) * u)
        return self.head(F.rms_norm(x[:, -1], (x.shape[-1],)))


def graphed(forward, dev: str):
    """`forward` captured as a CUDA graph (after two warm-up calls on a side stream); on the CPU, itself."""
    if dev != "cuda":
        return forward
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = forward()

    def replay():
        graph.replay()
        return out
    return replay


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--decode", type=int, default=16, help="requests decoding in every step")
    p.add_argument("--prompt", type=int, default=3072, help="tokens of each arriving prompt")
    p.add_argument("--every", type=int, default=8, help="a prompt arrives every N steps")
    p.add_argument("--chunk", type=int, default=0, help="prefill at most N prompt tokens per step (0: whole)")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dim", type=int, default=2048)
    args = p.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    torch.manual_seed(0)
    max_len = args.prompt + args.steps + 8
    model = Decoder(args.layers, args.dim, 16, 4, 4 * args.dim, 32000, max_len, args.decode + 1).to(dev, dtype).eval()
    slots = torch.arange(args.decode, device=dev)
    # the decodes' inputs live in static buffers: the decode forward is captured once as a CUDA graph and replayed
    # every step, as engines do (one launch per step: the host runs ahead); the prompts run eagerly
    tokens = torch.randint(0, 32000, (args.decode, 1), device=dev)
    position = torch.full((args.decode,), 16, device=dev)
    prompt_slot = torch.tensor([args.decode], device=dev)
    with torch.inference_mode():
        decode = graphed(lambda: model(tokens, slots, position, max_len), dev)
        chunk_tokens = torch.zeros(1, max(args.chunk, 1), dtype=torch.long, device=dev)
        chunk_start = torch.zeros(1, dtype=torch.long, device=dev)
        # a chunk of fixed size attends over the whole cache window (masked): static shapes, one graph as well
        prefill_chunk = graphed(lambda: model(chunk_tokens, prompt_slot, chunk_start, max_len), dev) \
            if args.chunk else None
        pending, done = 0, 0
        for step in range(args.steps):
            if step % args.every == args.every // 2:
                pending, done = args.prompt, 0
            take = pending if not args.chunk else min(pending, args.chunk)
            name = f"execute_context_{1 if take else 0}({take})_generation_{args.decode}({args.decode})"
            with torch.profiler.record_function(name):
                if take:   # the arriving prompt, in the same step as the decodes
                    prompt = torch.randint(0, 32000, (1, take), device=dev)
                    if take == args.chunk:
                        chunk_tokens.copy_(prompt)
                        chunk_start.fill_(done)
                        prefill_chunk()
                    else:
                        model(prompt, prompt_slot, torch.tensor([done], device=dev), done + take)
                    pending, done = pending - take, done + take
                logits = decode()
                tokens.copy_(logits.argmax(-1, keepdim=True))   # sampled on the GPU: the host does not wait
                position.add_(1)
    if dev == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
