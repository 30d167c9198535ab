"""Published models the replays need without building them: parameters, gradient bytes
and the kernels one training step launches, each from its released configuration.

dmlbench's own tasks count FLOPs and bytes from the model itself on the meta device
(:func:`dmlbench.perfmodel.cluster.task_cost`); a published run of a network dmlbench
does not build (BERT-Large in MLPerf) is described here instead.
"""

from __future__ import annotations

from dataclasses import dataclass


def bert_large_parameters() -> int:
    """BERT-Large's parameters from Google's released configuration
    (google-research/bert, ``uncased_L-24_H-1024_A-16/bert_config.json``: 24 layers,
    hidden 1,024, intermediate 4,096, vocabulary 30,522, 512 positions, 2 token types),
    encoder and pooler: 335,141,888 (the README rounds to 340M)."""
    layers, hidden, inner, vocab, positions, types = 24, 1024, 4096, 30522, 512, 2
    embeddings = (vocab + positions + types) * hidden + 2 * hidden
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden
    feed_forward = hidden * inner + inner + inner * hidden + hidden + 2 * hidden
    pooler = hidden * hidden + hidden
    return embeddings + layers * (attention + feed_forward) + pooler


@dataclass(frozen=True)
class Workload:
    parameters: int
    gradient_bytes: float  # all-reduced in fp16: 2 bytes a parameter
    kernels_per_step: int  # forward and backward (3× forward's), stated
    source: str
    # the all-reduce runs in buckets during backward (DDP, Horovod), or as one call
    # after the last backward of the step, nothing to hide it behind
    overlapped: bool = True


# ResNet-50 v1.5: 25,557,032 parameters (torchvision's resnet50, the same network);
# forward ≈ 53 convolutions + 53 batch norms (ReLU fused, as MXNet's NHWC kernels do) +
# 16 residual adds + pool/fc ≈ 126 kernels. BERT-Large: ~16 kernels a layer forward.
WORKLOADS = {
    "resnet": Workload(
        25_557_032,
        2 * 25_557_032,
        3 * 126,
        "ResNet-50 v1.5 (torchvision's resnet50 count); fp16 gradients (MXNet, Horovod)",
    ),
    "bert": Workload(
        bert_large_parameters(),
        2 * bert_large_parameters(),
        3 * (24 * 16 + 10),
        "BERT-Large, Google's configuration; fp16 gradients (apex, all-reduce after accumulation)",
        # NVIDIA's v0.7 run.sub leaves USE_DDP at 0, so run_pretraining.py gets
        # --allreduce_post_accumulation(_fp16): one flat fp16 all-reduce after backward
        overlapped=False,
    ),
}
