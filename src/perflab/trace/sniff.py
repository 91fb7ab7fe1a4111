"""Recognize an artifact by its content, not its name."""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import BinaryIO

from perflab.errors import UnreadableInput
from perflab.trace.input_files import is_gzip, open_binary, refuse_special  # noqa: F401 (their home before)

KINETO, KINETO_DIR, NCU, NCU_CSV, MEMORY, UNKNOWN = "kineto", "kineto-dir", "ncu", "ncu-csv", "memory", "unknown"
NSYS, NSYS_REP, SQLITE = "nsys", "nsys-rep", "sqlite"
SERVING = "serving"   # a served request stream: perflab's engine log, vLLM's or SGLang's serving benchmark result
_SERVING_KEYS = (b'"token_forwards"', b'"perflab.serving/', b'"ttfts"', b'"median_ttft_ms"', b'"mean_ttft_ms"')
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

_PEEK = 1 << 20


def peek(path: Path, size: int = _PEEK) -> bytes:
    """The first `size` bytes of the (decompressed) content."""
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                    return _read_some(gz, size)
            return raw.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise UnreadableInput(f"{path}: cannot read it ({exc}); is the file complete?") from None


def _read_some(fh: BinaryIO, size: int) -> bytes:
    out = b""
    try:
        while len(out) < size:  # small reads: a truncated gzip still gives what precedes the cut
            chunk = fh.read(min(size - len(out), 1 << 12))
            if not chunk:
                break
            out += chunk
    except EOFError:  # truncated gzip: what we have is enough to recognize the kind
        pass
    return out


def sniff(path: str | Path) -> str:
    path = Path(path)
    if path.is_dir():
        return KINETO_DIR
    if not path.exists():
        raise UnreadableInput(f"{path}: no such file or folder")
    refuse_special(path)
    with open(path, "rb") as raw:
        magic = raw.read(4)
    if not magic:
        raise UnreadableInput(f"{path}: the file is empty")
    if magic.startswith(b"NVR\x00") or magic.startswith(b"PK\x03\x04"):
        return NCU
    if magic == b"SQLi":
        from perflab.trace.nsys import is_export

        return NSYS if is_export(path) else SQLITE
    if path.suffix.lower() in NSYS_REPORT_SUFFIXES:  # Nsight Systems' own format: `nsys export` reads it
        return NSYS_REP
    head = peek(path)
    if head.startswith(b"NVR\x00"):  # a gzipped .ncu-rep
        return NCU
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):  # pickle protocol 2-5:
        return MEMORY                                                                # torch's _dump_snapshot
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        if b'"traceEvents"' in head:
            return KINETO
        if b'"segments"' in head and (b'"device_traces"' in head or b'"allocator_settings"' in head):
            return MEMORY
        if any(key in head for key in _SERVING_KEYS):
            return SERVING
        return KINETO  # the Kineto reader explains what is missing
    if _looks_like_ncu_csv(text):
        return NCU_CSV
    from perflab.trace import ncu  # the raw-page export (one row per kernel), gzipped or not

    if ncu.sniff(path) == "csv":
        return NCU_CSV
    return UNKNOWN


def _looks_like_ncu_csv(text: bytes) -> bool:
    """The details-page export: one row per metric."""
    for line in text.splitlines()[:50]:
        if line.startswith(b"==") or not line.strip():
            continue  # ncu prints ==PROF== lines before the table
        return b"Kernel Name" in line and (b"Metric Name" in line or b"Metric Value" in line)
    return False
