"""Where the ceilings `perflab bench` measured are kept, and reading them back: the user data dir's
ceilings.json (schema perflab.ceilings/1), or one saved beside a trace (a recording's folder)."""
from __future__ import annotations

import json
from pathlib import Path

from perflab.errors import PerflabError

SCHEMA = "perflab.ceilings/1"
CEILINGS_FILE = "ceilings.json"


def ceilings_path() -> Path:
    from perflab.paths import user_data_dir

    return user_data_dir() / CEILINGS_FILE


def save_ceilings(data: dict, path: Path | None = None) -> Path:
    from perflab.outputs import write_output

    return write_output(path or ceilings_path(), json.dumps(data, indent=2, sort_keys=False), force=True,
                        make_parents=path is None)  # the user data dir is perflab's own; a --out path is checked


def load_ceilings(path: Path | None = None) -> dict | None:
    """The saved ceilings, or None when none were measured; a corrupt file is an error."""
    path = path or ceilings_path()
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PerflabError(f"{path} is not a readable ceilings file ({exc}); rerun `perflab bench`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("results"), dict):
        raise PerflabError(f"{path} is not a perflab ceilings file (schema {SCHEMA}); rerun `perflab bench`")
    return data


def measured_beside(trace_path: str | None) -> dict | None:
    """The ceilings saved beside a trace (a recording's folder), else the ones this machine saved; None when
    there are none or they cannot be read (a broken file must not break a diagnosis)."""
    beside = Path(trace_path).parent / CEILINGS_FILE if trace_path else None
    try:
        return load_ceilings(beside if beside is not None and beside.is_file() else None)
    except PerflabError:
        return None


# -- the interconnect: bus-bandwidth sweeps of collectives (perflab bench --collectives / --allreduce) ------------
SWEEP_FILES = ("collectives.json", "allreduce.json")
COLLECTIVES_SCHEMA = "perflab.collectives/1"
ALLREDUCE_SCHEMA = "perflab.allreduce/1"


def sweeps_of(doc: dict, path: str = "") -> list[dict]:
    """The sweeps one saved document holds, each {kind, world_size, gpu, date, rows: [(bytes, busbw GB/s)], path}:
    a perflab.collectives/1 file (one sweep per kind), a perflab.allreduce/1 file, or a ceilings file whose
    allreduce_busbw result kept its rows. Anything else holds none."""
    if not isinstance(doc, dict):
        return []
    man = doc.get("manifest") if isinstance(doc.get("manifest"), dict) else {}
    if doc.get("schema") == COLLECTIVES_SCHEMA and isinstance(doc.get("sweeps"), dict):
        parts = [(kind, s, s.get("world_size") or doc.get("world_size")) for kind, s in doc["sweeps"].items()]
    elif doc.get("schema") == ALLREDUCE_SCHEMA:
        parts = [("all_reduce", doc, doc.get("world_size"))]
    elif doc.get("schema") == SCHEMA and isinstance((doc.get("results") or {}).get("allreduce_busbw"), dict):
        res = doc["results"]["allreduce_busbw"]
        parts = [("all_reduce", res, res.get("world_size"))]
    else:
        return []
    out = []
    for kind, sweep, world in parts:
        rows = sorted((float(r["bytes"]), float(r["busbw_gbps"])) for r in (sweep.get("rows") or [])
                      if isinstance(r, dict) and isinstance(r.get("bytes"), (int, float))
                      and isinstance(r.get("busbw_gbps"), (int, float)) and r["bytes"] > 0)
        if rows and isinstance(world, int) and world > 1:
            out.append({"kind": kind, "world_size": world, "gpu": str(man.get("gpu") or ""),
                        "date": str(man.get("date") or "")[:10], "rows": rows, "path": path})
    return out


def saved_sweeps(trace_path: str | None) -> list[dict]:
    """Every collective sweep saved beside a trace (its folder or the folder above: a recording) and in the user
    data dir; unreadable files are skipped (a broken file must not break a diagnosis)."""
    from perflab.paths import user_data_dir

    folders = []
    if trace_path:
        here = Path(trace_path).parent
        folders += [here, here.parent]
    folders.append(user_data_dir())
    out, seen = [], set()
    for folder in folders:
        for name in (*SWEEP_FILES, CEILINGS_FILE):
            path = folder / name
            try:
                key = path.resolve()
                if key in seen or not path.is_file():
                    continue
                seen.add(key)
                out += sweeps_of(json.loads(path.read_text()), str(path))
            except (OSError, ValueError):
                continue
    return out
