"""Where perflab keeps user data (progress, ceilings, run history) and its cache."""
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


def workspace_dir() -> Path:
    """The learner's workspace: ./perflab-work, overridable with PERFLAB_WORK."""
    return Path(os.environ.get("PERFLAB_WORK", "perflab-work"))


def cache_dir(sub: str) -> Path:
    """A folder of perflab's cache (what can be made again): $PERFLAB_CACHE, else the platform's cache dir."""
    override = os.environ.get("PERFLAB_CACHE")
    if override:
        base = Path(override)
    else:
        import platformdirs

        base = Path(platformdirs.user_cache_dir("perflab", appauthor=False))
    path = base / sub
    path.mkdir(parents=True, exist_ok=True)
    return path
