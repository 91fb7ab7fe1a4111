"""What a recording's traces say, cached beside the user's data (perflab.paths.cache_dir("evidence")): an evidence
summary or a question's computed value, keyed by the content hash of the recorded files it was computed from and
perflab's code (code_stamp: its version and every module's size and time). Reading a trace and analysing it is most of `perflab run ID --replay` and `perflab answer ID`;
the recording does not change under them, so each is done once per recording and version. A value is cached only
when it comes back from JSON equal to itself (plain numbers, strings, lists and dicts); anything else is recomputed
every time. An unreadable or unwritable cache costs time, never a result."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

_CHUNK = 1 << 20


def content_key(*paths: Path) -> str:
    """The hash of the files' content (a folder: every file below it, by relative path); stat never decides."""
    h = hashlib.blake2b(digest_size=20)
    for path in paths:
        path = Path(path)
        files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
        for f in files:
            h.update(f"{f.relative_to(path).as_posix() if path.is_dir() else f.name}\0".encode())
            with open(f, "rb") as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()


def machine_files(paths: list[Path]) -> list[Path]:
    """The measured ceilings and collective sweeps a diagnosis also reads: beside a recording (its folder and the
    folder above) and in the user data dir (analysis/work/saved_ceilings.py). Measuring new ones changes the key."""
    from perflab.analysis.work.saved_ceilings import CEILINGS_FILE, SWEEP_FILES
    from perflab.paths import user_data_dir

    folders: list[Path] = []
    for p in map(Path, paths):
        folders += [p, p.parent, p.parent.parent] if p.is_dir() else [p.parent, p.parent.parent]
    folders.append(user_data_dir())
    found = {(f / n).resolve() for f in folders for n in (*SWEEP_FILES, CEILINGS_FILE) if (f / n).is_file()}
    return sorted(found)


def _entry(key: str) -> Path:
    from perflab.paths import cache_dir

    return cache_dir("evidence") / key[:2] / f"{key}.json"


def _key(what: str, content: str) -> str:
    from perflab.code_stamp import code_stamp

    return hashlib.blake2b(f"{what}|{content}|{code_stamp()}".encode(), digest_size=20).hexdigest()


def _round_trips(value: Any) -> bool:
    try:
        back = json.loads(json.dumps(value, allow_nan=True))
    except (TypeError, ValueError):
        return False
    return _same(back, value)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (a tuple or a numpy scalar does not come back as itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def cached(what: str, paths: list[Path], make: Callable[[], Any]) -> Any:
    """`make()`, or what it returned before for the same `what`, the same content of `paths` and this perflab."""
    try:
        context = machine_files(paths)
        entry = _entry(_key(what, content_key(*paths) + "|" + content_key(*context) + "|" + "|".join(map(str, context))))
    except OSError:
        return make()
    with contextlib.suppress(OSError, ValueError, KeyError):
        return json.loads(entry.read_bytes())["value"]
    value = make()
    if _round_trips(value):
        with contextlib.suppress(OSError):
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump({"what": what, "value": value}, fh, allow_nan=True)
                os.replace(tmp, entry)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    return value
