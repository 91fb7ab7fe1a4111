"""Build hook: compile the reader's C scanner (src/perflab/trace/torch_profiler/native/kineto_scan.c).

Optional by design: without a C compiler or Python's headers the wheel is pure Python and the reader decodes
every block with msgspec (same results, slower). PERFLAB_NO_NATIVE=1 skips the compiler on purpose.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src/perflab/trace/torch_profiler/native/kineto_scan.c")
PACKAGE_DIR = "perflab/trace/torch_profiler"
MODULE = "_kineto_scan"


def compile_scanner(root: Path, out: Path) -> str | None:
    """Compile the scanner to `out`; the reason it could not be built, or None."""
    if sys.platform == "win32":
        return "no build recipe for Windows"
    include = sysconfig.get_paths().get("include")
    if not include or not (Path(include) / "Python.h").exists():
        return "Python's headers (Python.h) are not installed"
    linker = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    cmd = [*linker, "-O2", "-fPIC", "-I", include, str(root / SOURCE), "-o", str(out)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cmd[0]}: {exc}"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return None


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or os.environ.get("PERFLAB_NO_NATIVE") == "1":
            return
        root = Path(self.root)
        name = MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        if version == "editable":   # the editable install imports from src/: build the module in place
            out = root / "src" / PACKAGE_DIR / name
        else:
            out = Path(tempfile.mkdtemp(prefix="perflab-build-")) / name
        why = compile_scanner(root, out)
        if why is not None:
            sys.stderr.write(f"perflab: the C trace scanner was not built ({why}); the reader uses msgspec alone\n")
            return
        if version != "editable":
            build_data["force_include"][str(out)] = f"{PACKAGE_DIR}/{name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
