#!/usr/bin/env bash
# Try several values of one SIZE key of a puzzle in one call on the GPU machine, before recording it:
# each value is written into the SIZE dict of the puzzle's workload.py (and of solution.py where it defines its
# own; the starter is derived from workload.py), the fix
# check runs (solution must pass, starter must fail; scripts/check_catalog_gpu.py) and its JSON line goes
# to OUT/tune.jsonl; the files are restored afterwards, whatever happens.
#
#   source scripts/device_env.sh && bash scripts/tune_puzzle_size.sh exposed-allreduce batch 512 1024 2048
# Each line of tune.jsonl is one try: "size", "point" (slow/fixed), "ci_low", "bar", "solution_why", "starter_why".
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
  echo "usage: $0 PUZZLE_ID SIZE_KEY VALUE [VALUE ...]" >&2
  exit 2
fi
id=$1 key=$2
shift 2
dir=$(ls -d src/perflab/catalog/*-"$id" 2>/dev/null | head -1 || true)
if [ -z "$dir" ]; then
  echo "$0: error: no puzzle folder src/perflab/catalog/NN-$id" >&2
  exit 2
fi
if ! grep -Eq "^SIZE = \{.*\"$key\": [0-9]+" "$dir/workload.py"; then
  echo "$0: error: $dir/workload.py has no integer \"$key\" in its SIZE = {...} line" >&2
  exit 2
fi
files=()  # the variants that define SIZE themselves (others import the workload's)
for f in "$dir/workload.py" "$dir/solution.py"; do
  if grep -Eq "^SIZE = \{.*\"$key\": [0-9]+" "$f"; then files+=("$f"); fi
done
backup=$(mktemp -d)
cp "${files[@]}" "$backup/"
trap 'for f in "${files[@]}"; do cp "$backup/$(basename "$f")" "$f"; done; rm -rf "$backup"' EXIT
out=${OUT:-.}/tune.jsonl
for value in "$@"; do
  for f in "${files[@]}"; do
    sed -E -i "s/^(SIZE = \{.*\"$key\": )[0-9]+/\1$value/" "$f"
  done
  echo "== $id with $key = $value"
  python3 scripts/check_catalog_gpu.py "$id" --jsonl "$out.part" || true
  python3 - "$out.part" "$out" "$key" "$value" <<'EOF'
import json, sys
part, out, key, value = sys.argv[1:]
with open(part) as src, open(out, "a") as dst:
    for line in src:
        row = json.loads(line)
        row["size"] = {key: int(value)}
        dst.write(json.dumps(row) + "\n")
EOF
  rm -f "$out.part"
done
echo "tries appended to $out"
