#!/bin/bash
# dmlbench's GPU path on one GPU: ResNet-50 (fp32 with torch's default TF32 convolutions,
# and bf16) at 32 and 256 images, the small GPT with DDP, fsdp and zero1, all on
# synthetic data; then `simulate-cluster --cluster` with the efficiency the runs measured.
#   bash benchmarks/gpu_check.sh [STORE]     (results in BENCHMARKS.md, "The GPU path")
set -u
S=${1:-gpu-check-store}
R="--workers 1 --set synthetic_data=true --set warmup_steps_excluded=10 --store $S"
for p in fp32 bf16; do
  dmlbench run imagenet-resnet50 $R --set max_steps=50 --set recipe.local_batch=256 --set recipe.precision=$p
  dmlbench run imagenet-resnet50 $R --set max_steps=120 --set recipe.precision=$p
done
for x in allreduce fsdp zero1; do
  dmlbench run kjv-gpt $R --set max_steps=60 --exchange $x --set recipe.precision=bf16
done
dmlbench results --store $S
dmlbench simulate-cluster imagenet-resnet50 --cluster dgx-h200 --nodes 1,8,32 --store $S --dtype tf32
dmlbench simulate-cluster imagenet-resnet50 --cluster dgx-h200 --nodes 1,8,32 --store $S --dtype bf16
# issue 54, item 2: one device's step time against its local batch (8 to 256), the
# measured curve `simulate-cluster --cluster --curve` and `replay_mlperf.py --curve` take
dmlbench sweep benchmarks/sweeps/local-batch-curve.yaml --store $S
dmlbench sweep benchmarks/sweeps/local-batch-curve-gpt.yaml --store $S
python benchmarks/local_batch_curve.py --store $S --task imagenet-resnet50 --precision bf16 --out resnet50-curve-bf16.json
python benchmarks/local_batch_curve.py --store $S --task kjv-gpt --precision bf16 --out gpt-curve-bf16.json
python benchmarks/replay_mlperf.py --curve resnet50-curve-bf16.json --json mlperf-replay-curve.json
