#!/usr/bin/env bash
# Source THERE (on the GPU machine), from the repo root, with `.whl` carried:
#   source scripts/device_env.sh
# Installs the carried third-party wheels into /tmp/site without touching the image and runs perflab
# from this source tree (never a stale wheel), with a `perflab` command on PATH.
# The tree with the catalog's recordings is over the 64 MiB a call sends: here, `python3 scripts/device_tree.py slim`
# before a call that reads none of them, `python3 scripts/device_tree.py restore` right after.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls .whl/*.whl | grep -v '/perflab-') \
  || { echo "device_env: wheel install failed" >&2; return 1 2>/dev/null || exit 1; }
export PYTHONPATH=$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
mkdir -p /tmp/site/bin
printf '#!/usr/bin/env python3\nimport sys\nfrom perflab.__main__ import main\nsys.exit(main())\n' > /tmp/site/bin/perflab
chmod +x /tmp/site/bin/perflab
export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -c "import perflab, sys, torch; print('perflab', perflab.__version__, 'from', perflab.__file__, 'python', sys.version.split()[0], 'torch', torch.__version__)"
