#!/usr/bin/env bash
# The JPEG pipeline's decoding stepped from the GPU back to the host on one compiled configuration, one trial per
# step, all in one GPU-machine call: where does the split stop paying? Each step is one trial
# (`python -m sweeper +workload=resnet50 workload.data=jpeg knobs...`, no sweep) on real photographs
# (bench/photo_corpus.py), sharing one Inductor cache (the first step compiles it, the others find it warm), then
# the first step again (drift). One line per step in $OUT/ladder.txt, every row in $OUT/rows-ladder.parquet.
#   bash bench/host_ladder.sh [Hydra overrides for every step ...]
# The steps: half of each batch decoded on the GPU, a quarter, none (uint8 crops normalized on the GPU; the same
# with the copy and normalization on a side stream; float32 crops normalized by the workers). LADDER_STEPS
# replaces them ("step;step;...", each step Hydra overrides). With LADDER_HAND set, the synthetic hand loop
# (bench/hand_loop.py, fp16 batch 1024 compiled, its own inductor cache) runs first in the same call: the JPEG
# case's reference, to $OUT/hand.jsonl.
set -uo pipefail
out=${OUT:?set OUT to the folder that comes back}
scratch=${SCRATCH:-/tmp/host-ladder}
rm -rf "$scratch"; mkdir -p "$scratch" "$out"
export TORCHINDUCTOR_CACHE_DIR=$scratch/inductor
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; git rev-parse HEAD 2>/dev/null
  git diff --stat HEAD 2>/dev/null | tail -1; } > "$out/machine.txt" 2>&1
root=("workload.root=$scratch/photos")  # without scikit-image (a CPU smoke test): the generated corpus, said
python bench/photo_corpus.py "$scratch/photos" > "$scratch/corpus.out" 2>&1 \
  || { root=(); echo "no photographs ($(tail -1 "$scratch/corpus.out")): the generated corpus" | tee -a "$out/ladder.txt"; }
common=(+workload=resnet50 workload.data=jpeg "${root[@]}" knobs.precision=fp16
        knobs.memory_format=channels_last knobs.compile=default knobs.cudnn_benchmark=true knobs.batch_size=512
        knobs.optimizer_impl=fused knobs.num_workers=14 knobs.prefetch_factor=4 knobs.worker_nice=10
        knobs.pin_memory=true knobs.non_blocking=true knobs.cpu_decoder=torchvision knobs.augment_device=cpu
        "results_dir=$scratch/results")
steps=("knobs.decode_device=hybrid knobs.gpu_share=0.5 knobs.transfer_dtype=uint8 knobs.cuda_connections=32"
       "knobs.decode_device=hybrid knobs.gpu_share=0.25 knobs.transfer_dtype=uint8 knobs.cuda_connections=32"
       "knobs.decode_device=cpu knobs.transfer_dtype=uint8"
       "knobs.decode_device=cpu knobs.transfer_dtype=uint8 knobs.device_prefetch=true"
       "knobs.decode_device=cpu knobs.transfer_dtype=float32"
       "knobs.decode_device=hybrid knobs.gpu_share=0.5 knobs.transfer_dtype=uint8 knobs.cuda_connections=32")
if [ -n "${LADDER_STEPS:-}" ]; then IFS=';' read -r -a steps <<< "$LADDER_STEPS"; fi
if [ -n "${LADDER_HAND:-}" ]; then
  TORCHINDUCTOR_CACHE_DIR=$scratch/hand-inductor python bench/hand_loop.py --precision fp16 --batch 1024 \
    --zero-init --json "$out/hand.jsonl" > "$scratch/hand.out" 2>&1
  echo "hand loop rc=$? $(tail -1 "$out/hand.jsonl" 2>/dev/null)" | tee -a "$out/ladder.txt"
fi
i=0
for step in "${steps[@]}"; do
  i=$((i + 1))
  t0=$(date +%s)
  # shellcheck disable=SC2086 # a step is words
  python -m sweeper "${common[@]}" $step "$@" hydra.run.dir="$scratch/run$i" > "$scratch/run$i.out" 2>&1
  rc=$?
  got=$(grep -E "throughput|data_wait_frac" "$scratch/run$i.out" | tr -s ' │' ' ' | tr '\n' ' ')
  echo "step $i rc=$rc $(( $(date +%s) - t0 ))s [$step] $got" | tee -a "$out/ladder.txt"
done
python bench/pack.py "$scratch/results" "$out/rows-ladder.parquet" > /dev/null
(cd "$scratch" && tar czf "$out/ladder-logs.tgz" run*.out)
