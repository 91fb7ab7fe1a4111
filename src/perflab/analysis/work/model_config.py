"""A transformer's work per forward from its description, for iterations whose kernels carry no shapes.

A serving engine replays its forward from CUDA graphs captured before the trace, so no op in the window says what
the kernels compute. The model does: a forward over T tokens reads every weight once (a mixture of experts: the
experts its tokens are routed to), reads the KV cache of the requests it attends over, and does about 2 FLOPs per
weight and token plus the attention's. That is what an engineer weighs a decode iteration against.

`load_model(spec)` reads an HF `config.json` (a path), or the same fields given by hand (`layers=32,hidden=4096,
intermediate=14336,heads=32,kv_heads=8,vocab=128256,dtype=bf16`), with the deployment's fields after either
(`config.json,tp=8,kv_dtype=fp8,context=2048`): `tp` splits the weights and heads over the GPUs (each rank's trace
runs its share), `ep` the experts, `context` is the mean number of tokens already in each decoding request's KV
cache (without it the KV cache's bytes are not counted, and the floor says so). Pure: no torch.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from perflab.errors import PerflabError

DTYPE_BYTES = {"float32": 4.0, "fp32": 4.0, "float": 4.0, "bfloat16": 2.0, "bf16": 2.0, "float16": 2.0,
               "fp16": 2.0, "half": 2.0, "fp8": 1.0, "float8": 1.0, "float8_e4m3fn": 1.0, "fp8_e4m3": 1.0,
               "fp8_e5m2": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5, "nvfp4": 0.5625, "mxfp4": 0.53125,
               "auto": 2.0}
# the tensor-core path a weight dtype runs its matmuls on (analysis.work.ceilings.PATHS)
DTYPE_PATH = {4.0: "tf32", 2.0: "bf16", 1.0: "fp8", 0.5: "fp4", 0.5625: "fp4", 0.53125: "fp4"}
# block-scaled 4-bit formats carry a scale per block: NVFP4 one fp8 per 16 values, MXFP4 one e8m0 per 32
_QUANT_BITS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "compressed-tensors": None, "modelopt": None, "mxfp4": "mxfp4",
               "nvfp4": "nvfp4", "awq": "int4", "gptq": "int4", "bitsandbytes": "int4", "int8": "int8"}
_BY_HAND = {"layers": "num_hidden_layers", "hidden": "hidden_size", "intermediate": "intermediate_size",
            "heads": "num_attention_heads", "kv_heads": "num_key_value_heads", "vocab": "vocab_size",
            "head_dim": "head_dim", "experts": "num_experts", "experts_per_token": "num_experts_per_tok",
            "moe_intermediate": "moe_intermediate_size", "shared_experts": "n_shared_experts",
            "dtype": "torch_dtype", "tied": "tie_word_embeddings"}
_DEPLOYMENT = ("tp", "ep", "kv_dtype", "weight_dtype", "context", "name")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    weight_bytes: float             # per parameter (scales included)
    kv_bytes: float                 # per KV element
    experts: int = 0                # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    tied: bool = False
    full_layers: int | None = None  # layers with full attention (a hybrid's others attend linearly); None: all
    linear_attention_params: float = 0.0   # per linear-attention layer (Gated DeltaNet, Mamba-style projections)
    output_gate: bool = False       # the attention output is gated (its q projection doubled)
    attention_bytes: float | None = None   # per attention parameter, where the quantization spares attention
    head_bytes: float | None = None        # per embedding / LM-head parameter (a quantization spares them)
    tp: int = 1
    ep: int = 1
    context: float | None = None    # mean tokens already in each decoding request's KV cache
    notes: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The tensor-core path the weights' dtype runs on."""
        return DTYPE_PATH.get(self.weight_bytes, "bf16")

    @property
    def attention_params(self) -> float:
        """Per layer, averaged over a hybrid's full- and linear-attention layers."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        full = float(self.hidden * q * (3 if self.output_gate else 2) + self.hidden * kv * 2)   # q (gate), o; k, v
        n_full = self.layers if self.full_layers is None else self.full_layers
        return (full * n_full + self.linear_attention_params * (self.layers - n_full)) / self.layers

    @property
    def kv_layers(self) -> int:
        return self.layers if self.full_layers is None else self.full_layers

    @property
    def expert_params(self) -> float:
        return 3.0 * self.hidden * (self.moe_intermediate or self.intermediate)   # gate, up, down

    @property
    def dense_mlp_params(self) -> float:
        if self.experts:
            return self.shared_experts * self.expert_params + self.hidden * self.experts   # shared experts, router
        return 3.0 * self.hidden * self.intermediate

    @property
    def embedding_params(self) -> float:
        return float(self.vocab * self.hidden * (1 if self.tied else 2))

    def to_dict(self) -> dict:
        params = self.layers * (self.attention_params + self.dense_mlp_params + self.experts * self.expert_params)
        return {"name": self.name, "layers": self.layers, "hidden": self.hidden, "intermediate": self.intermediate,
                "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim, "vocab": self.vocab,
                "experts": self.experts, "experts_per_token": self.experts_per_token,
                "weight_bytes_per_param": self.weight_bytes, "kv_bytes_per_element": self.kv_bytes,
                "path": self.path, "tp": self.tp, "ep": self.ep, "context": self.context,
                "params_b": round((params + self.embedding_params) / 1e9, 3), "notes": list(self.notes)}

    # -- the work of one forward on one GPU (its tp/ep share) ------------------------------------------------
    def experts_touched(self, tokens: float) -> float:
        """Expected distinct routed experts per MoE layer that `tokens` tokens reach (uniform routing)."""
        if not self.experts or tokens <= 0:
            return 0.0
        k = max(self.experts_per_token, 1)
        return self.experts * (1.0 - (1.0 - k / self.experts) ** tokens)

    def weight_bytes_read(self, tokens: float) -> float:
        """Bytes of weights one forward over `tokens` tokens reads on one GPU: every dense weight, the experts its
        tokens reach, the embedding rows it looks up and the LM head."""
        attention = self.attention_params * (self.attention_bytes or self.weight_bytes)
        mlp = self.dense_mlp_params * self.weight_bytes
        if self.experts:
            mlp += self.experts_touched(tokens) * self.expert_params * self.weight_bytes / self.ep
        head = (self.vocab + min(tokens, self.vocab)) * self.hidden * (self.head_bytes or self.weight_bytes)
        return (self.layers * (attention + mlp) + head) / self.tp

    def kv_bytes_read(self, decode_requests: float) -> float:
        """Bytes of KV cache the decoding requests read (each its `context` tokens); 0 without `context`."""
        if self.context is None or decode_requests <= 0:
            return 0.0
        return self.kv_bytes_per_token * self.context * decode_requests

    def kv_bytes_written(self, tokens: float) -> float:
        return self.kv_bytes_per_token * tokens

    @property
    def kv_bytes_per_token(self) -> float:
        """One token's K and V over the attending layers, on one GPU."""
        return 2.0 * self.kv_layers * self.kv_heads * self.head_dim * self.kv_bytes / self.tp

    def flops(self, tokens: float, decode_requests: float = 0.0, prefill_square: float | None = None) -> float:
        """FLOPs of one forward on one GPU: 2 per active weight and token, and attention's 4 x heads x head_dim per
        query-key pair (a prefill of T tokens attends over ~T^2/2 pairs: `prefill_square` = sum of T^2 where known,
        else the tokens taken as one prompt; a decoding request over its context)."""
        per_gpu = (self.attention_params + self.dense_mlp_params) / self.tp
        if self.experts:   # each token's experts, the experts spread over tp x ep GPUs
            per_gpu += max(self.experts_per_token, 1) * self.expert_params / (self.tp * self.ep)
        linear = 2.0 * tokens * (self.layers * per_gpu + self.vocab * self.hidden / self.tp)
        pairs = 0.0
        prefill = max(tokens - decode_requests, 0.0)
        pairs += (prefill_square if prefill_square is not None else prefill ** 2) / 2.0
        pairs += decode_requests * (self.context or 0.0)
        attention = 4.0 * self.kv_layers * self.heads * self.head_dim / self.tp * pairs
        return linear + attention


def _dtype_bytes(value, what: str) -> float:
    text = str(value).lower().removeprefix("torch.")
    if text not in DTYPE_BYTES:
        raise PerflabError(f"--model: unknown {what} {value!r} (one of {', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[text]


def _quant_bytes(cfg: dict) -> tuple[float | None, str | None]:
    q = cfg.get("quantization_config") or {}
    if not isinstance(q, dict) or not q:
        return None, None
    method = str(q.get("quant_method", "")).lower()
    fmt = _QUANT_BITS.get(method)
    if fmt is None:   # compressed-tensors / modelopt say it in their own fields
        algo = str(q.get("quant_algo") or q.get("format") or "").lower()
        fmt = "nvfp4" if "fp4" in algo else "fp8" if "fp8" in algo else "int4" if "int4" in algo or "w4" in algo \
            else None
        if fmt is None and isinstance(q.get("bits"), int):
            fmt = {4: "int4", 8: "int8"}.get(q["bits"])
    return (DTYPE_BYTES[fmt], f"{method or 'quantized'} weights ({fmt})") if fmt else (None, None)


def _text_config(cfg: dict) -> dict:
    """A multimodal config keeps the language model's fields under text_config (or llm_config)."""
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(cfg.get(key), dict) and "hidden_size" in cfg[key]:
            return {**cfg, **cfg[key]}
    return cfg


def from_hf(cfg: dict, name: str = "", deployment: dict | None = None) -> ModelConfig:
    """A ModelConfig from an HF config's fields (and the deployment's: tp, ep, kv_dtype, weight_dtype, context)."""
    d = deployment or {}
    cfg = _text_config(cfg)
    try:
        hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PerflabError(f"--model: the config lacks {exc} (hidden_size, num_hidden_layers and "
                           "num_attention_heads are needed)") from None
    notes = []
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0)
    intermediate = int(cfg.get("intermediate_size") or cfg.get("moe_intermediate_size") or 4 * hidden)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    qbytes, qnote = _quant_bytes(cfg)
    base = _dtype_bytes(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16", "dtype")
    attention_bytes = head_bytes = None
    if "weight_dtype" in d:
        weight = _dtype_bytes(d["weight_dtype"], "weight dtype")
    elif qbytes is not None:
        weight, head_bytes = qbytes, base   # quantizers keep the embeddings and the LM head in the base dtype
        spared = " ".join(str(m) for m in _spared(cfg.get("quantization_config") or {}))
        if experts and re.search(r"attn|attention", spared):
            attention_bytes = base
            qnote += "; attention in the base dtype"
        notes.append(qnote)
    else:
        weight = base
    kv = _dtype_bytes(d["kv_dtype"], "KV dtype") if "kv_dtype" in d else base
    full_layers, linear = _hybrid(cfg, layers, hidden)
    context = float(d["context"]) if "context" in d else None
    if context is None:
        notes.append("no context given: the KV cache's bytes are not counted (give context=N, the mean tokens "
                     "each decoding request holds)")
    return ModelConfig(
        name=str(d.get("name") or cfg.get("_name_or_path") or name or cfg.get("model_type") or "model"),
        layers=layers, hidden=hidden, intermediate=intermediate, heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=head_dim, vocab=int(cfg.get("vocab_size") or 0),
        weight_bytes=weight, kv_bytes=kv, experts=experts,
        experts_per_token=int(cfg.get("num_experts_per_tok") or cfg.get("moe_topk") or 0),
        moe_intermediate=int(cfg.get("moe_intermediate_size") or 0),
        shared_experts=int(cfg.get("n_shared_experts") or cfg.get("num_shared_experts") or 0),
        tied=bool(cfg.get("tie_word_embeddings", False)), full_layers=full_layers, linear_attention_params=linear,
        output_gate=bool(cfg.get("attn_output_gate", False)), attention_bytes=attention_bytes, head_bytes=head_bytes,
        tp=int(d.get("tp", 1)), ep=int(d.get("ep", 1)), context=context, notes=notes)


def _spared(q: dict) -> list:
    """The modules a quantization config leaves unquantized."""
    out = []
    for key in ("modules_to_not_convert", "exclude_modules", "ignore", "ignored_layers"):
        if isinstance(q.get(key), list):
            out += q[key]
    return out


def _hybrid(cfg: dict, layers: int, hidden: int) -> tuple[int | None, float]:
    """(layers with full attention, parameters of each linear-attention layer) of a hybrid model (Qwen3-Next /
    Qwen3.5: `layer_types` or `full_attention_interval`, Gated DeltaNet's q, k, v, output gate and o projections);
    (None, 0) for a model whose every layer attends fully."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and any("linear" in str(t) for t in types):
        full = sum(1 for t in types if "full" in str(t))
    elif isinstance(cfg.get("full_attention_interval"), int) and cfg["full_attention_interval"] > 1:
        full = layers // cfg["full_attention_interval"]
    else:
        return None, 0.0
    nk, nv = int(cfg.get("linear_num_key_heads") or 16), int(cfg.get("linear_num_value_heads") or 32)
    dk, dv = int(cfg.get("linear_key_head_dim") or 128), int(cfg.get("linear_value_head_dim") or 128)
    return full, float(hidden * (2 * nk * dk + 2 * nv * dv) + nv * dv * hidden)


_FIELD = re.compile(r"^\s*([a-z_]+)\s*=\s*(.+?)\s*$")


def load_model(spec: str) -> ModelConfig:
    """`--model`: a config.json path and/or `key=value` fields, comma-separated (see the module docstring)."""
    parts = [p for p in spec.split(",") if p.strip()]
    path, fields = None, {}
    for p in parts:
        m = _FIELD.match(p)
        if m:
            fields[m.group(1)] = m.group(2)
        elif path is None:
            path = Path(p.strip())
        else:
            raise PerflabError(f"--model: {p!r} is neither a key=value field nor the one config path")
    unknown = set(fields) - set(_BY_HAND) - set(_DEPLOYMENT)
    if unknown:
        raise PerflabError(f"--model: unknown field(s) {', '.join(sorted(unknown))} (fields: "
                           f"{', '.join([*_BY_HAND, *_DEPLOYMENT])})")
    cfg: dict = {}
    if path is not None:
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PerflabError(f"--model: cannot read {path}: {exc.strerror or exc}") from None
        except ValueError:
            raise PerflabError(f"--model: {path} is not a JSON config (give an HF config.json)") from None
        if not isinstance(cfg, dict):
            raise PerflabError(f"--model: {path} is not a JSON object (give an HF config.json)")
    deployment = {k: fields.pop(k) for k in list(fields) if k in _DEPLOYMENT}
    for short, key in _BY_HAND.items():
        if short in fields:
            value = fields[short]
            cfg[key] = value if short == "dtype" else (value.lower() in ("1", "true", "yes") if short == "tied"
                                                       else _int(value, short))
    for k in ("tp", "ep"):
        if k in deployment:
            deployment[k] = _int(deployment[k], k)
    if "context" in deployment:
        deployment["context"] = _int(deployment["context"], "context")
    return from_hf(cfg, path.stem if path else "", deployment)


def _int(value: str, what: str) -> int:
    try:
        n = int(float(value))
    except ValueError:
        raise PerflabError(f"--model: {what}={value!r} is not a number") from None
    if n < 0:
        raise PerflabError(f"--model: {what} must not be negative")
    return n
