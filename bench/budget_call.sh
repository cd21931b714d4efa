#!/usr/bin/env bash
# One GPU-machine call of the budget bench: bench/budget_sweep.py for one case in a scratch folder, then the files
# worth keeping copied to $OUT (at most 8 come back from such a call), the traces packed in one archive.
#   bash bench/budget_call.sh CASE [budget_sweep.py options and Hydra overrides ...]
# With BUDGET_PROFILE_CHECK set (e.g. "knobs.batch_size=16 knobs.sdpa_backend=cudnn"), bench/profile_check.py then
# reads that transformer_block configuration's kernel shares both ways.
set -uo pipefail
case=$1; shift
scratch=${SCRATCH:-/tmp/budget-$case}
out=${OUT:?set OUT to the folder that comes back}
rm -rf "$scratch"; mkdir -p "$scratch" "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python -c "import sys, torch, torchvision; print(torch.__version__, torchvision.__version__, sys.version.split()[0])"
  nproc; git rev-parse HEAD 2>/dev/null
  # a copied working tree may sit on older git metadata: say how the files differ from the commit named above
  git diff --stat HEAD 2>/dev/null | tail -1; } > "$out/machine.txt" 2>&1
python bench/budget_sweep.py "$scratch" --case "$case" "$@"
if [ -n "${BUDGET_PROFILE_CHECK:-}" ]; then
  # shellcheck disable=SC2086 # the overrides are words
  python bench/profile_check.py "$scratch" $BUDGET_PROFILE_CHECK > /dev/null
  cp "$scratch/profile_check.jsonl" "$out/"
fi
for f in "budget-$case.jsonl" "sweep-$case.log" "report-$case.md" "report-$case.txt" "rows-$case.parquet"; do
  [ -f "$scratch/$f" ] && cp "$scratch/$f" "$out/"
done
(cd "$scratch" && find . -name '*.json.gz' -print0 | tar czf "$out/traces-$case.tgz" --null -T -)
(cd "$scratch" && find sweep -name '*.log' -print0 2>/dev/null | tar czf "$out/logs-$case.tgz" --null -T -)  # trials' logs
ls -la "$out"
