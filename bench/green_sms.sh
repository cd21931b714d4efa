#!/usr/bin/env bash
# Does withholding SMs from the training step (knobs.pipeline_sms: a CUDA green context) let the GPU decoder keep
# pace beside it? One device call (~7 min on the H200).
#   bash bench/green_sms.sh OUT
# 1. bench/gpu_decode_load.py: torchvision's batched GPU decoder (RGB, and the planes as coded) alone, beside a
#    saturating CUDA-graph matmul load, and beside eager ResNet-50 training steps on all SMs or without 16 / 32.
# 2. the knob's GPU test.
# 3. bench/decode_strategies.py trials (fp16 channels_last cuDNN fused SGD bs512 compiled; 14 workers at nice 10):
#    the model on synthetic data with and without 16 SMs, and the best JPEG configurations of sessions 8-9 (half of
#    each batch on the GPU with CPU crops; 3/8 with GPU crops) with 0, 16, 32 SMs withheld.
set -u
OUT=${1:?OUT}
mkdir -p "$OUT" /tmp/lg
export TORCHINDUCTOR_CACHE_DIR=/tmp/ds/results/inductor_cache PYTHONUNBUFFERED=1
date -u
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv,noheader
python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)"
timeout 160 python3 bench/gpu_decode_load.py /tmp/gdl --threads 1 --seconds 4 \
  --decoders torchvision,torchvision:unchanged --loads none,gpu_graph,resnet_eager,resnet_eager@16,resnet_eager@32 \
  --dump > /tmp/lg/gdl.log 2>&1
tail -3 /tmp/lg/gdl.log
cp /tmp/gdl/gpu_decode_load.jsonl "$OUT/"
cp /tmp/gdl/unchanged_sample.pt /tmp/lg/ 2>/dev/null
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_knobs.py -k pipeline_sms > /tmp/lg/gputest.log 2>&1
tail -3 /tmp/lg/gputest.log
date -u
M="knobs.precision=fp16,knobs.memory_format=channels_last,knobs.cudnn_benchmark=true,knobs.optimizer_impl=fused"
M="$M,knobs.batch_size=512,knobs.compile=default"
H=hybrid-0.5-tv-w14-nice10
G=hybrid-0.375-gpucrop-w14
P=@knobs.pipeline_sms
timeout "${TRIALS_S:-300}" python3 bench/decode_strategies.py /tmp/ds --parts trials --model "$M" \
  --trial-strategies "$H${P}=16,$H,synthetic${P}=16,$H${P}=32,$G${P}=16,hybrid-0.625-tv-w14-nice10${P}=16" \
  > /tmp/lg/ds.log 2>&1
tail -12 /tmp/lg/ds.log
cp /tmp/ds/decode_strategies.jsonl "$OUT/" 2>/dev/null
python3 bench/pack.py /tmp/ds/results "$OUT/rows.parquet"
cp -r /tmp/ds/logs /tmp/lg/ 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp lg
date -u
ls -la "$OUT"
