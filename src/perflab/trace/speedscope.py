"""Sampled CPU profiles: py-spy's speedscope JSON (`py-spy record --format speedscope`) or its raw
collapsed stacks (`--format raw`: one `frame;frame;...;frame COUNT` line per distinct stack).

    prof = load("slow.pyspy.json.gz")        # gzip or not, recognized by content
    prof.threads[0].stacks[0]                 # frame indices, outermost first
    prof.frames[i].label()                    # "workload.py:hash_ids"

Untrusted input is data: JSON or text only, every field checked; a malformed file raises
UnreadableInput with one line.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from perflab.errors import UnreadableInput
from perflab.trace.read_limits import json_depth
from perflab.trace.sniff import open_binary

_RAW_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True)
class Frame:
    name: str
    file: str = ""
    line: int = 0

    def label(self) -> str:
        """file.py:function (the file's base name; the function alone when no file is known)."""
        base = os.path.basename(self.file.replace("\\", "/")) if self.file else ""
        return f"{base}:{self.name}" if base else self.name


@dataclass
class Thread:
    name: str
    stacks: list[tuple[int, ...]] = field(default_factory=list)   # frame indices, outermost first
    weights: list[float] = field(default_factory=list)            # one per stack (samples or seconds)
    unit: str = "samples"


@dataclass
class SampledProfile:
    frames: list[Frame]
    threads: list[Thread]
    meta: dict = field(default_factory=dict)


def load(path: str | Path) -> SampledProfile:
    path = Path(path)
    try:
        with open_binary(path) as fh:
            data = fh.read()
    except OSError as exc:
        raise UnreadableInput(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableInput(f"{path}: not a sampled profile (not UTF-8 text)") from None
    with json_depth(path):
        prof = parse_speedscope(text, path) if text.lstrip().startswith("{") else parse_raw(text, path)
    prof.meta["path"] = str(path)
    return prof


def _bad(path: Path, what: str) -> UnreadableInput:
    return UnreadableInput(f"{path}: not a py-spy/speedscope profile ({what})")


def parse_speedscope(text: str, path: Path = Path("<profile>")) -> SampledProfile:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise _bad(path, f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("shared"), dict) or not isinstance(doc.get("profiles"), list):
        raise _bad(path, "no shared.frames / profiles")
    raw_frames = doc["shared"].get("frames")
    if not isinstance(raw_frames, list):
        raise _bad(path, "shared.frames is not a list")
    frames = []
    for f in raw_frames:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise _bad(path, "a frame without a name")
        line = f.get("line")
        frames.append(Frame(f["name"], str(f.get("file") or ""), int(line) if isinstance(line, int) else 0))
    threads = []
    for p in doc["profiles"]:
        if not isinstance(p, dict) or p.get("type") != "sampled":
            continue  # evented profiles are not what py-spy writes
        samples, weights = p.get("samples"), p.get("weights")
        if not isinstance(samples, list) or not isinstance(weights, list) or len(samples) != len(weights):
            raise _bad(path, "a sampled profile needs samples and weights of the same length")
        stacks = []
        for s in samples:
            if not isinstance(s, list) or not all(isinstance(i, int) and 0 <= i < len(frames) for i in s):
                raise _bad(path, "a sample refers to a frame that does not exist")
            stacks.append(tuple(s))
        if not all(isinstance(w, (int, float)) for w in weights):
            raise _bad(path, "a weight is not a number")
        threads.append(Thread(str(p.get("name", "")), stacks, [float(w) for w in weights], str(p.get("unit", ""))))
    return SampledProfile(frames, threads, {"format": "speedscope", "exporter": doc.get("exporter", "")})


def parse_raw(text: str, path: Path = Path("<profile>")) -> SampledProfile:
    """Collapsed stacks; py-spy puts the thread first (`process 1:"python ..."` / `thread (0x..)`)."""
    frames: list[Frame] = []
    index: dict[Frame, int] = {}
    by_thread: dict[str, Thread] = {}
    skipped = 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():  # a frame name with a line break in it splits its stack: skip
            skipped += 1
            continue
        parts = stack.split(";")
        thread = "main"
        if parts and (parts[0].startswith("process ") or parts[0].startswith("thread ")):
            thread = parts[0]
            parts = parts[1:]
            if parts and parts[0].startswith("thread "):
                thread = parts[0]
                parts = parts[1:]
        ids = []
        for part in parts:
            m = _RAW_FRAME.match(part)
            fr = Frame(m.group("name"), m.group("file"), int(m.group("line") or 0)) if m else Frame(part)
            if fr not in index:
                index[fr] = len(frames)
                frames.append(fr)
            ids.append(index[fr])
        t = by_thread.setdefault(thread, Thread(thread))
        t.stacks.append(tuple(ids))
        t.weights.append(float(count))
    if not by_thread:
        raise _bad(path, "no line of `frame;frame;... COUNT`")
    return SampledProfile(frames, list(by_thread.values()), {"format": "raw", "skipped_lines": skipped})
