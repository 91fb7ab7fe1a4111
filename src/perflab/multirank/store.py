"""Where the ranks' files are and where their summaries are kept.

A folder is a local path or, where fsspec and its filesystem are installed, a URL (s3://, gs://, ...); a
worker reads a remote file through a local copy of it, one rank at a time. Summaries are cached under
perflab's cache (paths.cache_dir) keyed by the file's content: a local file is hashed once and the hash is
remembered for its (path, size, mtime, inode), so a second run reads only summaries; a remote object's key
is the checksum its store keeps (ETag, md5, crc32c) with its size. The key also holds the summary schema,
perflab's own code (so a new rule never reads an old summary) and the options that change a summary.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import orjson

from perflab.errors import UnreadableInput
from perflab.paths import cache_dir

_CHUNK = 4 << 20
_URL = "://"


def is_url(path: str) -> bool:
    return _URL in str(path) and not str(path).startswith("file://")


def list_folder(folder: str) -> list[str]:
    """The files of a folder (local path or URL), sorted, hidden ones left out."""
    if not is_url(folder):
        from perflab.trace.torch_profiler.kineto_folder import folder_files

        path = Path(folder.removeprefix("file://"))
        if not path.is_dir():
            raise UnreadableInput(f"{folder}: not a folder")
        return [str(p) for p in folder_files(path)]
    fs, root = _filesystem(folder)
    protocol = folder.split(_URL, 1)[0]
    names = sorted(fs.ls(root, detail=False))
    return [f"{protocol}{_URL}{n}" for n in names if not Path(n).name.startswith(".")]


def _filesystem(url: str):
    try:
        import fsspec
    except ImportError:
        raise UnreadableInput(f"{url}: reading URLs needs fsspec and its filesystem (pip install "
                              "'perflab[cluster]' and s3fs or gcsfs)") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise UnreadableInput(f"{url}: {exc}") from None


@contextlib.contextmanager
def local_copy(path: str):
    """The path itself, or for a URL a temporary local copy (removed afterwards)."""
    if not is_url(path):
        yield Path(path.removeprefix("file://"))
        return
    fs, remote = _filesystem(path)
    with tempfile.TemporaryDirectory(prefix="perflab-rank-") as tmp:
        local = Path(tmp) / Path(remote).name
        with fs.open(remote, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        yield local


def content_key(path: str) -> str:
    """A key of the file's content (see the module doc)."""
    if is_url(path):
        fs, remote = _filesystem(path)
        info = fs.info(remote)
        stamp = next((str(info[k]) for k in ("ETag", "etag", "md5Hash", "crc32c", "checksum") if info.get(k)), None)
        stamp = stamp or f"{info.get('mtime') or info.get('LastModified') or info.get('updated')}"
        return _digest(f"{path}|{info.get('size')}|{stamp}".encode())
    p = Path(path.removeprefix("file://"))
    index, stat_key, known = _indexed(p)
    if known:
        return known
    h = hashlib.blake2b(digest_size=20)
    with open(p, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    key = h.hexdigest()
    _write(index, orjson.dumps({"stat": stat_key, "content": key}))
    return key


def _indexed(p: Path) -> tuple[Path, str, str | None]:
    """(the path's index entry, its stat key, the content key the index holds for that stat or None)."""
    st = p.stat()
    stat_key = f"{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
    index = cache_dir("rank-summaries") / "by-path" / (_digest(str(p.resolve()).encode()) + ".json")
    with contextlib.suppress(OSError, ValueError, KeyError):
        seen = orjson.loads(index.read_bytes())
        if seen["stat"] == stat_key:
            return index, stat_key, seen["content"]
    return index, stat_key, None


def summary_cached(path: str, step: int | None) -> bool:
    """Whether a local file's summary is in the cache, known from its stat alone (never reads the file: the
    planner asks it of every file, in the client)."""
    if is_url(path):
        return False
    try:
        known = _indexed(Path(path.removeprefix("file://")))[2]
    except OSError:
        return False
    return known is not None and _entry(summary_key(known, step), "summary").is_file()


def summary_key(content: str, step: int | None) -> str:
    from perflab.multirank.summary import SCHEMA

    return _digest(f"{content}|{SCHEMA}|{code_fingerprint()}|step={step}".encode())


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """perflab's own source, hashed (a rank's report holds findings: a change of any rule must not read old ones)."""
    import perflab

    root = Path(perflab.__file__).resolve().parent
    h = hashlib.blake2b(digest_size=12)
    for f in sorted(root.rglob("*.py")):
        if "catalog" not in f.parts:
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def read_cached(key: str, what: str) -> dict | None:
    """A cached summary (what="summary") or rank report (what="report"), or None."""
    f = _entry(key, what)
    try:
        return orjson.loads(f.read_bytes())
    except (OSError, ValueError):
        return None


def write_cached(key: str, what: str, value: dict) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written costs the next run time, nothing else
        _write(_entry(key, what), orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY))


def _entry(key: str, what: str) -> Path:
    return cache_dir("rank-summaries") / key[:2] / f"{key}.{what}.json"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()
