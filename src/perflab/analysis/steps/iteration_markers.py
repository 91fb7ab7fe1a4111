"""A serving engine's iteration markers: the range it opens around each forward, and the tokens its name carries.

Engines name the range after the batch it runs, so every iteration has a different name; what marks an iteration
is the pattern, not the name:

- vLLM (`--profiler-config`, the worker's annotation): `execute_context_N(T)_generation_M(G)`: N requests
  prefilling T prompt tokens, M requests decoding G tokens. Newer versions append more numbers inside the
  parentheses (`888_788544`: the tokens and their squares, for attention's cost); the first is the tokens.
  Older versions: `execute_new_N_cached_M` (requests only, no tokens).
- SGLang and engines built like it: `prefill[bs=B tok=T ...]`, `extend[...]`, `decode[bs=B tok=T ...]`.
- TensorRT-LLM's executor: `... N ctx reqs, M gen reqs` (requests only).
- A user's own marker (`--marker REGEX`): each range whose name matches is an iteration; named groups
  `prefill`/`decode` (tokens) and `prefill_reqs`/`decode_reqs` (requests) give what the name carries.

Unknown counts are -1: the tokens then come from the iteration's input shapes (analysis/steps/iterations.py).
Pure: no torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Marker:
    engine: str
    prefill_requests: int = -1
    prefill_tokens: int = -1
    decode_requests: int = -1
    decode_tokens: int = -1
    prefill_square: int = -1     # sum over prefilling requests of their tokens squared (attention's pairs x 2)


_VLLM = re.compile(r"execute_context_(\d+)\((\d+)(?:_(\d+))?(?:_\d+)*\)_generation_(\d+)\((\d+)(?:_\d+)*\)")
_VLLM_OLD = re.compile(r"execute_new_(\d+)_cached_(\d+)")
_BRACKETED = re.compile(r"^(prefill|extend|decode|mixed)\[([^\]]*)\]")
_TRTLLM = re.compile(r"(\d+)\s+ctx\s+reqs?,\s*(\d+)\s+gen\s+reqs?")
_KEY_VALUE = re.compile(r"(\w+)=(\d+)")


def _vllm(m: re.Match) -> Marker:
    n_ctx, ctx_tok, square, n_gen, gen_tok = m.groups()
    # the second number of the context's, where written, is the prompts' tokens squared, summed (888_788544)
    sq = int(square) if square is not None and int(square) >= int(ctx_tok) else -1
    return Marker("vLLM", int(n_ctx), int(ctx_tok), int(n_gen), int(gen_tok), sq)


def _vllm_old(m: re.Match) -> Marker:
    # new requests prefill; cached ones decode or continue a chunked prefill: their tokens are not in the name
    return Marker("vLLM", prefill_requests=int(m.group(1)), decode_requests=int(m.group(2)))


def _bracketed(m: re.Match) -> Marker:
    phase, fields = m.group(1), dict((k, int(v)) for k, v in _KEY_VALUE.findall(m.group(2)))
    reqs, tokens = fields.get("bs", -1), fields.get("tok", -1)
    if phase == "decode":
        return Marker("SGLang", 0, 0, reqs, tokens if tokens >= 0 else reqs)
    if phase == "mixed":
        return Marker("SGLang", decode_requests=reqs)
    return Marker("SGLang", reqs, tokens, 0, 0)


def _trtllm(m: re.Match) -> Marker:
    return Marker("TensorRT-LLM", prefill_requests=int(m.group(1)), decode_requests=int(m.group(2)))


ENGINE_MARKERS: tuple[tuple[re.Pattern, Callable[[re.Match], Marker]], ...] = (
    (_VLLM, _vllm), (_VLLM_OLD, _vllm_old), (_BRACKETED, _bracketed), (_TRTLLM, _trtllm))


def engine_marker(name: str) -> Marker | None:
    """What an engine's iteration range says of its batch, or None when the name is no engine's marker."""
    text = name.strip()
    for pattern, read in ENGINE_MARKERS:
        m = pattern.search(text) if pattern is not _BRACKETED else pattern.match(text)
        if m:
            return read(m)
    return None


def user_marker(pattern: str) -> Callable[[str], Marker | None]:
    """A parser for `--marker REGEX`: a name matching it is an iteration; its named groups give the counts."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        from perflab.errors import PerflabError

        raise PerflabError(f"--marker {pattern!r} is not a regular expression: {exc}") from None

    def parse(name: str) -> Marker | None:
        m = regex.search(name)
        if not m:
            return None
        groups = {k: int(v) for k, v in m.groupdict().items() if v is not None and v.isdigit()}
        return Marker("marker", groups.get("prefill_reqs", -1), groups.get("prefill", -1),
                      groups.get("decode_reqs", -1), groups.get("decode", -1))
    return parse
