"""Where perflab keeps user data (progress, ceilings, run history)."""
from __future__ import annotations

import os
from pathlib import Path


def user_data_dir() -> Path:
    """The platform's user data dir, overridable with PERFLAB_HOME (tests use it)."""
    override = os.environ.get("PERFLAB_HOME")
    if override:
        path = Path(override)
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir("perflab", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir(name: str) -> Path:
    """A folder of perflab's cache ($PERFLAB_CACHE, else the platform's user cache dir): things it can remake."""
    override = os.environ.get("PERFLAB_CACHE")
    if override:
        base = Path(override)
    else:
        import platformdirs

        base = Path(platformdirs.user_cache_dir("perflab", appauthor=False))
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def workspace_dir() -> Path:
    """The learner's workspace: ./perflab-work, overridable with PERFLAB_WORK."""
    return Path(os.environ.get("PERFLAB_WORK", "perflab-work"))


def child_env(**extra: str) -> dict[str, str]:
    """os.environ for a child Python process that must import this perflab (the tree the caller runs), ahead
    of any installed copy, plus `extra`."""
    import perflab

    src = str(Path(perflab.__file__).resolve().parent.parent)
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def display_path(path: Path) -> str:
    """Relative to the working directory when below it (shorter error lines)."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    except ValueError:
        return str(path)
