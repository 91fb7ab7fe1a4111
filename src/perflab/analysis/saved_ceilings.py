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

    return write_output(path or ceilings_path(), json.dumps(data, indent=2, sort_keys=False), force=True)


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
