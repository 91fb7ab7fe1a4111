#!/usr/bin/env bash
# Run HERE (the machine with registry access): puts into .whl/ every wheel the GPU machine lacks
# (Python 3.12, x86-64, no registry); perflab itself runs from the source tree (device_env.sh). Carry `.whl` to the device
# and source scripts/device_env.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .git/info
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
rm -f .whl/perflab-*.whl  # older versions of this script built one
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# Missing on the GPU image (checked against KINDS.md's package list): orjson, msgspec, platformdirs.
# Extra wheels (torchao, gemlite, ncu-report ...) are appended by the issues that need them.
# torchao (abi3, pure-Python kernels + torch ops) serves the fp8-weight-only puzzle.
# gemlite (pure Python, published as an sdist only) serves the autotune puzzle's GemLite record.
# The many-ranks doctor's local cluster (perflab[cluster]) and its needs the image lacks: dask, distributed, tornado,
# zict, tblib, locket, partd. HTA 0.5.0 (the peer benchmarks/multirank_workers.py measures against) with plotly and
# pydot; it runs with the image's pandas, numpy, networkx and narwhals. About 13 MB together.
CLUSTER="dask==2026.8.0 distributed==2026.8.0 tornado==6.6.1 zict==3.0.0 tblib==3.2.2 locket==1.0.0 partd==1.4.2"
HTA="holistictraceanalysis==0.5.0 plotly==7.1.0 pydot==4.0.1"
for spec in "orjson==3.11.4" "msgspec==0.19.0" "platformdirs==4.5.0" "torchao==0.18.0" "gemlite==0.6.0.post2" \
    $CLUSTER $HTA ${PERFLAB_EXTRA_WHEELS:-}; do
  name="${spec%%==*}"
  if ! ls .whl/ | grep -qi "^${name//-/_}-"; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${PLAT[@]}" -d .whl "$spec" || python3 -m pip download -q --no-deps --only-binary=:all: \
      --python-version 3.12 -d .whl "$spec" \
      || python3 -m pip wheel -q --no-deps -w .whl "$spec"  # sdist only: build the (pure-Python) wheel here
  fi
done
# The trace reader's C scanner for the device's CPython 3.12 (scripts/gpu_benchmark_investigate_and_ranks.sh uses it when that machine cannot
# compile it: no Python.h there): built here with a python3.12 that has its headers, when there is one. It needs only
# glibc 2.14 symbols.
PY312=$(for p in "${PERFLAB_PY312:-}" "$(pyenv prefix 3.12 2>/dev/null)/bin/python3.12" $(ls -d /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null) "$(command -v python3.12)"; do
  [ -n "$p" ] && "$p" -c '' 2>/dev/null && { echo "$p"; break; }; done)
if [ -n "$PY312" ] && INC=$("$PY312" -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
   && [ -f "$INC/Python.h" ]; then
  cc -O2 -fPIC -shared -I"$INC" src/perflab/trace/torch_profiler/native/kineto_scan.c \
    -o .whl/_kineto_scan.cpython-312-x86_64-linux-gnu.so || echo "the C scanner was not built for 3.12" >&2
fi
ls -la .whl
