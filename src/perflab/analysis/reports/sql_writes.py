"""The statements of a `perflab sql` query that write files, held to the rule every perflab output follows.

DuckDB's `COPY ... TO 'file'` and `EXPORT DATABASE 'folder'` write wherever they are told. Here each such
statement's target goes through perflab.outputs: an existing file only with force, never the input, never
a device, FIFO or socket, written whole into a temporary path beside it and renamed over it. `ATTACH` (which
creates or changes a database file) is refused. Everything else runs as written.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from perflab.errors import PerflabError
from perflab.outputs import PathLike, atomic_path, check_output, refuse_not_regular, write_error

# COPY options that make DuckDB write a folder of files rather than one file
_FOLDER_OPTIONS = re.compile(r"\b(PARTITION_BY|PER_THREAD_OUTPUT|FILE_SIZE_BYTES)\b", re.IGNORECASE)


@dataclass
class Target:
    """Where one statement writes: the path literal's span in the statement's text."""

    path: Path
    start: int  # of the quoted literal, quotes included
    end: int
    folder: bool

    def rewrite(self, text: str, to: Path) -> str:
        return text[:self.start] + "'" + str(to).replace("'", "''") + "'" + text[self.end:]


def _tokens(text: str) -> Iterable[tuple[str, int, int, int]]:
    """(token, start, end, paren depth) for the words and string literals of one statement."""
    depth, i = 0, 0
    while i < len(text):
        c = text[i]
        if c == "'":
            j = i + 1
            while j < len(text):
                if text[j] == "'" and text[j + 1:j + 2] == "'":
                    j += 2
                elif text[j] == "'":
                    break
                else:
                    j += 1
            yield text[i:j + 1], i, j + 1, depth
            i = j + 1
        elif c == '"':
            j = text.find('"', i + 1)
            i = len(text) if j < 0 else j + 1
        elif c == "-" and text[i:i + 2] == "--":
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
        elif c == "(":
            depth, i = depth + 1, i + 1
        elif c == ")":
            depth, i = depth - 1, i + 1
        elif c.isalpha() or c == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            yield text[i:j], i, j, depth
            i = j
        else:
            i += 1


def _literal(token: str) -> str | None:
    return token[1:-1].replace("''", "'") if len(token) >= 2 and token[0] == token[-1] == "'" else None


def copy_target(text: str) -> Target | None:
    """The file (or folder) a `COPY ... TO 'x'` writes; None for `COPY ... FROM` (a read)."""
    toks = [t for t in _tokens(text) if t[3] == 0]
    for k, (tok, *_rest) in enumerate(toks):
        if tok.upper() == "FROM":
            return None
        if tok.upper() == "TO":
            path = _literal(toks[k + 1][0]) if k + 1 < len(toks) else None
            if path is None:
                raise PerflabError("COPY ... TO: write the target as a quoted path, e.g. COPY (SELECT ...) TO "
                                   "'kernels.csv'")
            return Target(Path(path), toks[k + 1][1], toks[k + 1][2], bool(_FOLDER_OPTIONS.search(text)))
    return None


def export_target(text: str) -> Target:
    """The folder `EXPORT DATABASE ['name' TO] 'folder'` writes."""
    literals = [t for t in _tokens(text) if t[3] == 0 and _literal(t[0]) is not None]
    toks = [t[0].upper() for t in _tokens(text) if t[3] == 0]
    if not literals:
        raise PerflabError("EXPORT DATABASE: write the folder as a quoted path, e.g. EXPORT DATABASE 'dump'")
    # EXPORT DATABASE db TO 'folder': the literal after TO; EXPORT DATABASE 'folder': the only one
    lit = literals[-1] if "TO" in toks else literals[0]
    return Target(Path(_literal(lit[0])), lit[1], lit[2], True)


class _Writes:
    """Runs the statements of one query against `execute`, each write through a temporary path."""

    def __init__(self, execute, *, force: bool, inputs: list[PathLike]) -> None:
        self.execute, self.force, self.inputs = execute, force, inputs
        self.written: list[Path] = []

    def file(self, text: str, target: Target):
        with atomic_path(target.path, force=self.force, inputs=self.inputs) as tmp:
            result = self._run(text, target, tmp)
        self.written.append(target.path)
        return result

    def folder(self, text: str, target: Target):
        out = target.path
        refuse_not_regular(out)
        if out.exists() and not out.is_dir():
            raise PerflabError(f"{out} is a file: this statement writes a folder; give a new or empty folder")
        if any(Path(src).resolve() == out.resolve() for src in self.inputs):
            raise PerflabError(f"{out} is this command's input: perflab never writes into it; choose another folder")
        try:
            out.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=out, prefix=".perflab-"))
        except OSError as exc:
            raise write_error(out, exc) from None
        try:
            result = self._run(text, target, tmp)
            made = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if p.is_file())
            for rel in made:  # refuse before moving anything, so a refusal leaves the folder as it was
                check_output(out / rel, force=self.force, inputs=self.inputs)
            for rel in made:
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp / rel, out / rel)
        except OSError as exc:
            raise write_error(out, exc) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.written.append(out)
        return result

    def _run(self, text: str, target: Target, tmp: Path):
        try:
            return self.execute(target.rewrite(text, tmp))
        except PerflabError as exc:  # the temporary path is ours: name the user's
            raise PerflabError(str(exc).replace(str(tmp), str(target.path))) from None


def run_statements(statements: list[tuple[str, str]], execute, *, force: bool = False,
                   inputs: Iterable[PathLike | None] = ()):
    """Run (kind, text) statements in order through `execute(text)`; returns the last one's result and the
    paths written. kind is DuckDB's statement type name (COPY, EXPORT, ATTACH, SELECT, ...)."""
    writes = _Writes(execute, force=force, inputs=[p for p in inputs if p is not None])
    result = None
    for kind, text in statements:
        if kind == "ATTACH":
            raise PerflabError("perflab sql does not ATTACH databases (that creates or changes a file); "
                               "COPY (SELECT ...) TO 'file.parquet' writes a result")
        target = copy_target(text) if kind == "COPY" else export_target(text) if kind == "EXPORT" else None
        if target is None:
            result = execute(text)
        elif target.folder:
            result = writes.folder(text, target)
        else:
            result = writes.file(text, target)
    return result, writes.written
