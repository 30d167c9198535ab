#!/bin/bash
# dmlbench's checks that need a GPU, as one prepared script for a lent device:
#   PARTS="refusals path autocast workspace curve graphs" [REPEATS=1] bash benchmarks/gpu_check.sh [STORE [OUT]]
# (PARTS: the default runs all six; results in BENCHMARKS.md, "The GPU path" and
# "Time to train"; OUT gets the JSON summaries and a copy of the store after each part)
#
# refusals: one GPU worker more than the host has GPUs (a run, an NCCL all-reduce
#           benchmark) is refused in one line before anything starts (seconds).
# path:     ResNet-50 (fp32 with torch's default TF32 convolutions, and bf16) at 32 and
#           256 images, the small GPT with DDP, fsdp and zero1, all on synthetic data;
#           then `simulate-cluster --cluster` with the efficiency the runs measured.
# autocast: the meta replica's autocast op lists against the device's own autocast,
#           op by op and as a model's bytes kept for backward (issue 54).
# workspace: cuBLAS's workspaces measured apart from any run, against the runtime K a
#           GPU worker is predicted with (perfmodel.memory.cuda_workspace_bytes).
# curve:    issue 54, item 2: one device's step time against its local batch (8 to
#           256) for ResNet-50 and the GPT, in bf16 and tf32 (`dmlbench bench curve`):
#           the measured curve that `simulate-cluster --curve` and `replay_mlperf.py
#           --curve` take.
# graphs:   issue 54: ResNet-50's curve in bf16 under CUDA graphs (compile=reduce-overhead),
#           as NVIDIA's v0.7 MXNet ResNet-50 ran (MXNET_EXPERIMENTAL_ENABLE_CUDA_GRAPH=1 in
#           every config of its submission): a step's fixed part without the host launching
#           kernel by kernel. Each batch compiles first (about a minute on a 16-core host).
set -u
S=${1:-gpu-check-store}
O=${2:-.}
PY=${PYTHON:-python3}
PARTS=${PARTS:-"refusals path autocast workspace curve graphs"}
part() { [[ " $PARTS " == *" $1 "* ]]; }
keep() { tar czf "$O/store.tar.gz" -C "$(dirname "$S")" "$(basename "$S")"; }
R="--workers 1 --set synthetic_data=true --set warmup_steps_excluded=10 --store $S"

if part refusals; then
  more=$(( $($PY -c "import torch; print(torch.cuda.device_count())") + 1 ))
  for command in "run digits-mlp --workers $more" "bench allreduce --backend nccl --workers $more"; do
    dmlbench $command --store "$S-refused" > "$O/refused.out" 2>&1
    echo "dmlbench $command: rc $? · $(tail -1 "$O/refused.out")" | tee -a "$O/refusals.txt"
  done
fi

if part path; then
  for p in fp32 bf16; do
    dmlbench run imagenet-resnet50 $R --set max_steps=50 --set recipe.local_batch=256 --set recipe.precision=$p
    dmlbench run imagenet-resnet50 $R --set max_steps=120 --set recipe.precision=$p
  done
  for x in allreduce fsdp zero1; do
    dmlbench run kjv-gpt $R --set max_steps=60 --exchange $x --set recipe.precision=bf16
  done
  dmlbench results --store "$S"
  dmlbench simulate-cluster imagenet-resnet50 --cluster dgx-h200 --nodes 1,8,32 --store "$S" --dtype tf32
  dmlbench simulate-cluster imagenet-resnet50 --cluster dgx-h200 --nodes 1,8,32 --store "$S" --dtype bf16
  keep
fi

if part autocast; then
  $PY benchmarks/autocast_check.py --device cuda --out "$O/autocast.json"
fi

if part workspace; then
  $PY benchmarks/cuda_workspace.py --out "$O/cuda-workspace.json"
fi

if part curve; then
  for p in bf16 tf32; do
    for task in imagenet-resnet50 kjv-gpt; do
      dmlbench bench curve $task --device cuda --precision $p --repeats "${REPEATS:-1}" \
        --store "$S" --out "$O/$task-curve-$p.json"
      keep
    done
  done
fi

if part graphs; then
  dmlbench bench curve imagenet-resnet50 --device cuda --precision bf16 --local-batch 8,16,32,64,128 \
    --set compile=reduce-overhead --repeats "${REPEATS:-1}" --store "$S" \
    --out "$O/imagenet-resnet50-curve-bf16-graphs.json"
  keep
fi
