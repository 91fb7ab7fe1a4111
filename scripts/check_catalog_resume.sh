#!/usr/bin/env bash
# The whole-catalog check on one GPU, over as many device calls as it needs: each call checks the puzzles
# that FILE (tracked in the repo) has no row for yet, until BUDGET seconds (default 540), and returns FILE
# with the new rows appended as $OUT/catalog.jsonl: copy it over FILE here, commit, call again.
#   source scripts/device_env.sh && BUDGET=540 bash scripts/check_catalog_resume.sh FILE
set -u -o pipefail
OUT=${OUT:-/tmp/out}
FILE=${1:?usage: check_catalog_resume.sh FILE}
BUDGET=${BUDGET:-540}
RUN=/tmp/catalog.jsonl
touch "$FILE"; cp "$FILE" "$RUN"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# budget-s stops starting puzzles; the longest single check (~170 s) must still end inside the call
timeout $(( BUDGET + 60 )) python3 scripts/record_artifacts.py --check-only --jsonl "$RUN" --resume \
  --budget-s $(( BUDGET - 180 )) 2>&1 | grep -v USDT | tail -60
cp "$RUN" "$OUT/catalog.jsonl"
python3 - "$RUN" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ran = [r for r in rows if "ok" in r]
print(f"{len(ran)} checked, {sum(bool(r['ok']) for r in ran)} ok; not ok:",
      [(r["puzzle"], r["verdict"][:90]) for r in ran if not r["ok"]])
PY
