"""A Llama-3.2-shaped decoder for the decode puzzles: real shapes, random weights (no checkpoint).

Shapes (Hugging Face config.json of meta-llama/Llama-3.2-3B and -1B): 3B: hidden 3072, 28 layers,
24 heads, 8 KV heads (head_dim 128), intermediate 8192, vocab 128256, rope_theta 500000, RMSNorm eps
1e-5; 1B: hidden 2048, 16 layers, 32 heads, 8 KV heads (head_dim 64), intermediate 8192. The real
models tie the LM head to the embedding; here the LM head is a separate nn.Linear so weight-only
quantization treats it like every other linear (same shape, same bytes per token).

Linears are plain `nn.Linear(bias=False)` so torchao's `quantize_` can replace their weights; the
in-project fp8 weight-only paths swap them with `swap_linears(model, make)`.
torch is imported lazily: this module imports without it.
"""
from __future__ import annotations

import math
from typing import Any, Callable

LLAMA_3_2_3B = {"hidden": 3072, "layers": 28, "heads": 24, "kv_heads": 8, "head_dim": 128,
                "intermediate": 8192, "vocab": 128256, "rope_theta": 500000.0, "eps": 1e-5}
LLAMA_3_2_1B = {"hidden": 2048, "layers": 16, "heads": 32, "kv_heads": 8, "head_dim": 64,
                "intermediate": 8192, "vocab": 128256, "rope_theta": 500000.0, "eps": 1e-5}
SMOKE = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16,
         "intermediate": 128, "vocab": 256, "rope_theta": 500000.0, "eps": 1e-5}
LINEAR_NAMES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def build(cfg: dict, device: str, seed: int, *, batch: int = 1, max_seq: int = 64, dtype: Any = None) -> Any:
    """The model with random weights drawn on `device` from `seed` (fast even for 3B on a GPU)."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    dtype = dtype or torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(int(seed))

    def rand_(t, std):
        with torch.no_grad():
            t.copy_(torch.randn(t.shape, generator=gen, device=device, dtype=torch.float32).mul_(std))
        return t

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype), requires_grad=False)
            rand_(self.weight, 0.02).add_(1.0)
            self.eps = cfg["eps"]

        def forward(self, x):
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return xf.to(x.dtype) * self.weight

    def linear(n_in, n_out):
        lin = nn.Linear(n_in, n_out, bias=False, device=device, dtype=dtype)
        lin.weight.requires_grad_(False)
        rand_(lin.weight, 1.0 / math.sqrt(n_in))
        return lin

    hd, nh, nkv = cfg["head_dim"], cfg["heads"], cfg["kv_heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            h = cfg["hidden"]
            self.attn_norm, self.mlp_norm = RMSNorm(h), RMSNorm(h)
            self.wq, self.wk, self.wv = linear(h, nh * hd), linear(h, nkv * hd), linear(h, nkv * hd)
            self.wo = linear(nh * hd, h)
            self.w_gate, self.w_up = linear(h, cfg["intermediate"]), linear(h, cfg["intermediate"])
            self.w_down = linear(cfg["intermediate"], h)
            self.register_buffer("k_cache", torch.zeros(batch, nkv, max_seq, hd, device=device, dtype=dtype))
            self.register_buffer("v_cache", torch.zeros(batch, nkv, max_seq, hd, device=device, dtype=dtype))
            rand_(self.k_cache, 1.0)
            rand_(self.v_cache, 1.0)

        def forward(self, x, cos, sin, pos, mask):
            b, t, _ = x.shape
            q, k, v = self.qkv(x, cos, sin)
            self.k_cache[:b, :, pos:pos + t] = k
            self.v_cache[:b, :, pos:pos + t] = v
            keys = self.k_cache[:b].repeat_interleave(nh // nkv, dim=1)
            values = self.v_cache[:b].repeat_interleave(nh // nkv, dim=1)
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            return self.rest(x, a)

        def forward_slots(self, x, cos, sin, slots, positions, mask):
            """x [b, t, hidden] of the requests in cache slots `slots` ([b] long; None: slots 0..b-1), each row at
            its own `positions` [b, t] (long); mask [b, 1, t, max_seq]. Tensors, not ints, so one CUDA graph
            serves every step whatever point of its generation each slot is at."""
            q, k, v = self.qkv(x, cos, sin)
            return self.rest(x, self.attend_slots(q, k, v, slots, positions, mask))

        def attend_slots(self, q, k, v, slots, positions, mask):
            """Write k, v [b, kv_heads, t, head_dim] into the cache rows `slots` at `positions` [b, t], then attend
            q [b, heads, t, head_dim] over those rows (mask [b, 1, t, max_seq])."""
            b, _, t, _ = q.shape
            rows = (torch.arange(b, device=q.device) if slots is None else slots)[:, None].expand(b, t)
            self.k_cache[rows, :, positions] = k.transpose(1, 2)
            self.v_cache[rows, :, positions] = v.transpose(1, 2)
            keys = self.k_cache[:b] if slots is None else self.k_cache[slots]
            values = self.v_cache[:b] if slots is None else self.v_cache[slots]
            g = nh // nkv  # query heads i*g .. i*g+g-1 share KV head i (the pairing repeat_interleave makes), so
            # they attend as g*t query rows of that head: the same attention without copying the cache g times
            a = F.scaled_dot_product_attention(q.reshape(b, nkv, g * t, hd), keys, values,
                                               attn_mask=mask.repeat(1, 1, g, 1))
            return a.reshape(b, nh, t, hd)

        def forward_mixed(self, x, cos, sin, b, dec_pos, dmask, chunk_slot, chunk_pos, cmask):
            """One step of b decode rows (slots 0..b-1, one token each at dec_pos [b, 1]) and a prefill chunk of C
            tokens into cache slot chunk_slot [1] at chunk_pos [1, C]: x [1, b + C, hidden] is both, so every
            linear reads its weights once for b + C rows; only the attention is per part."""
            q, k, v = self.qkv(x, cos, sin)

            def rows(t):    # [1, heads, b, hd] -> [b, heads, 1, hd]
                return t[:, :, :b].transpose(0, 2)
            ad = self.attend_slots(rows(q), rows(k), rows(v), None, dec_pos, dmask)
            ac = self.attend_slots(q[:, :, b:], k[:, :, b:], v[:, :, b:], chunk_slot, chunk_pos, cmask)
            return self.rest(x, torch.cat((ad.transpose(0, 2), ac), dim=2))

        def qkv(self, x, cos, sin):
            b, t, _ = x.shape
            h = self.attn_norm(x)
            q = self.wq(h).view(b, t, nh, hd).transpose(1, 2)
            k = self.wk(h).view(b, t, nkv, hd).transpose(1, 2)
            v = self.wv(h).view(b, t, nkv, hd).transpose(1, 2)
            return rope(q, cos, sin), rope(k, cos, sin), v

        def rest(self, x, a):
            """The attention output a [b, heads, t, head_dim] through wo, the residual and the MLP."""
            b, _, t, _ = a.shape
            x = x + self.wo(a.transpose(1, 2).reshape(b, t, nh * hd))
            h = self.mlp_norm(x)
            return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))

    def rope(x, cos, sin):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg, self.max_seq = dict(cfg), max_seq
            self.embed = nn.Embedding(cfg["vocab"], cfg["hidden"], device=device, dtype=dtype)
            self.embed.weight.requires_grad_(False)
            rand_(self.embed.weight, 1.0)
            self.layers = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.norm = RMSNorm(cfg["hidden"])
            self.lm_head = linear(cfg["hidden"], cfg["vocab"])
            inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
            ang = torch.outer(torch.arange(max_seq, device=device, dtype=torch.float32), inv)
            self.register_buffer("cos", ang.cos())
            self.register_buffer("sin", ang.sin())

        def forward(self, tokens, pos: int):
            """tokens [B, T] at positions pos..pos+T-1 -> logits of the last position [B, vocab]."""
            t = tokens.shape[1]
            cos, sin = self.cos[pos:pos + t], self.sin[pos:pos + t]
            qpos = torch.arange(pos, pos + t, device=tokens.device)[:, None]
            kpos = torch.arange(self.max_seq, device=tokens.device)[None, :]
            mask = kpos <= qpos  # causal over the cache; entries after the current position are ignored
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x, cos, sin, pos, mask)
            return self.lm_head(self.norm(x[:, -1]))

        def forward_slots(self, tokens, positions, slots=None):
            """tokens [b, t] of the requests in KV-cache slots `slots` ([b] long; None: slots 0..b-1), at
            `positions` [b, t] (long, each row its own) -> logits of each row's last position [b, vocab].
            What a serving engine runs: every slot of the batch at a different point of its generation."""
            cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
            kpos = torch.arange(self.max_seq, device=tokens.device)
            mask = (kpos <= positions[..., None])[:, None]   # [b, 1, t, max_seq]: causal, per row
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer.forward_slots(x, cos, sin, slots, positions, mask)
            return self.lm_head(self.norm(x[:, -1]))

        def forward_mixed(self, dec_tokens, dec_pos, chunk_tokens, chunk_pos, chunk_slot):
            """b decode rows (dec_tokens, dec_pos [b, 1], slots 0..b-1) and a prefill chunk (chunk_tokens,
            chunk_pos [1, C] into cache slot chunk_slot [1]) in one forward: what a chunked-prefill engine runs.
            -> (logits of the decode rows [b, vocab], logits of the chunk's last position [1, vocab])."""
            b = dec_tokens.shape[0]
            positions = torch.cat((dec_pos.reshape(1, b), chunk_pos), dim=1)           # [1, b + C]
            cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
            kpos = torch.arange(self.max_seq, device=dec_tokens.device)
            dmask = (kpos <= dec_pos[..., None])[:, None]
            cmask = (kpos <= chunk_pos[..., None])[:, None]
            x = self.embed(torch.cat((dec_tokens.reshape(1, b), chunk_tokens), dim=1))
            for layer in self.layers:
                x = layer.forward_mixed(x, cos, sin, b, dec_pos, dmask, chunk_slot, chunk_pos, cmask)
            logits = self.lm_head(self.norm(torch.cat((x[0, :b], x[0, -1:]), dim=0)))
            return logits[:b], logits[b:]

    with torch.no_grad():
        model = Llama().eval()
    return model


def linears(model: Any) -> list[tuple[Any, str, Any]]:
    """(parent module, attribute, nn.Linear) for every linear of the model, LM head included."""
    from torch import nn

    out = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                out.append((parent, name, child))
    return out


def swap_linears(model: Any, make: Callable[[Any], Any]) -> Any:
    """Replace every nn.Linear by make(linear) (e.g. an fp8 weight-only module)."""
    for parent, name, lin in linears(model):
        setattr(parent, name, make(lin))
    return model


def weight_bytes(model: Any) -> int:
    """Bytes of the weights one decode token reads: every linear's stored weight (and scales), not the
    embedding table (one row per token)."""
    total = 0
    for mod in model.modules():
        for name, t in list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False)):
            if name in ("k_cache", "v_cache", "cos", "sin") or mod is getattr(model, "embed", None):
                continue
            total += _tensor_bytes(t)
    return total


def _tensor_bytes(t: Any) -> int:
    inner = getattr(t, "__tensor_flatten__", None)
    if inner is not None and type(t).__name__ not in ("Parameter", "Tensor"):
        names, _ = t.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in names)
    data = t.data if hasattr(t, "data") else t
    if type(data).__name__ not in ("Tensor", "Parameter") and hasattr(data, "__tensor_flatten__"):
        names, _ = data.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(data, n)) for n in names)
    return int(t.numel() * t.element_size())


def capture_decode(model: Any, tokens: Any, pos: int, pool: Any = None) -> tuple[Any, Any]:
    """Capture one forward pass as a CUDA graph (what torch.compile(mode="reduce-overhead") and serving
    engines do for decode): warm-up on a side stream, then capture. Returns (graph, static output);
    replay with graph.replay() after writing new inputs into `tokens`."""
    from perflab.workloads.cuda_graph import capture

    return capture(lambda: model(tokens, pos), pool)
