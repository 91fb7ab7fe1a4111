"""May I write here? The one check every command that writes a file goes through.

- An existing file is replaced only with `force` (the CLI's --force).
- A command's own input is never written over, not even with `force`: the same path, a symlink to
  it or a hard link of it (same device and inode), or a file inside an input folder.
- Files are written whole (a temporary file in the same folder, then renamed over the target), so a
  reader never sees half a file and a failed write leaves the old one as it was.
- Commands that produce many files (a profile, a scaling sweep) write each run into a new folder
  (`new_folder`), so the run before stays.

    out = check_output(args.out, force=args.force, inputs=[args.src])   # before the work
    write_output(out, data, force=args.force, inputs=[args.src])        # after it
    with atomic_path(out, force=..., inputs=...) as tmp: fig.savefig(tmp)
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator

from perflab.errors import PerflabError

PathLike = str | os.PathLike


def _existing(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def is_same_file(a: PathLike, b: PathLike) -> bool:
    """Same file on disk (paths, symlinks or hard links: st_dev and st_ino); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _overwrites_input(out: Path, src: Path) -> bool:
    if is_same_file(out, src):
        return True
    if src.is_dir() and out.exists():
        try:
            return out.resolve().parent == src.resolve()
        except OSError:
            return False
    return False


def check_output(out: PathLike, *, force: bool = False, inputs: Iterable[PathLike | None] = ()) -> Path:
    """Refuse a target that is a folder, one of the inputs, or (unless force) an existing file. Call it
    before the work starts, so a refusal costs nothing."""
    out = Path(out)
    for src in inputs:
        if src is not None and _overwrites_input(out, Path(src)):
            raise PerflabError(f"{out} is this command's input ({src}): perflab never writes over its input; "
                               "choose another output name")
    if out.is_dir():
        raise PerflabError(f"{out} is a folder: give a file name, e.g. {out / ('report' + (out.suffix or '.html'))}")
    if _existing(out) and not force:
        raise PerflabError(f"{out} exists: pass --force to overwrite it, or choose another name")
    return out


@contextlib.contextmanager
def atomic_path(out: PathLike, *, force: bool = False, inputs: Iterable[PathLike | None] = ()) -> Iterator[Path]:
    """A temporary path beside `out` (same suffix, so writers that go by it still can); renamed over
    `out` when the block ends without an error, removed otherwise."""
    inputs = list(inputs)
    out = check_output(out, force=force, inputs=inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".perflab-", suffix="-" + out.name)
    os.close(fd)
    try:
        yield Path(tmp)
        check_output(out, force=force, inputs=inputs)  # the world may have changed during the work
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the output is an ordinary file
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_output(out: PathLike, data: str | bytes, *, force: bool = False,
                 inputs: Iterable[PathLike | None] = ()) -> Path:
    """Write a whole file at once; folders are made as needed."""
    raw = data.encode() if isinstance(data, str) else data
    with atomic_path(out, force=force, inputs=inputs) as tmp:
        tmp.write_bytes(raw)
    return Path(out)


def check_folder(out: PathLike, *, force: bool = False, holds: Iterable[str] = ()) -> Path:
    """A folder a command fills: refused when it already holds any of the `holds` globs, unless force."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PerflabError(f"{out} is a file: give a folder for the output")
    found = sorted({p.name for pattern in holds for p in out.glob(pattern)}) if out.is_dir() else []
    if found and not force:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise PerflabError(f"{out} already holds {shown} from an earlier run: pass --force to replace them, "
                           "or leave out --out to get a new folder")
    return out


def new_folder(parent: PathLike, suffix: str = "", now: float | None = None) -> Path:
    """parent/<YYYYmmdd-HHMMSS>[.NNN][-suffix]/, made here: a counter keeps runs of the same second
    apart, so the names sort by time and no run lands in another's folder."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    tail = f"-{suffix}" if suffix else ""
    for n in range(1000):
        prefix = stamp if n == 0 else f"{stamp}.{n:03d}"
        if any(p.name == prefix or p.name.startswith(prefix + "-") for p in parent.iterdir()):
            continue
        try:
            (path := parent / f"{prefix}{tail}").mkdir()
            return path
        except FileExistsError:  # another perflab took it a moment ago
            continue
    raise PerflabError(f"cannot make a new folder under {parent}")
