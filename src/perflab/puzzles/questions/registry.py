"""The question registry: analyses by name, and the grading of a learner's answer against them.

Every analysis is `fn(evidence, **args) -> Computed`, registered with `@analysis` by the module of its
question kind (the other modules of this package) into the engine's ANALYSES (engine/plugins.py, which
finds them by discovery); puzzle.toml names it in `analysis` and passes `args`. A Computed carries the value and the numbers behind it (shown after a wrong answer).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from perflab.errors import PerflabError
from perflab.puzzles.engine.plugins import ANALYSES


@dataclass
class Computed:
    value: Any
    evidence: dict[str, Any]
    source: str
    alternatives: tuple[str, ...] = ()


@dataclass
class Grade:
    key: str
    given: str
    correct: bool
    computed: Computed
    note: str = ""

    @property
    def expected(self) -> Any:
        return self.computed.value


def analysis(fn: Callable[..., Computed]) -> Callable[..., Computed]:
    ANALYSES[fn.__name__] = fn
    return fn


def compute(question: Any, ev: Any) -> Computed:
    return ANALYSES[question.analysis](ev, **question.args)


def normalize(question: Any, raw: str) -> Any:
    """The learner's answer in the question's type; bad input raises PerflabError (exit 2)."""
    text = raw.strip()
    if not text:
        raise PerflabError(f"empty answer for {question.key!r}")
    if question.type == "taxonomy":
        from perflab.doctor.finding import TAXONOMY_IDS

        tid = re.sub(r"[\s_]+", "-", text.lower())
        if tid not in TAXONOMY_IDS:
            raise PerflabError(f"{text!r} is not a taxonomy id, e.g. host-sync, launch-overhead (perflab taxonomy lists them)")
        return tid
    if question.type == "number":
        cleaned = re.sub(r"(%|ms|x|×)$", "", text.lower().replace(",", "")).strip()
        try:
            value = float(cleaned)
        except ValueError:
            raise PerflabError(f"{text!r} is not a number (answer for {question.key!r})") from None
        if not math.isfinite(value):
            raise PerflabError(f"{text!r} is not a finite number")
        return value
    if question.type == "choice":
        for choice in question.choices:
            if choice.lower() == text.lower():
                return choice
        raise PerflabError(f"{text!r} is not one of the choices: {', '.join(question.choices)}")
    return text


def grade(question: Any, raw: str, computed: Computed) -> Grade:
    given = normalize(question, raw)
    expected = computed.value
    note = ""
    if question.type == "number":
        correct = abs(given - float(expected)) <= question.tolerance * abs(float(expected))
        note = f"answers within ±{question.tolerance:.0%} of the computed value count as right"
    elif question.type == "text":
        correct, note = _grade_text(given, str(expected), computed.alternatives)
    else:
        correct = str(given).lower() == str(expected).lower()
    return Grade(question.key, raw.strip(), correct, computed, note)


MIN_TEXT = 3


def _grade_text(given: str, expected: str, alternatives: tuple[str, ...]) -> tuple[bool, str]:
    """Case-insensitive substring of the expected name that singles it out among the alternatives."""
    g, e = given.lower(), expected.lower()
    if g == e:
        return True, ""
    if len(g) < MIN_TEXT or g not in e:
        return False, ""
    clash = [a for a in alternatives if g in a.lower()]
    if clash:
        return False, f"{given!r} also matches {clash[0][:80]!r}: give a more specific part of the name"
    return True, ""
