#!/usr/bin/env bash
# Profiled single runs of the JPEG pipeline on real photographs, in one GPU-machine call: each argument is one
# configuration (Hydra overrides), run with measure.profile_steps=${PROFILE_STEPS:-20}; one inductor cache for all.
#   bash bench/profile_runs.sh "knobs.batch_size=512 knobs.compile=default ..." "... knobs.compile=reduce-overhead"
# $OUT gets runs.jsonl (throughput, step time and the prof_* split of each run), the rows and the run log.
# On the CPU, SMOKE=1 uses the tiny preset on the generated corpus (checks the script).
set -uo pipefail
out=${OUT:?set OUT to the folder that comes back}
scratch=${SCRATCH:-/tmp/profile-runs}
rm -rf "$scratch"; mkdir -p "$scratch" "$out"
export TORCHINDUCTOR_CACHE_DIR="$scratch/inductor" PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import sys, torch, torchvision; print(torch.__version__, torchvision.__version__, sys.version.split()[0])"
  nproc; } > "$out/machine.txt" 2>&1
if [ -n "${SMOKE:-}" ]; then
  data=(preset=tiny)
else
  python bench/photo_corpus.py "$scratch/photos" > "$scratch/corpus.log" 2>&1 || { cat "$scratch/corpus.log"; exit 1; }
  data=("workload.root=$scratch/photos")
fi
for overrides in "$@"; do
  start=$(date +%s)
  # shellcheck disable=SC2086 # the overrides are words
  timeout "${RUN_TIMEOUT:-240}" python -m sweeper +workload=resnet50 workload.data=jpeg "${data[@]}" \
    "results_dir=$scratch/results" "measure.profile_steps=${PROFILE_STEPS:-20}" $overrides >> "$out/runs.log" 2>&1
  echo "{\"overrides\": \"$overrides\", \"exit\": $?, \"wall_s\": $(( $(date +%s) - start ))}" >> "$scratch/exits.jsonl"
done
python bench/pack.py "$scratch/results" "$out/rows.parquet" > /dev/null
python - "$scratch/exits.jsonl" "$out/rows.parquet" > "$out/runs.jsonl" <<'PY'
import json, sys
import pandas as pd
exits = [json.loads(line) for line in open(sys.argv[1])]
rows = pd.read_parquet(sys.argv[2]).sort_values("started_at") if len(exits) else pd.DataFrame()
keep = ["status", "reason", "throughput", "step_ms_p50", "step_cv", "data_wait_frac", "gpu_util_mean",
        "prof_step_ms", "prof_gpu_busy_frac", "prof_idle_input_frac", "prof_idle_sync_frac", "prof_idle_launch_frac",
        "prof_idle_other_frac", "prof_host_threads", "prof_s"]
for e, (_, r) in zip(exits, rows.iterrows()):
    print(json.dumps({**e, **{k: (None if pd.isna(r.get(k)) else r.get(k)) for k in keep if k in r}}, default=str))
PY
cat "$out/runs.jsonl"
