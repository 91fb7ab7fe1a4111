"""Typed access to the tables of a TOML file (puzzle.toml): every failure names the file and the dotted field."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.paths import display_path


class SpecError(PerflabError):
    """A puzzle.toml that does not follow the schema in docs/CONTRACTS.md."""


class Fields:
    """Typed access to one TOML table; every failure names the file and the dotted field."""

    def __init__(self, data: dict[str, Any], source: Path, prefix: str = ""):
        self.data, self.source, self.prefix = data, source, prefix

    def fail(self, name: str, what: str) -> SpecError:
        return SpecError(f"{display_path(self.source)}: field '{self.prefix}{name}' {what}")

    def reject_unknown(self, allowed: set[str]) -> None:
        for name in self.data:
            if name not in allowed:
                raise self.fail(name, f"is not a known field (known: {', '.join(sorted(allowed))})")

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ..., what: str = "") -> Any:
        if name not in self.data:
            if default is ...:
                raise self.fail(name, "is missing")
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python; a level of `true` is still a mistake.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self.fail(name, f"must be {what or _type_words(kinds)}")
        return value

    def text(self, name: str, default: Any = ...) -> str:
        value = self.get(name, str, default, "a string")
        if default is ... and not value.strip():
            raise self.fail(name, "must not be empty")
        return value

    def int_in(self, name: str, lo: int, hi: int, default: Any = ...) -> int:
        value = self.get(name, int, default, f"an int {lo}..{hi}")
        if not lo <= value <= hi:
            raise self.fail(name, f"must be an int {lo}..{hi}")
        return value

    def number(self, name: str, default: Any = ..., positive: bool = True) -> float | None:
        value = self.get(name, (int, float), default, "a number")
        if value is not None and positive and value <= 0:
            raise self.fail(name, "must be a number > 0")
        return None if value is None else float(value)

    def strings(self, name: str, allowed: Any = None) -> tuple[str, ...]:
        value = self.get(name, list, [], "a list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(f"{name}[{i}]", "must be a string")
            if allowed is not None and item not in allowed:
                raise self.fail(f"{name}[{i}]", f"{item!r} is not one of {_sample(allowed)}")
        return tuple(value)

    def table(self, name: str) -> Fields:
        return Fields(self.get(name, dict, {}, "a table"), self.source, f"{self.prefix}{name}.")


def _type_words(kinds: tuple[type, ...]) -> str:
    words = {str: "a string", int: "an int", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    return " or ".join(words.get(k, k.__name__) for k in kinds)


def _sample(allowed: Any) -> str:
    items = sorted(allowed)
    return ", ".join(items) if len(items) <= 8 else ", ".join(items[:8]) + ", ... (perflab taxonomy lists them all)"
