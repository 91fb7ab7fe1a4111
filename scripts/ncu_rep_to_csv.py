#!/usr/bin/env python3
"""Write an Nsight Compute report's raw page as CSV, the way `ncu --import R.ncu-rep --page raw --csv` does
(a header row, a units row, one row per profiled kernel), without Nsight Compute: through NVIDIA's
`ncu_report` module (pip install ncu-report). A CSV is some 30x smaller than its report, small enough for
a test fixture; perflab's reader takes either (trace/ncu.py).

    python3 scripts/ncu_rep_to_csv.py REPORT.ncu-rep OUT.csv [--force]

Values are written in the report's own units (the units row), so the reader normalizes them exactly as it
does a report. Never writes over an existing file without --force, nor over the input.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import math
import sys
import tempfile
from pathlib import Path

ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC")


def _value(metric):
    try:
        v = metric.value()
    except Exception:
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None   # ncu's exports leave such cells empty
    return v if isinstance(v, (int, float, str)) else None


def _cell(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v).replace("\n", " ").replace("\r", " ")


def rows(report: Path) -> tuple[list[str], list[str], list[list[str]]]:
    """(header, units row, one row per profiled kernel) of a report, gzipped or not."""
    sys.path.insert(0, "/opt/nvidia/nsight-compute/extras/python")   # an install's module, if no pip package
    import ncu_report

    if report.read_bytes()[:2] == b"\x1f\x8b":
        with tempfile.TemporaryDirectory() as tmp:
            plain = Path(tmp) / "report.ncu-rep"
            plain.write_bytes(gzip.decompress(report.read_bytes()))
            return rows(plain)
    ctx = ncu_report.load_report(str(report))
    kernels: list[tuple[dict[str, str], dict[str, str], dict[str, str]]] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            values, units = {}, {}
            for name in act.metric_names():
                m = act.metric_by_name(name)
                v = None if m is None else _value(m)
                if v is None:
                    continue
                values[name], units[name] = _cell(v), (m.unit() or "")
            dims = lambda what: "({}, {}, {})".format(*(values.get(f"launch__{what}_dim_{ax}", "1") for ax in "xyz"))
            ident = {"ID": str(len(kernels)), "Process ID": values.get("launch__process_id", ""),
                     "Process Name": values.get("launch__process_name", ""), "Host Name": "",
                     "Kernel Name": act.name(ncu_report.IAction.NameBase_DEMANGLED),
                     "Context": values.get("launch__context_id", ""), "Stream": values.get("launch__stream_id", ""),
                     "Block Size": dims("block"), "Grid Size": dims("grid"),
                     "Device": values.get("device__attribute_device_index", "0"),
                     "CC": "{}.{}".format(values.get("device__attribute_compute_capability_major", "?"),
                                          values.get("device__attribute_compute_capability_minor", "?"))}
            kernels.append((ident, values, units))
    names = sorted({n for _, values, _ in kernels for n in values})
    header = list(ID_COLUMNS) + names
    units_row = [""] * len(ID_COLUMNS) + [next((u[n] for _, _, u in kernels if n in u), "") for n in names]
    body = [[ident[c] for c in ID_COLUMNS] + [values.get(n, "") for n in names] for ident, values, _ in kernels]
    return header, units_row, body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    if not args.report.is_file():
        print(f"error: {args.report}: no such report", file=sys.stderr)
        return 2
    if args.out.exists() and (args.out.resolve() == args.report.resolve() or not args.out.is_file() or not args.force):
        print(f"error: {args.out} exists (use --force to replace a regular file other than the input)", file=sys.stderr)
        return 2
    try:
        header, units_row, body = rows(args.report)
    except Exception as exc:  # the module's own errors: one line
        print(f"error: {args.report}: cannot read ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(header)
        w.writerow(units_row)
        w.writerows(body)
    print(f"{args.out}: {len(body)} kernel(s), {len(header) - len(ID_COLUMNS)} metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main())
