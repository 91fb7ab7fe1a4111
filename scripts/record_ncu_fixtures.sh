#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, after `source scripts/device_env.sh`:
#   [TABLE=fixtures/kernels/VALIDATION] bash scripts/record_ncu_fixtures.sh [OUT=tests/data/ncu] [ONLY="name ..."]
# Builds fixtures/kernels/*.cu for sm_90a, profiles each fixture of fixtures/kernels/FIXTURES with
# Nsight Compute (--set full plus the doctor's extra metrics, or the set a `// ncu-set: SET` line of NAME.cu
# names, alone; one launch, --clock-control none: clocks are never touched) and writes NAME.ncu-rep.gz,
# NAME.csv (the raw page, `ncu --import NAME.ncu-rep --page raw --csv`) and manifest.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-tests/data/ncu}
ONLY=${2:-}
mkdir -p "$OUT" build/fixtures
NCU=$(python3 -c "from perflab.toolkit.ncu_runner import find_ncu; print(find_ncu())") || exit 2
echo "ncu: $NCU ($("$NCU" --version | tail -1))"

for f in fixtures/kernels/*.cu; do
  name=$(basename "$f" .cu)
  flags=$(sed -n 's#^// nvcc-flags: ##p' "$f")
  echo "nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo $flags -o build/fixtures/$name $f"
done | xargs -P 8 -I{} sh -c '{} || echo "BUILD FAILED: {}"'

grep -v "^#" "${TABLE:-fixtures/kernels/FIXTURES}" | while read -r name planted regex skip prog; do
  [ -z "$name" ] && continue
  if [ -n "$ONLY" ] && ! echo " $ONLY " | grep -q " $name "; then continue; fi
  t0=$(date +%s)
  section=$(sed -n 's#^// ncu-set: ##p' "fixtures/kernels/$name.cu" 2>/dev/null | head -1)
  timeout 150 python3 - "$OUT" "$name" "$regex" "$skip" "${section:-full}" $prog <<'PY' || echo "RECORD FAILED: $name"
import sys
from pathlib import Path
from perflab.toolkit.ncu_runner import profile
out, name, regex, skip, section_set, *prog = sys.argv[1:]
run = profile(prog, out_dir=Path(out), name=name, kernel=regex, launch_count=1, launch_skip=int(skip),
              section_set=section_set, extra_metrics=section_set == "full")
print(f"recorded {name} ({section_set}): {run.report.stat().st_size >> 10} KiB report, {run.csv.stat().st_size >> 10} KiB csv")
PY
  [ -f "$OUT/$name.ncu-rep" ] && gzip -9f "$OUT/$name.ncu-rep"
  echo "  ($name: $(( $(date +%s) - t0 )) s)"
done
python3 fixtures/kernels/manifest.py "$NCU" > "$OUT/manifest.json"
cat "$OUT/manifest.json"
