"""A small LLM serving engine for the serving puzzles: a Llama-shaped decoder (workloads/llama.py) with a
KV cache of B slots, driven one forward pass at a time by a scheduler the puzzle leaves to the learner.

The engine does the GPU work and the bookkeeping; the scheduler decides what runs when:
- `prefill(r, s)`: request r's prompt through the model into cache slot s (one forward of [1, prompt]);
  its logits give r's first token.
- `decode()`: one forward of all B slots ([B, 1], each slot at its own position): every slot computes a
  token, whether a request occupies it or not; occupied slots whose request still wants tokens emit one.
- `mixed(r, s)` (an engine built with `chunk`): one forward of all B decode rows *and* the next `chunk` tokens
  of request r's prompt into slot s, as chunked-prefill engines schedule by a token budget per step; the
  forward that takes the prompt's last chunk gives r's first token.
- `finished(r)`, `release(s)`, `outputs()`; with `arrivals` (per request, the number of decoding forwards
  after which it arrives: a request stream over time) `arrived(r)` and `waiting()`.
On a GPU both forwards are CUDA graphs (captured once; slot, request and positions are tensors the graphs
read), as serving engines run decode, so the host's launch costs do not hide what the schedule costs.

Every request gets exactly its own output length (greedy decode with fixed lengths, as serving benchmarks
run with ignore_eos): the schedule never changes what a request computes, only when and beside whom.
With `answers` ([N, longest] tokens) each request decodes its given answer (teacher-forced, as a scoring pass
does) and the output is each token's top logit (float32): a chunked prefill rounds differently from a whole
one (other GEMM shapes), which must not change what a request decodes next, so outputs compare at tolerance.
With `timed` set the engine records when each forward ended (CUDA events, read after the step; the host
clock on the CPU) and `log()` returns the schedule and its times (perflab/puzzles/evidence/serving.py).

Every forward runs inside a `torch.profiler.record_function` range named the way vLLM names its iterations,
`execute_context_N(T)_generation_M(G)` (`iteration_name`): N requests prefilling T prompt tokens, M requests
decoding G tokens. A torch.profiler trace of the engine is then read through its iterations
(analysis/steps/iterations.py), as a real engine's is. torch is imported lazily.
"""
from __future__ import annotations

import random
import time
from typing import Any

from perflab.workloads import llama
from perflab.workloads.cuda_graph import capture


def output_lengths(n: int, lo: int, hi: int, seed: int, alpha: float = 1.0) -> list[int]:
    """n output lengths from a Pareto tail (shape alpha) starting at lo, capped at hi: most requests short,
    a few long, as chat traffic is. Drawn from `seed` alone, so the stream is the same whatever the weights."""
    rng = random.Random(seed)
    return [min(hi, int(round(lo * (1.0 - rng.random()) ** (-1.0 / alpha)))) for _ in range(n)]


def iteration_name(prefill_requests: int, prefill_tokens: int, decode_requests: int, decode_tokens: int) -> str:
    """vLLM's name of an iteration's range (its worker's profiler annotation)."""
    return (f"execute_context_{prefill_requests}({prefill_tokens})_generation_{decode_requests}({decode_tokens})")


def build_engine(size: dict, device: str, seed: int, lengths: list[int], arrivals: list[int] | None = None) -> "Engine":
    """A serving puzzle's engine: `size["layers"]` layers of the llama shapes `size["model"]` names, `size["requests"]`
    random prompts of `size["prompt"]` tokens and teacher-forced answers drawn on the device from `seed`, a KV cache of
    `size["slots"]` slots (`size["chunk"]` prompt tokens per mixed forward); CUDA graphs on a GPU."""
    import torch

    cfg = dict(getattr(llama, size["model"]), layers=size["layers"])
    # +1: the position a slot parks at while its prompt is prefilled in chunks (nothing reads it)
    model = llama.build(cfg, device, seed, batch=size["slots"], max_seq=size["prompt"] + max(lengths) + 1)
    gen = torch.Generator(device=device).manual_seed(int(seed) + 1)
    prompts = torch.randint(0, cfg["vocab"], (size["requests"], size["prompt"]), generator=gen, device=device)
    answers = torch.randint(0, cfg["vocab"], (size["requests"], max(lengths)), generator=gen, device=device)
    return Engine(model, prompts, lengths, size["slots"], graphs=str(device).startswith("cuda"),
                  chunk=size.get("chunk", 0), answers=answers, arrivals=arrivals)


class Engine:
    """B KV-cache slots of one model and the requests' bookkeeping (see the module docstring)."""

    def __init__(self, model: Any, prompts: Any, lengths: list[int], slots: int, *, graphs: bool, chunk: int = 0,
                 answers: Any = None, arrivals: list[int] | None = None):
        import torch

        dev = prompts.device
        self.model, self.prompts, self.lengths, self.slots = model, prompts, list(lengths), int(slots)
        self.prompt_len = int(prompts.shape[1])
        self.chunk, self.answers = int(chunk), answers
        self.arrivals = list(arrivals) if arrivals is not None else [0] * len(self.lengths)
        if self.chunk and self.prompt_len % self.chunk:
            raise ValueError(f"the prompt ({self.prompt_len} tokens) is not a whole number of {self.chunk}-token chunks")
        self.timed = False
        self.cur = torch.zeros(self.slots, dtype=torch.long, device=dev)   # each slot's next input token
        self.pos = torch.zeros(self.slots, dtype=torch.long, device=dev)   # the position it goes to
        self._req = torch.zeros(1, dtype=torch.long, device=dev)           # what a prefill reads ...
        self._slot = torch.zeros(1, dtype=torch.long, device=dev)          # ... and the slot it fills
        self._prompt_pos = torch.arange(self.prompt_len, device=dev)[None]
        self._first_pos = torch.full((1,), self.prompt_len, dtype=torch.long, device=dev)
        self._after = torch.zeros(1, dtype=torch.long, device=dev)         # a chunk's slot: its next position
        self._off = torch.zeros(1, dtype=torch.long, device=dev)           # the chunk's first prompt position
        self._chunk_pos = torch.arange(max(self.chunk, 1), device=dev)[None]
        self.slot_req = torch.zeros(self.slots, dtype=torch.long, device=dev)   # answers: whose answer a slot reads
        self.slot_n = torch.zeros(self.slots, dtype=torch.long, device=dev)     # ... and how far
        self._score = torch.zeros(self.slots, dtype=torch.float32, device=dev)
        # every schedule that computes a live token in each forward fits: N prefills (in chunks) + one decode per
        # token, and the forwards a server idles until the last arrival
        chunks = self.prompt_len // self.chunk if self.chunk else 1
        self.max_forwards = len(self.lengths) * chunks + sum(self.lengths) + max(self.arrivals)
        self._hist = torch.zeros(self.max_forwards, self.slots, device=dev,
                                 dtype=torch.long if answers is None else torch.float32)
        self._graphs: dict[str, Any] = {}
        if graphs:
            self._graphs = {"prefill": capture(self._prefill)[0], "decode": capture(self._decode)[0]}
            if self.chunk:
                self._graphs["mixed"] = capture(self._mixed)[0]
        self.reset()

    # -- the GPU work --------------------------------------------------------------------------------
    def _prefill(self) -> None:
        tokens = self.prompts.index_select(0, self._req)                          # [1, prompt]
        logits = self.model.forward_slots(tokens, self._prompt_pos, self._slot)
        self._first(logits, self._first_pos)

    def _decode(self) -> None:
        self._next(self.model.forward_slots(self.cur[:, None], self.pos[:, None]))

    def _mixed(self) -> None:
        positions = self._chunk_pos + self._off                                   # [1, chunk]
        tokens = self.prompts.index_select(0, self._req).gather(1, positions)
        decoded, last = self.model.forward_mixed(self.cur[:, None], self.pos[:, None], tokens, positions, self._slot)
        self._next(decoded)
        self._first(last, self._after)   # a chunk before the last: the slot parks at a position nothing reads

    def _next(self, logits: Any) -> None:
        """Every slot's next input after a decode: its greedy token, or its answer's next one."""
        if self.answers is None:
            self.cur.copy_(logits.argmax(-1))
        else:
            self._score.copy_(logits.float().amax(-1))
            self.slot_n.add_(1)
            self.cur.copy_(self.answers[self.slot_req, (self.slot_n - 1).clamp_(max=self.answers.shape[1] - 1)])
        self.pos.add_(1).clamp_(max=self.model.max_seq - 1)   # a free slot keeps running: keep it in the cache

    def _first(self, logits: Any, position: Any) -> None:
        """The prefilled slot: its first token (logits [1, vocab]) and the position its decode goes on from."""
        if self.answers is None:
            self.cur.index_copy_(0, self._slot, logits.argmax(-1))
        else:
            self._score.index_copy_(0, self._slot, logits.float().amax(-1))
            self.slot_req.index_copy_(0, self._slot, self._req)
            self.slot_n.index_fill_(0, self._slot, 1)
            self.cur.index_copy_(0, self._slot, self.answers.index_select(0, self._req)[:, 0])
        self.pos.index_copy_(0, self._slot, position)

    def _run(self, kind: str, prefill_tokens: int) -> int:
        import torch

        if self.forwards >= self.max_forwards:
            raise RuntimeError(f"more than {self.max_forwards} forward passes for {len(self.lengths)} requests: "
                               "the schedule runs forwards that serve no request")
        decoding = 0 if kind == "prefill" else len(self._decoding())
        name = iteration_name(int(prefill_tokens > 0), prefill_tokens, decoding, decoding)
        self.markers.append(name)
        with torch.profiler.record_function(name):
            graph = self._graphs.get(kind)
            if graph is not None:
                graph.replay()
            else:
                {"prefill": self._prefill, "decode": self._decode, "mixed": self._mixed}[kind]()
            f = self.forwards
            self._hist[f].copy_(self.cur if self.answers is None else self._score)
        self.forwards += 1
        if self.timed:
            self._marks.append(self._clock())
        return f

    # -- what a scheduler calls ----------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the last stream: every slot free, no request admitted (the caches keep stale data, which
        the causal mask hides: a request reads only positions it wrote)."""
        self.forwards = 0
        self.occupant: list[int | None] = [None] * self.slots
        self.generated = [0] * len(self.lengths)
        self._where: list[list[int]] = [[] for _ in self.lengths]
        self._kinds: list[str] = []
        self._live: list[int] = []
        self._waiting: list[int] = []
        self._prefill_tokens: list[int] = []
        self._clock_after: list[int] = []
        self.clock = 0                     # forwards that decoded: the stream's clock for `arrivals`
        self.prefilled = [0] * len(self.lengths)
        self._admitted_set: set[int] = set()
        self._marks: list[Any] = []
        self.markers: list[str] = []       # each forward's iteration name (its profiler range), in order
        self._start = self._clock() if self.timed else None

    def _admit(self, request: int, slot: int) -> None:
        if self.occupant[slot] is not None and not self.finished(self.occupant[slot]):
            raise RuntimeError(f"slot {slot} still serves request {self.occupant[slot]}")
        if request in self._admitted_set:
            raise RuntimeError(f"request {request} was admitted twice")
        if not self.arrived(request):
            raise RuntimeError(f"request {request} has not arrived yet (it arrives after {self.arrivals[request]} "
                               f"decoding forwards, {self.clock} so far)")
        self.occupant[slot] = request
        self._admitted_set.add(request)

    def prefill(self, request: int, slot: int) -> None:
        """Request's whole prompt in one forward into slot: its first token."""
        self._admit(request, slot)
        self._req.fill_(request)
        self._slot.fill_(slot)
        f = self._run("prefill", self.prompt_len)
        self.prefilled[request] = self.prompt_len
        self._emit(f, slot, request)
        self._note("prefill", 1, self.prompt_len, len(self.waiting()))   # live: the rows that emitted a token (a prefill: its one)

    def decode(self) -> None:
        """One forward of all slots: every live request gets its next token."""
        waiting = len(self.waiting())      # the requests that could have used this forward's rows
        f = self._run("decode", 0)
        self._note("decode", self._decode_rows(f), 0, waiting)

    def mixed(self, request: int, slot: int) -> None:
        """One forward of all slots' decode rows and the next `chunk` tokens of request's prompt into slot; the
        last chunk gives the request its first token."""
        if not self.chunk:
            raise RuntimeError("this engine was built without chunk: no mixed steps")
        if self.prefilled[request] == 0:
            self._admit(request, slot)
        elif self.occupant[slot] != request or self.prefilled[request] >= self.prompt_len:
            raise RuntimeError(f"request {request} is not being prefilled in slot {slot}")
        done = self.prefilled[request] + self.chunk
        self._req.fill_(request)
        self._slot.fill_(slot)
        self._off.fill_(self.prefilled[request])
        self._after.fill_(self.prompt_len if done == self.prompt_len else self.model.max_seq - 1)
        waiting = len(self.waiting())
        f = self._run("mixed", self.chunk)
        live = self._decode_rows(f)
        self.prefilled[request] = done
        if done == self.prompt_len:
            self._emit(f, slot, request)
        self._note("mixed", live, self.chunk, waiting)

    def _decoding(self) -> list[tuple[int, int]]:
        """(slot, request) of every slot whose request has its first token and wants more: a decode row's token."""
        return [(s, r) for s, r in enumerate(self.occupant) if r is not None and 0 < self.generated[r] < self.lengths[r]]

    def _decode_rows(self, f: int) -> int:
        rows = self._decoding()
        for s, r in rows:
            self._emit(f, s, r)
        self.clock += 1
        return len(rows)

    def busy(self) -> bool:
        """Some request is admitted and not done, or one is still to come."""
        return any(not self.finished(r) for r in range(len(self.lengths)))

    def free_slots(self) -> list[int]:
        """Slots no request holds, or whose request has all its tokens."""
        return [s for s, r in enumerate(self.occupant) if r is None or self.finished(r)]

    def finished(self, request: int) -> bool:
        return self.generated[request] >= self.lengths[request]

    def arrived(self, request: int) -> bool:
        return self.arrivals[request] <= self.clock

    def waiting(self) -> list[int]:
        """Requests that have arrived and are not admitted yet, in order of arrival."""
        return sorted((r for r in range(len(self.lengths)) if r not in self._admitted_set and self.arrived(r)),
                      key=lambda r: (self.arrivals[r], r))

    def release(self, slot: int) -> None:
        self.occupant[slot] = None

    def _emit(self, f: int, slot: int, request: int) -> None:
        self._where[request].append(f * self.slots + slot)
        self.generated[request] += 1

    def _note(self, kind: str, live: int, prefill_tokens: int, waiting: int) -> None:
        self._kinds.append(kind)
        self._live.append(live)
        self._prefill_tokens.append(prefill_tokens)
        self._clock_after.append(self.clock)
        self._waiting.append(waiting)

    def refill(self, seed: int) -> None:
        """New prompts and answers (token ids over the vocabulary) drawn from `seed`; lengths and arrivals stay."""
        from perflab.workloads import fresh

        vocab = self.model.cfg["vocab"]
        fresh.randint_(self.prompts, seed, 0, vocab)
        if self.answers is not None:
            fresh.randint_(self.answers, seed + 1, 0, vocab)

    # -- results -------------------------------------------------------------------------------------
    def serve(self, schedule: Any) -> Any:
        """The whole stream served once, from the start, by `schedule(self)`: what outputs() then returns."""
        import torch

        self.reset()
        with torch.no_grad():
            schedule(self)
        return self.outputs()

    def outputs(self) -> Any:
        """[N, longest] int64 on the CPU: each request's generated tokens in order, -1 after its end (with
        `answers`: float32, each token's top logit, NaN after its end)."""
        import torch

        short = [r for r, n in enumerate(self.generated) if n < self.lengths[r]]
        if short:
            r = short[0]
            raise RuntimeError(f"{len(short)} requests not served to the end (request {r}: "
                               f"{self.generated[r]} of {self.lengths[r]} tokens)")
        flat = self._hist[:self.forwards].flatten().cpu()
        out = torch.full((len(self.lengths), max(self.lengths)), -1 if self.answers is None else float("nan"),
                         dtype=flat.dtype)
        for r, where in enumerate(self._where):
            out[r, :len(where)] = flat[torch.tensor(where, dtype=torch.long)]
        return out

    def _clock(self) -> Any:
        if self.prompts.device.type == "cuda":
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _ms(self, mark: Any) -> float:
        if isinstance(mark, float):
            return (mark - self._start) * 1e3
        return float(self._start.elapsed_time(mark))

    def log(self) -> dict[str, Any]:
        """The last stream's schedule: per forward its kind (prefill | decode | mixed), live decode rows (a
        prefill: 1, its token), prompt tokens it prefilled, requests waiting after it and (timed) its end in ms from
        the stream's start; per request the forwards that emitted its tokens and the forward after which it
        arrived (-1: before the first)."""
        if self.timed and self._marks and not isinstance(self._marks[-1], float):
            self._marks[-1].synchronize()
        return {"slots": self.slots, "prompt_len": self.prompt_len, "lengths": list(self.lengths), "chunk": self.chunk,
                "forwards": {"kind": list(self._kinds), "live": list(self._live), "waiting": list(self._waiting),
                             "prefill_tokens": list(self._prefill_tokens),
                             "end_ms": [round(self._ms(m), 4) for m in self._marks] if self.timed else None},
                "token_forwards": [[w // self.slots for w in where] for where in self._where],
                "arrival_forward": [self._arrival_forward(r) for r in range(len(self.lengths))]}

    def _arrival_forward(self, request: int) -> int:
        due = self.arrivals[request]
        if due <= 0:
            return -1
        return next((f for f, c in enumerate(self._clock_after) if c >= due), len(self._clock_after) - 1)
