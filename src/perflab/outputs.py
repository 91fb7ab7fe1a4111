"""May I write here? The one check every command that writes a file goes through.

- An existing file is replaced only with `force` (the CLI's --force).
- A command's own input is never written over, not even with `force`: the same path, a symlink to
  it or a hard link of it (same device and inode), or a file inside an input folder.
- Only a regular file or a new path is written: a device, FIFO or socket (or a symlink to one) is
  refused, `force` or not; replacing it would destroy what the user's path stood for.
- A destination that cannot take the file (read-only, full, no permission) is a PerflabError naming the
  path the user gave, never the hidden temporary file.
- Files are written whole (a temporary file in the same folder, then renamed over the target), so a
  reader never sees half a file and a failed write leaves the old one as it was.
- Commands that produce many files (a profile, a scaling sweep) write each run into a new folder
  (`new_folder`), so the run before stays.
- A symlink is neither written through nor replaced (`force` or not): the user gives the real path.
- The folder an output goes in must exist (a typo in it is one line, not a new tree of folders); only
  perflab's own places (its workspace, its user data) are made as needed (`make_parents=True`). A folder a
  command fills (`check_folder`) is made and tried before the work starts.

    out = check_output(args.out, force=args.force, inputs=[args.src])   # before the work
    write_output(out, data, force=args.force, inputs=[args.src])        # after it
    with atomic_path(out, force=..., inputs=...) as tmp: fig.savefig(tmp)
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
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


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def not_regular(path: PathLike) -> str | None:
    """What `path` is when it exists and is neither a regular file nor a folder ("a FIFO", "a symlink to a
    character device"); None for a file, a folder, a dangling symlink or a new path."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode  # follows symlinks: a link to /dev/full is a device to us
    except OSError:
        return None
    for test, name in _KINDS:
        if test(mode):
            return f"a symlink to {name}" if path.is_symlink() else name
    return None


def refuse_not_regular(path: PathLike) -> None:
    kind = not_regular(path)
    if kind is not None:
        raise PerflabError(f"{path} is {kind}, not a regular file: perflab writes only to regular files or new "
                           "paths, --force or not; choose another name")


def write_error(out: PathLike, exc: OSError) -> PerflabError:
    """A failed write as one line about the user's path (the temporary file beside it is ours, not theirs)."""
    why = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why += " (the disk is full)"
    return PerflabError(f"cannot write {out}: {why}")


def refuse_symlink(out: Path) -> None:
    if out.is_symlink():
        target = os.readlink(out)
        state = "" if out.exists() else ", which does not exist"
        raise PerflabError(f"{out} is a symbolic link to {target}{state}: perflab neither writes through a link nor "
                           "replaces it, --force or not; give the real path")


def check_parent(out: Path, *, make_parents: bool = False) -> None:
    """The folder `out` goes in exists (or, with make_parents, the nearest existing one above it is a folder)."""
    parent = out.parent
    while make_parents and not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if parent.is_dir():
        return
    if os.path.lexists(parent):
        raise PerflabError(f"cannot write {out}: {parent} is not a folder")
    raise PerflabError(f"cannot write {out}: the folder {parent} does not exist; create it first "
                       f"(mkdir -p {parent}) or choose another path")


def check_output(out: PathLike, *, force: bool = False, inputs: Iterable[PathLike | None] = (),
                 make_parents: bool = False) -> Path:
    """Refuse a target that is a folder, one of the inputs, a symlink, in a folder that does not exist, or
    (unless force) an existing file. Call it before the work starts, so a refusal costs nothing."""
    out = Path(out)
    for src in inputs:
        if src is not None and _overwrites_input(out, Path(src)):
            raise PerflabError(f"{out} is this command's input ({src}): perflab never writes over its input; "
                               "choose another output name")
    refuse_not_regular(out)
    refuse_symlink(out)
    if out.is_dir():
        raise PerflabError(f"{out} is a folder: give a file name, e.g. {out / ('report' + (out.suffix or '.html'))}")
    check_parent(out, make_parents=make_parents)
    if _existing(out) and not force:
        raise PerflabError(f"{out} exists: pass --force to overwrite it, or choose another name")
    if out.parent.is_dir():
        check_writable(out.parent, out)
    return out


@contextlib.contextmanager
def atomic_path(out: PathLike, *, force: bool = False, inputs: Iterable[PathLike | None] = (),
                make_parents: bool = False) -> Iterator[Path]:
    """A temporary path beside `out` (same suffix, so writers that go by it still can); renamed over
    `out` when the block ends without an error, removed otherwise."""
    inputs = list(inputs)
    out = check_output(out, force=force, inputs=inputs, make_parents=make_parents)
    try:
        if make_parents:
            out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".perflab-", suffix="-" + out.name)
        os.close(fd)
    except OSError as exc:
        raise write_error(out, exc) from None
    try:
        yield Path(tmp)
        check_output(out, force=force, inputs=inputs)  # the world may have changed during the work
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the output is an ordinary file
        os.replace(tmp, out)
    except OSError as exc:
        if exc.filename not in (tmp, str(out)) and exc.errno not in _WRITE_ERRNOS:
            raise  # not about writing the output (a writer reading something of its own): not ours to name
        raise write_error(out, exc) from None
    finally:
        with contextlib.suppress(OSError):
            Path(tmp).unlink(missing_ok=True)


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO}


def write_output(out: PathLike, data: str | bytes, *, force: bool = False,
                 inputs: Iterable[PathLike | None] = (), make_parents: bool = False) -> Path:
    """Write a whole file at once (its folder made first only with make_parents: perflab's own places)."""
    raw = data.encode() if isinstance(data, str) else data
    with atomic_path(out, force=force, inputs=inputs, make_parents=make_parents) as tmp:
        tmp.write_bytes(raw)
    return Path(out)


def check_folder(out: PathLike, *, force: bool = False, holds: Iterable[str] = ()) -> Path:
    """A folder a command fills: refused when it already holds any of the `holds` globs, unless force; made (its
    parent must exist) and tried with a file before the work starts, so an unusable one costs nothing."""
    out = Path(out)
    if not out.is_dir():  # a link to a folder is a folder to fill; a link to a file or to nothing is refused
        refuse_symlink(out)
    if out.exists() and not out.is_dir():
        raise PerflabError(f"{out} is a file: give a folder for the output")
    if not out.exists():
        check_parent(out)
    found = sorted({p.name for pattern in holds for p in out.glob(pattern)}) if out.is_dir() else []
    for name in found:  # what a run replaces must be files, not a FIFO or device someone left there
        refuse_not_regular(out / name)
    if found and not force:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise PerflabError(f"{out} already holds {shown} from an earlier run: pass --force to replace them, "
                           "or leave out --out to get a new folder")
    try_folder(out)
    return out


def check_writable(folder: Path, shown: PathLike) -> None:
    """A folder this process may create files in (asked of the system, nothing written): a read-only file
    system or a folder without write permission is one line about the user's path before the work."""
    if os.access(folder, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    raise write_error(shown, OSError(errno.EROFS if read_only else errno.EACCES,
                                     "Read-only file system" if read_only else "Permission denied"))


def try_folder(out: Path) -> None:
    """Make `out` if needed, now, and check that files can be made in it: a read-only or forbidden place is one
    line before the work, not after it."""
    if not out.exists():
        check_writable(out.parent, out)
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise write_error(out, exc) from None
    check_writable(out, out)


def new_folder(parent: PathLike, suffix: str = "", now: float | None = None) -> Path:
    """parent/<YYYYmmdd-HHMMSS>[.NNN][-suffix]/, made here: a counter keeps runs of the same second
    apart, so the names sort by time and no run lands in another's folder."""
    parent = Path(parent)
    check_parent(parent / "run", make_parents=True)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(parent, exc) from None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    tail = f"-{suffix}" if suffix else ""
    for n in range(1000):
        prefix = stamp if n == 0 else f"{stamp}.{n:03d}"
        if any(p.name == prefix or p.name.startswith(prefix + "-") for p in parent.iterdir()):
            continue
        try:
            (path := parent / f"{prefix}{tail}").mkdir()
        except FileExistsError:  # another perflab took it a moment ago
            continue
        except OSError as exc:
            raise write_error(parent, exc) from None
        try_folder(path)
        return path
    raise PerflabError(f"cannot make a new folder under {parent}")
