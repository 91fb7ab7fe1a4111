"""Nsight Compute reports -> one model: per kernel its launch facts and every metric in base units.

Two sources, one model:
- a `.ncu-rep` (optionally gzip-compressed) through NVIDIA's `ncu_report` module: the `ncu-report`
  PyPI package, or the `extras/python/` folder of an Nsight Compute install (located, not assumed);
- the raw page exported as CSV (`ncu --import X.ncu-rep --page raw --csv`), also optionally gzipped.
Metrics are stored by their full ncu name (`dram__bytes_read.sum`) with values normalized to base
units (seconds, bytes, bytes/second, hertz; `%` stays percent). Missing metrics are simply absent:
`KernelProfile.get` returns None and the rules degrade instead of crashing.
"""
from __future__ import annotations

import csv
import glob
import gzip
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from perflab.errors import UnreadableInput
from perflab.trace.nsight_compute.ncu_coverage import is_missing, plausible
from perflab.trace.nsight_compute.ncu_model import KernelProfile, NcuProfile, normalize_unit, parse_number, short_name
from perflab.trace.nsight_compute.ncu_rules import rule_results
from perflab.trace.input_files import open_binary, refuse_special

__all__ = ["KernelProfile", "NcuProfile", "load", "load_ncu_report_module", "normalize_unit", "parse_number",
           "short_name", "sniff"]

REP_MAGIC = b"NVR\x00"
GZIP_MAGIC = b"\x1f\x8b"
CSV_ID_COLUMNS = ("ID", "Kernel Name")

# --- sniffing -------------------------------------------------------------------------------------

def _head(path: Path, n: int = 4096) -> bytes:
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
        if raw[:2] == GZIP_MAGIC:
            with gzip.open(path, "rb") as g:
                return g.read(n)
        return raw
    except (OSError, EOFError, gzip.BadGzipFile):
        return b""


def sniff(path: str | os.PathLike) -> str | None:
    """'rep' for an Nsight Compute report, 'csv' for its raw-page CSV export, else None (by content)."""
    p = Path(path)
    if not p.is_file():
        return None
    head = _head(p)
    if head.startswith(REP_MAGIC):
        return "rep"
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")), "")
    fields = next(csv.reader([first]), [])
    if fields[:1] == ["ID"] and "Kernel Name" in fields:
        return "csv"
    return None


# --- the ncu_report module ------------------------------------------------------------------------

def _ncu_python_dirs() -> list[str]:
    dirs = []
    for env in ("NCU_PYTHON_PATH", "NSIGHT_COMPUTE_HOME", "NCU_HOME"):
        if os.environ.get(env):
            dirs += [os.environ[env], os.path.join(os.environ[env], "extras", "python")]
    try:
        from perflab.trace.nsight_compute.ncu_tool import find_ncu

        dirs.append(str(find_ncu().resolve().parent / "extras" / "python"))
    except Exception:
        pass
    dirs += sorted(glob.glob("/opt/nvidia/nsight-compute/*/extras/python"), reverse=True)
    dirs += sorted(glob.glob("/usr/local/cuda*/nsight-compute*/extras/python"), reverse=True)
    return [d for d in dirs if os.path.isfile(os.path.join(d, "ncu_report.py"))]


def load_ncu_report_module():
    """NVIDIA's ncu_report: the pip package, else an install's extras/python; None if neither."""
    try:
        return importlib.import_module("ncu_report")
    except Exception:
        pass
    for d in _ncu_python_dirs():
        sys.path.insert(0, d)
        try:
            return importlib.import_module("ncu_report")
        except Exception:
            sys.path.remove(d)
    return None


def _metric_value(metric) -> Any:
    try:
        value = metric.value()
    except Exception:
        return None
    if isinstance(value, bool):
        return int(value)
    return value if isinstance(value, (int, float, str)) else None


def _from_action(mod, action, index: int) -> KernelProfile:
    try:
        full = action.name(mod.IAction.NameBase_DEMANGLED)
    except Exception:
        full = action.name()
    metrics: dict[str, Any] = {}
    units: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for name in action.metric_names():
        m = action.metric_by_name(name)
        if m is None:
            continue
        value = _metric_value(m)
        if value is None:
            continue
        factor, unit = normalize_unit(m.unit() or "")
        if isinstance(value, (int, float)):
            value = value * factor if factor != 1.0 else value
            if is_missing(value):
                continue
            if not plausible(value, unit):
                dropped[name] = str(value)[:40]
                continue
        metrics[name] = value
        units[name] = unit
    return KernelProfile(index=index, name=short_name(action.name()), full_name=full, metrics=metrics,
                         units=units, nvtx=_nvtx_from_action(action), rules=rule_results(action),
                         dropped=dropped)


def _nvtx_from_action(action) -> list[str]:
    out: list[str] = []
    try:
        state = action.nvtx_state()
        for domain_id in state.domains():
            domain = state.domain_by_id(domain_id)
            out += [str(r) for r in domain.push_pop_ranges()]
            out += [str(r) for r in domain.start_end_ranges()]
    except Exception:
        pass
    return out


def _installed_module_works(mod, report: Path) -> bool:
    """An install's ncu_report is built for one Python; a mismatch can crash the interpreter (seen on
    the GPU machine: SIGSEGV). Try it in a child process first; the pip package is trusted as is."""
    origin = os.path.dirname(getattr(mod, "__file__", "") or "")
    if "site-packages" in origin or "dist-packages" in origin:
        return True
    folder = os.path.dirname(origin)
    probe = (f"import sys; sys.path.insert(0, {folder!r}); import ncu_report; "
             f"print(ncu_report.load_report({str(report)!r}).num_ranges())")
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _export_with_ncu(report: Path) -> Path | None:
    """The raw page through `ncu --import` when Nsight Compute is installed; None otherwise."""
    try:
        from perflab.trace.nsight_compute.ncu_tool import export_csv, find_ncu

        fd, name = tempfile.mkstemp(suffix=".csv")
        os.close(fd)
        return export_csv(find_ncu(), report, Path(name))
    except Exception:
        return None


def _load_rep(path: Path) -> NcuProfile:
    tmp = None
    try:
        target = path
        if path.read_bytes()[:2] == GZIP_MAGIC:
            fd, tmp = tempfile.mkstemp(suffix=".ncu-rep")
            with os.fdopen(fd, "wb") as out, open_binary(path) as src:  # bounded: a gzip bomb stops here
                shutil.copyfileobj(src, out, 1 << 20)
            target = Path(tmp)
        mod = load_ncu_report_module()
        if mod is None or not _installed_module_works(mod, target):
            return _load_rep_as_csv(path, target, mod is None)
        ctx = mod.load_report(str(target))
        kernels = []
        for r in range(ctx.num_ranges()):
            rng = ctx.range_by_idx(r)
            for a in range(rng.num_actions()):
                kernels.append(_from_action(mod, rng.action_by_idx(a), len(kernels)))
    except UnreadableInput:
        raise
    except Exception as exc:
        raise UnreadableInput(f"{path}: not a readable Nsight Compute report ({type(exc).__name__}: {exc})") from None
    finally:
        if tmp:
            os.unlink(tmp)
    if not kernels:
        raise UnreadableInput(f"{path}: the Nsight Compute report holds no profiled kernel")
    return NcuProfile(path=str(path), source="ncu_report", kernels=kernels)


def _load_rep_as_csv(path: Path, target: Path, no_module: bool) -> NcuProfile:
    sibling = _csv_sibling(path)
    if sibling is not None:
        return _load_csv(sibling, shown=path)
    exported = _export_with_ncu(target)
    if exported is not None:
        try:
            return _load_csv(exported, shown=path)
        finally:
            exported.unlink(missing_ok=True)
    csv_cmd = f"ncu --import {path.name} --page raw --csv > {path.stem}.csv"
    if not no_module:
        raise UnreadableInput(f"{path}: the ncu_report module found here fails to read it; give perflab its raw-page "
                              f"CSV instead ({csv_cmd}, on a machine with Nsight Compute)")
    if ncu_report_wheel(_this_platform()):
        raise UnreadableInput(f"{path}: reading .ncu-rep needs NVIDIA's ncu_report module, which perflab's install "
                              f"brings here: python3 -m pip install '{NCU_REPORT}'; or give its raw-page CSV ({csv_cmd})")
    raise UnreadableInput(f"{path}: NVIDIA ships no ncu-report wheel for this platform ({_this_platform()['sys_platform']} "
                          f"{_this_platform()['platform_machine']}): export its raw page on a machine with Nsight "
                          f"Compute ({csv_cmd}) and give perflab the CSV, or set NCU_PYTHON_PATH to an Nsight Compute "
                          "install's extras/python folder")


# NVIDIA's ncu-report wheels (2026.3.1 on PyPI, cp37-abi3): manylinux_2_25 x86_64 and aarch64, win_amd64,
# win_arm64, macosx_13_0 x86_64 and arm64 (macOS 13 = Darwin 22); no sdist. pyproject.toml's dependency
# carries the same marker (tests/cli/test_install_conventions.py holds them together).
NCU_REPORT = "ncu-report>=2026.3.1"
NCU_REPORT_MARKER = ("platform_python_implementation == 'CPython' and ("
                     "(sys_platform == 'linux' and (platform_machine == 'x86_64' or platform_machine == 'aarch64')) or "
                     "(sys_platform == 'win32' and (platform_machine == 'AMD64' or platform_machine == 'ARM64')) or "
                     "(sys_platform == 'darwin' and platform_release >= '22'))")


def _this_platform() -> dict[str, str]:
    import platform

    return {"platform_python_implementation": platform.python_implementation(), "sys_platform": sys.platform,
            "platform_machine": platform.machine(), "platform_release": platform.release()}


def ncu_report_wheel(env: dict[str, str]) -> bool:
    """Whether NCU_REPORT_MARKER holds in `env` (the marker's variables): a wheel exists for it."""
    if env["platform_python_implementation"] != "CPython":
        return False
    machine, system = env["platform_machine"], env["sys_platform"]
    if system == "linux":
        return machine in ("x86_64", "aarch64")
    if system == "win32":
        return machine in ("AMD64", "ARM64")
    if system == "darwin":
        major = env["platform_release"].split(".")[0]
        return major.isdigit() and int(major) >= 22
    return False


def _csv_sibling(path: Path) -> Path | None:
    stem = re.sub(r"(\.ncu-rep)?(\.gz)?$", "", path.name)
    for cand in (path.parent / f"{stem}.csv", path.parent / f"{stem}.csv.gz"):
        if cand.exists() and sniff(cand) == "csv":
            return cand
    return None


# --- CSV ------------------------------------------------------------------------------------------

_NVTX_COL = re.compile(r"Push/Pop_Range|Start/Stop_Range")


def _nvtx_texts(cell: str) -> list[str]:
    """NVTX cells look like '2685  "<default domain>:MESSAGE:none:...'; keep the messages."""
    out = []
    for quoted in re.findall(r'"([^"]*)"', cell) or [cell]:
        m = re.match(r"<[^>]*>:(.*?)(?::none)*$", quoted.strip())
        text = (m.group(1) if m else quoted).strip()
        if text:
            out.append(text)
    return out


def _load_csv(path: Path, shown: Path | None = None) -> NcuProfile:
    try:
        with open_binary(path) as fh:  # gzipped or not; a gzip bomb stops at the decompressed-size limit
            raw = fh.read()
        text = raw.decode("utf-8", "replace").lstrip("\ufeff")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UnreadableInput(f"{path}: cannot read ({exc})") from None
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 2 or not all(c in rows[0] for c in CSV_ID_COLUMNS):
        raise UnreadableInput(f"{path}: not an Nsight Compute raw-page CSV (expected columns ID and Kernel Name)")
    header = rows[0]
    if not any("__" in c for c in header):  # ncu's metric names: unit__counter.rollup (gpu__time_duration.sum)
        raise UnreadableInput(f"{path}: not an Nsight Compute raw-page CSV: no metric columns (such as "
                              f"gpu__time_duration.sum), only {', '.join(c[:40] for c in header[:6])}")
    has_units = len(rows) > 1 and rows[1] and rows[1][0] == ""
    units_row = rows[1] if has_units else [""] * len(header)
    kernels = []
    for row in rows[2 if has_units else 1:]:
        if len(row) != len(header):
            continue
        metrics: dict[str, Any] = {}
        units: dict[str, str] = {}
        dropped: dict[str, str] = {}
        nvtx: list[str] = []
        full = ""
        for col, unit, cell in zip(header, units_row, row):
            if col == "Kernel Name":
                full = cell
            if _NVTX_COL.search(col):
                nvtx += _nvtx_texts(cell) if cell.strip() else []
                continue
            num = parse_number(cell)
            if num is None:
                if cell.strip():
                    metrics[col] = cell
                continue
            factor, base = normalize_unit(unit)
            if not plausible(num * factor, base):
                dropped[col] = cell.strip()[:40]
                continue
            metrics[col] = num * factor
            units[col] = base
        kernels.append(KernelProfile(index=len(kernels), name=short_name(full), full_name=full,
                                     metrics=metrics, units=units, nvtx=nvtx, dropped=dropped))
    if not kernels:
        raise UnreadableInput(f"{path}: the CSV export holds no kernel rows")
    return NcuProfile(path=str(shown or path), source="csv", kernels=kernels)


def load(path: str | os.PathLike, *, prefer: str = "auto") -> NcuProfile:
    """Read an `.ncu-rep` or its raw-page CSV export (either may be gzipped), recognized by content.

    prefer="csv" reads a report's sibling CSV even when ncu_report is importable (tests use it)."""
    p = Path(path)
    if not p.exists():
        raise UnreadableInput(f"{p}: no such file")
    refuse_special(p)
    kind = sniff(p)
    if kind == "csv":
        return _load_csv(p)
    if kind == "rep":
        if prefer == "csv":
            sibling = _csv_sibling(p)
            if sibling is None:
                raise UnreadableInput(f"{p}: no raw-page CSV export next to it")
            return _load_csv(sibling, shown=p)
        return _load_rep(p)
    raise UnreadableInput(f"{p}: neither an Nsight Compute report (.ncu-rep) nor its raw-page CSV export")
