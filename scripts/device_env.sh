#!/usr/bin/env bash
# Source THERE (on the GPU machine), from the repo root, with `.whl` carried:
#   source scripts/device_env.sh
# Installs the carried wheels (perflab included) into /tmp/site without touching the image.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "device_env: wheel install failed" >&2; return 1 2>/dev/null || exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -c "import perflab, sys; print('perflab', perflab.__version__, 'python', sys.version.split()[0])"
