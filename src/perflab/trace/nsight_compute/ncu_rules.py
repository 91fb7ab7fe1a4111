"""Nsight Compute's own guided analysis (its rules: "Small Grid", "Long Scoreboard Stalls", ...) as the
report carries it, read through `ncu_report`'s `IAction.rule_results_as_dicts()` into plain dicts.

A rule result becomes {"rule", "name", "section", "title", "kind", "message", "speedup_pct",
"speedup_scope", "focus_metrics"}: `kind` is ncu's message type (ok, optimization, warning, error, none),
`speedup_pct` ncu's estimated speed-up (`speedup_scope` global: of the whole kernel; local: of the part
the rule looks at). The message is text from a file: its @section/@url markup is reduced to the words
and control characters are dropped. The CSV raw page carries no rule results.
"""
from __future__ import annotations

import re
from typing import Any

KINDS = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}
SCOPES = {0: None, 1: "local", 2: "global"}
_MARKUP = re.compile(r"@(\w+):([^@]*)@")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _words(m: re.Match) -> str:
    kind, body = m.group(1), m.group(2)
    if kind == "section":
        return body.split(":", 1)[-1]
    if kind == "url":
        return re.split(r":(?=https?:)", body, maxsplit=1)[0]
    return "the source line" if kind == "source" else body.rsplit(":", 1)[-1]


def clean(text: Any) -> str:
    return _CONTROL.sub("", _MARKUP.sub(_words, str(text or ""))).strip()


def _number(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def normalize(d: dict) -> dict[str, Any]:
    msg = d.get("rule_message") or {}
    speed = d.get("speedup_estimation") or {}
    return {"rule": clean(d.get("rule_identifier")), "name": clean(d.get("name")),
            "section": clean(d.get("section_identifier")), "title": clean(msg.get("title")),
            "kind": KINDS.get(msg.get("type"), "none"), "message": clean(msg.get("message")),
            "speedup_pct": _number(speed.get("speedup")), "speedup_scope": SCOPES.get(speed.get("type")),
            "focus_metrics": [{"metric": clean(f.get("name")), "value": _number(f.get("value"))}
                              for f in d.get("focus_metrics") or [] if isinstance(f, dict)]}


def rule_results(action) -> list[dict[str, Any]]:
    """The action's rule results, normalized; [] when this ncu_report cannot give them."""
    try:
        raw = action.rule_results_as_dicts()
    except Exception:
        return []
    return [normalize(d) for d in raw or [] if isinstance(d, dict) and (d.get("rule_message") or {}).get("message")]
