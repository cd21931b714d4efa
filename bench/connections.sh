#!/usr/bin/env bash
# Does the GPU decoder slow beside the training step because their streams share the GPU's hardware work queues
# (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default)? One run, ~8 min on the H200.
#   bash bench/connections.sh OUT
# 1. bench/gpu_decode_load.py (torchvision's batched GPU decoder alone, beside a CUDA-graph matmul load, beside eager
#    ResNet-50 steps), in a process with the default 8 connections and in one with 32.
# 2. bench/decode_strategies.py trials (fp16 channels_last cuDNN fused SGD bs512 compiled, 14 workers at nice 10):
#    the model on synthetic data; half of each batch on the GPU with CPU crops, with 8 and 32 connections; with 32:
#    3/8 on the GPU with GPU crops, 5/8 and 3/4 on the GPU, and half with CUDA graphs (reduce-overhead).
set -u
OUT=${1:?OUT}
mkdir -p "$OUT" /tmp/lg
export TORCHINDUCTOR_CACHE_DIR=/tmp/ds/results/inductor_cache PYTHONUNBUFFERED=1
date -u
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
L="--threads 1 --seconds 4 --decoders torchvision --loads none,gpu_graph,resnet_eager"
timeout 80 python3 bench/gpu_decode_load.py /tmp/gdl8 $L > /tmp/lg/gdl8.log 2>&1
CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 80 python3 bench/gpu_decode_load.py /tmp/gdl32 $L > /tmp/lg/gdl32.log 2>&1
for n in 8 32; do sed "s/^{/{\"connections\": $n, /" /tmp/gdl$n/gpu_decode_load.jsonl; done > "$OUT/gpu_decode_load.jsonl"
cut -c1-220 "$OUT/gpu_decode_load.jsonl"
date -u
M="knobs.precision=fp16,knobs.memory_format=channels_last,knobs.cudnn_benchmark=true,knobs.optimizer_impl=fused"
M="$M,knobs.batch_size=512,knobs.compile=default"
H=hybrid-0.5-tv-w14-nice10
C=@+env.CUDA_DEVICE_MAX_CONNECTIONS=32
S="$H,$H$C,hybrid-0.375-gpucrop-w14$C,hybrid-0.625-tv-w14-nice10$C,hybrid-0.75-tv-w14-nice10$C"
S="$S,$H$C@knobs.compile=reduce-overhead"
timeout "${TRIALS_S:-330}" python3 bench/decode_strategies.py /tmp/ds --parts trials --model "$M" --trial-strategies "$S" \
  > /tmp/lg/ds.log 2>&1
tail -10 /tmp/lg/ds.log
cp /tmp/ds/decode_strategies.jsonl "$OUT/" 2>/dev/null
python3 bench/pack.py /tmp/ds/results "$OUT/rows.parquet"
cp -r /tmp/ds/logs /tmp/lg/ 2>/dev/null
tar czf "$OUT/logs.tgz" -C /tmp lg
date -u
