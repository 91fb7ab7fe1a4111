"""A small LLM serving engine for the serving puzzles: a Llama-shaped decoder (workloads/llama.py) with a
KV cache of B slots, driven one forward pass at a time by a scheduler the puzzle leaves to the learner.

The engine does the GPU work and the bookkeeping; the scheduler decides what runs when:
- `prefill(r, s)`: request r's prompt through the model into cache slot s (one forward of [1, prompt]);
  its logits give r's first token.
- `decode()`: one forward of all B slots ([B, 1], each slot at its own position): every slot computes a
  token, whether a request occupies it or not; occupied slots whose request still wants tokens emit one.
- `finished(r)`, `release(s)`, `outputs()`.
On a GPU both forwards are CUDA graphs (captured once; slot, request and positions are tensors the graphs
read), as serving engines run decode, so the host's launch costs do not hide what the schedule costs.

Every request gets exactly its own output length (greedy decode with fixed lengths, as serving benchmarks
run with ignore_eos): the schedule never changes what a request computes, only when and beside whom.
With `timed` set the engine records when each forward ended (CUDA events, read after the step; the host
clock on the CPU) and `log()` returns the schedule and its times (perflab/puzzles/evidence/serving.py).
torch is imported lazily.
"""
from __future__ import annotations

import random
import time
from typing import Any

from perflab.workloads import llama


def output_lengths(n: int, lo: int, hi: int, seed: int, alpha: float = 1.0) -> list[int]:
    """n output lengths from a Pareto tail (shape alpha) starting at lo, capped at hi: most requests short,
    a few long, as chat traffic is. Drawn from `seed` alone, so the stream is the same whatever the weights."""
    rng = random.Random(seed)
    return [min(hi, int(round(lo * (1.0 - rng.random()) ** (-1.0 / alpha)))) for _ in range(n)]


class Engine:
    """B KV-cache slots of one model and the requests' bookkeeping (see the module docstring)."""

    def __init__(self, model: Any, prompts: Any, lengths: list[int], slots: int, *, graphs: bool):
        import torch

        dev = prompts.device
        self.model, self.prompts, self.lengths, self.slots = model, prompts, list(lengths), int(slots)
        self.prompt_len = int(prompts.shape[1])
        self.timed = False
        self.cur = torch.zeros(self.slots, dtype=torch.long, device=dev)   # each slot's next input token
        self.pos = torch.zeros(self.slots, dtype=torch.long, device=dev)   # the position it goes to
        self._req = torch.zeros(1, dtype=torch.long, device=dev)           # what a prefill reads ...
        self._slot = torch.zeros(1, dtype=torch.long, device=dev)          # ... and the slot it fills
        self._prompt_pos = torch.arange(self.prompt_len, device=dev)[None]
        self._first_pos = torch.full((1,), self.prompt_len, dtype=torch.long, device=dev)
        # every schedule that computes a live token in each forward fits: N prefills + one decode per token
        self.max_forwards = len(self.lengths) + sum(self.lengths)
        self._hist = torch.zeros(self.max_forwards, self.slots, dtype=torch.long, device=dev)
        self._graphs: dict[str, Any] = {}
        if graphs:
            self._graphs = {"prefill": llama.capture(self._prefill)[0], "decode": llama.capture(self._decode)[0]}
        self.reset()

    # -- the GPU work --------------------------------------------------------------------------------
    def _prefill(self) -> None:
        tokens = self.prompts.index_select(0, self._req)                          # [1, prompt]
        logits = self.model.forward_slots(tokens, self._prompt_pos, self._slot)
        self.cur.index_copy_(0, self._slot, logits.argmax(-1))
        self.pos.index_copy_(0, self._slot, self._first_pos)

    def _decode(self) -> None:
        logits = self.model.forward_slots(self.cur[:, None], self.pos[:, None])
        self.cur.copy_(logits.argmax(-1))
        self.pos.add_(1).clamp_(max=self.model.max_seq - 1)   # a free slot keeps running: keep it in the cache

    def _run(self, kind: str) -> int:
        if self.forwards >= self.max_forwards:
            raise RuntimeError(f"more than {self.max_forwards} forward passes for {len(self.lengths)} requests: "
                               "the schedule runs forwards that serve no request")
        graph = self._graphs.get(kind)
        if graph is not None:
            graph.replay()
        else:
            (self._prefill if kind == "prefill" else self._decode)()
        f = self.forwards
        self._hist[f].copy_(self.cur)
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
        self._admitted = 0
        self._marks: list[Any] = []
        self._start = self._clock() if self.timed else None

    def prefill(self, request: int, slot: int) -> None:
        if self.occupant[slot] is not None and not self.finished(self.occupant[slot]):
            raise RuntimeError(f"slot {slot} still serves request {self.occupant[slot]}")
        if self._where[request]:
            raise RuntimeError(f"request {request} was admitted twice")
        self._req.fill_(request)
        self._slot.fill_(slot)
        f = self._run("prefill")
        self.occupant[slot] = request
        self._admitted += 1
        self._emit(f, slot, request)
        self._note("prefill", 1)

    def decode(self) -> None:
        f = self._run("decode")
        live = 0
        for s, r in enumerate(self.occupant):
            if r is not None and not self.finished(r):
                self._emit(f, s, r)
                live += 1
        self._note("decode", live)

    def finished(self, request: int) -> bool:
        return self.generated[request] >= self.lengths[request]

    def release(self, slot: int) -> None:
        self.occupant[slot] = None

    def _emit(self, f: int, slot: int, request: int) -> None:
        self._where[request].append(f * self.slots + slot)
        self.generated[request] += 1

    def _note(self, kind: str, live: int) -> None:
        self._kinds.append(kind)
        self._live.append(live)
        self._waiting.append(len(self.lengths) - self._admitted)

    # -- results -------------------------------------------------------------------------------------
    def outputs(self) -> Any:
        """[N, longest] int64 on the CPU: each request's generated tokens in order, -1 after its end."""
        import torch

        short = [r for r, n in enumerate(self.generated) if n < self.lengths[r]]
        if short:
            r = short[0]
            raise RuntimeError(f"{len(short)} requests not served to the end (request {r}: "
                               f"{self.generated[r]} of {self.lengths[r]} tokens)")
        flat = self._hist[:self.forwards].flatten().cpu()
        out = torch.full((len(self.lengths), max(self.lengths)), -1, dtype=torch.long)
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
        """The last stream's schedule: per forward its kind, live rows, requests still waiting and (timed) its
        end in ms from the stream's start; per request the forwards that emitted its tokens."""
        if self.timed and self._marks and not isinstance(self._marks[-1], float):
            self._marks[-1].synchronize()
        return {"slots": self.slots, "prompt_len": self.prompt_len, "lengths": list(self.lengths),
                "forwards": {"kind": list(self._kinds), "live": list(self._live), "waiting": list(self._waiting),
                             "end_ms": [round(self._ms(m), 4) for m in self._marks] if self.timed else None},
                "token_forwards": [[w // self.slots for w in where] for where in self._where]}
