#!/usr/bin/env bash
# One configuration measured again and again on the GPU machine, to catch a trial that hangs now and then: each run
# is one trial (`python -m sweeper +workload=... knobs...`, no sweep) in its own session, with the trial's stall
# watchdog short (measure.stall_s) and Python's faulthandler on in every process; a run still going after PER_RUN_S
# seconds (FIRST_RUN_S for the first, which compiles cold) gets SIGABRT in every process of its session, the
# trial's own process group included (each writes its threads' stacks), then SIGKILL. Runs go on until TOTAL_S
# seconds have passed. Every run's output and Hydra folder are packed into $OUT/repeat-logs.tgz, one line
# per run into $OUT/repeat.txt (exit status, seconds, throughput or the trial's status line).
#   TOTAL_S=330 PER_RUN_S=60 FIRST_RUN_S=150 bash bench/repeat_trial.sh [Hydra overrides ...]
# (2026-12-06, an H100: a warm compiled hybrid JPEG trial 28-30 s a run, its first cold run past 60 s.)
# The trials share one Inductor cache (the first compiles it). For the JPEG pipeline, give workload.root a corpus
# (python bench/photo_corpus.py DIR makes one).
set -uo pipefail
out=${OUT:?set OUT to the folder that comes back}
total=${TOTAL_S:-330}
per_run=${PER_RUN_S:-60}
first_run=${FIRST_RUN_S:-150}
scratch=${SCRATCH:-/tmp/repeat-trial}
rm -rf "$scratch"; mkdir -p "$scratch" "$out"
export TORCHINDUCTOR_CACHE_DIR=$scratch/inductor PYTHONFAULTHANDLER=1
start=$(date +%s)
i=0
while [ $(( $(date +%s) - start )) -lt "$total" ]; do
  i=$((i + 1))
  run=$scratch/run$i
  t0=$(date +%s)
  setsid python -m sweeper "$@" measure.stall_s=15 results_dir="$scratch/results" hydra.run.dir="$run" \
    > "$scratch/run$i.out" 2>&1 &
  pid=$!
  limit=$per_run; [ "$i" -eq 1 ] && limit=$first_run
  while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do sleep 1; done
  verdict=""
  if kill -0 "$pid" 2>/dev/null; then  # setsid: the session id is $pid, the trial's own group is inside it
    pkill -ABRT -s "$pid"; sleep 5; pkill -KILL -s "$pid"; verdict="HUNG past ${limit}s"
  fi
  wait "$pid"; rc=$?
  line=$(grep -E "img/s|samples/s|failed|stalled|interrupted" "$scratch/run$i.out" | tail -1)
  echo "run $i rc=$rc $(( $(date +%s) - t0 ))s $verdict $line" | tee -a "$out/repeat.txt"
done
(cd "$scratch" && tar czf "$out/repeat-logs.tgz" run*.out run*/ 2>/dev/null)
ls -la "$out"
