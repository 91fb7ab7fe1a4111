"""`perflab sql --out FILE`: a query's result written by perflab, through perflab.outputs (the query itself runs in
DuckDB's sandbox and can write nothing). The format follows the name: .csv (a header, then the rows), .json (the
perflab.sql/1 document, as --json prints it) or .parquet."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterable

from perflab.errors import PerflabError
from perflab.outputs import PathLike, atomic_path, check_output, write_output

FORMATS = {".csv": "csv", ".json": "json", ".parquet": "parquet"}


def output_format(out: PathLike) -> str:
    fmt = FORMATS.get(Path(out).suffix.lower())
    if fmt is None:
        raise PerflabError(f"--out {out}: give a file ending in .csv, .json or .parquet (the format follows the name)")
    return fmt


def check_result_output(out: PathLike, *, force: bool, inputs: Iterable[PathLike | None]) -> Path:
    """Before the query runs: a name perflab can write in that format, under the rule for outputs."""
    output_format(out)
    return check_output(out, force=force, inputs=inputs)


def csv_text(columns: list[str], rows: list) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buf.getvalue()


def write_result(out: PathLike, doc: dict[str, Any], *, force: bool, inputs: Iterable[PathLike | None]) -> Path:
    """Write the document's result whole to `out` (never over an input, an existing file only with force)."""
    inputs = list(inputs)
    fmt = output_format(out)
    if fmt == "csv":
        return write_output(out, csv_text(doc["columns"], doc["rows"]), force=force, inputs=inputs)
    if fmt == "json":
        return write_output(out, json.dumps(doc, default=str), force=force, inputs=inputs)
    with atomic_path(out, force=force, inputs=inputs) as tmp:
        _write_parquet(tmp, doc["columns"], doc.get("types"), doc["rows"], shown=out)
    return Path(out)


def _write_parquet(path: Path, columns: list[str], types: list[str] | None, rows: list, *, shown: PathLike) -> None:
    """The rows through a private DuckDB connection whose only statement is perflab's own COPY to `path`, each
    column cast back to the type the query gave it."""
    import duckdb
    import numpy as np

    table = {}
    for i in range(len(columns)):
        col = np.empty(len(rows), dtype=object)
        col[:] = [r[i] for r in rows]
        table[f"c{i}"] = col
    select = ", ".join(
        (f"CAST(c{i} AS {types[i]})" if types and types[i] not in ("NULL", '"NULL"') else f"c{i}")
        + " AS " + _quoted(name, '"') for i, name in enumerate(columns))
    con = duckdb.connect()
    try:
        con.execute(f"SET pandas_analyze_sample = {max(len(rows), 1)}")  # types from every value, not a sample
        con.register("result", table)
        con.execute(f"COPY (SELECT {select or '*'} FROM result) TO {_quoted(str(path), chr(39))} (FORMAT parquet)")
    except duckdb.Error as exc:
        raise PerflabError(f"cannot write {shown} as Parquet: {str(exc).splitlines()[0]} "
                           "(write .csv or .json instead)") from None
    finally:
        con.close()


def _quoted(text: str, quote: str) -> str:
    return quote + text.replace(quote, quote * 2) + quote
