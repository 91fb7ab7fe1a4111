"""A cheap stamp of perflab's own code, for caches of computed results: the name, size and modification time of
every module (stat only, no read), so a source checkout whose analysis code changed never reads results the old
code computed, while an installed perflab keeps its cache across runs."""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache


@lru_cache(maxsize=1)
def code_stamp() -> str:
    import perflab

    root = os.path.dirname(os.path.abspath(perflab.__file__))
    h = hashlib.blake2b(perflab.__version__.encode(), digest_size=12)
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("catalog", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                h.update(f"{os.path.relpath(folder, root)}/{name}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()
