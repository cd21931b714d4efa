#!/usr/bin/env bash
# Why a GPU fed by the JPEG pipeline idles inside steps: one run, ~9 min on the H200.
#   bash bench/idle_diagnosis.sh OUT
# 1. bench/decode_strategies.py trials: the best JPEG configurations of 2026-12-02 afternoon (fp16 channels_last cuDNN fused SGD
#    bs512 compiled; half the batch on the GPU with CPU crops, and 3/8 with GPU crops; 14 workers at nice 10) against
#    the same model on synthetic data, each also with knobs.switch_interval_ms=0.5 or cpu_threads=2 (rows carry
#    host_step_frac, data_wait_frac, gpu_util_mean).
# 2. bench/step_profile.py: a torch.profiler trace of 6 steps of each of the two, and of the model on synthetic data.
# Needs the results dir's inductor cache as TORCHINDUCTOR_CACHE_DIR (the profiles then reuse the trials' compiles).
set -u
OUT=${1:?OUT}
mkdir -p "$OUT" /tmp/lg
export TORCHINDUCTOR_CACHE_DIR=/tmp/ds/results/inductor_cache PYTHONUNBUFFERED=1
M="knobs.precision=fp16,knobs.memory_format=channels_last,knobs.cudnn_benchmark=true,knobs.optimizer_impl=fused"
M="$M,knobs.batch_size=512,knobs.compile=default"
H=hybrid-0.5-tv-w14-nice10
G=hybrid-0.375-gpucrop-w14
date
timeout "${TRIALS_S:-300}" python3 bench/decode_strategies.py /tmp/ds --parts trials --model "$M" \
  --trial-strategies "$H,$H@knobs.switch_interval_ms=0.5,$H@cpu_threads=2,$G,$G@knobs.switch_interval_ms=0.5" \
  > /tmp/lg/ds.log 2>&1
tail -12 /tmp/lg/ds.log
cp /tmp/ds/decode_strategies.jsonl "$OUT/"
date
P="+workload=resnet50 results_dir=/tmp/ds/results ${M//,/ }"
J="workload.data=jpeg knobs.num_workers=14 knobs.worker_nice=10 knobs.prefetch_factor=4 knobs.pin_memory=true"
J="$J knobs.non_blocking=true knobs.decode_device=hybrid knobs.cpu_decoder=torchvision knobs.transfer_dtype=uint8"
timeout 85 python3 bench/step_profile.py "$OUT" prof-h05 -- $P $J knobs.gpu_share=0.5 > /tmp/lg/prof-h05.log 2>&1
timeout 85 python3 bench/step_profile.py "$OUT" prof-g0375 -- $P $J knobs.gpu_share=0.375 knobs.augment_device=cuda \
  > /tmp/lg/prof-g.log 2>&1
timeout 60 python3 bench/step_profile.py "$OUT" prof-syn -- $P > /tmp/lg/prof-syn.log 2>&1
date
python3 - "$OUT/step_profile.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["name"], r.get("wall_ms_per_step"), r.get("gpu_busy"), r.get("gap_ms_by_cause"), r.get("stream_busy"))
    print("  threads", r.get("threads_cpu_ms"))
    print("  next_batch", r.get("host_next_batch_ms"), "step", r.get("host_step_ms"))
    print("  gaps", r.get("gaps", [])[:6])
PY
python3 bench/pack.py /tmp/ds/results "$OUT/rows.parquet"
cp -r /tmp/ds/logs /tmp/lg/ 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp lg
ls -la "$OUT"
