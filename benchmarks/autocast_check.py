"""Does the meta-device replica that predicts memory run each op in the type a device's
autocast runs it in? (issue 54: "verifying the CUDA autocast memory lists")

dmlbench predicts a run's activation memory on the meta device, where torch's autocast
does nothing; ``AsOnDevice`` applies the device's op lists (``AUTOCAST_OPS``, written
from torch's "Autocast Op Reference") instead. This holds them against the device:

- **ops**: each op of the lists, and common ops on neither, called on the device under
  ``torch.autocast`` and on the meta device under ``AsOnDevice``, from float32 and from
  bfloat16 inputs: the output types must agree;
- **models**: the bytes a training step's forward keeps for backward, counted on the
  device (the real model, the trainer's layout and precision) and on the meta replica as
  a run counts them (``count_step_flops``), in fp32, tf32 (CUDA) and bf16.

    python benchmarks/autocast_check.py --device cuda --out autocast.json
    python benchmarks/autocast_check.py --device cpu     # the CPU's lists, on this machine
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dmlbench.train.hardware import autocast_for, check_precision, tf32_math, to_channels_last
from dmlbench.train.memory import AsOnDevice, SavedForBackward

sys.path.insert(0, str(Path(__file__).parent))
from summary import write_summary

# (name, the call, its inputs' shapes); inputs are random, of the type under test
OPS: list[tuple[str, Callable[..., torch.Tensor], list[tuple[int, ...]]]] = [
    ("linear", F.linear, [(4, 8), (6, 8)]),
    ("conv1d", F.conv1d, [(2, 4, 9), (5, 4, 3)]),
    ("conv2d", F.conv2d, [(2, 4, 9, 9), (5, 4, 3, 3)]),
    ("conv3d", F.conv3d, [(2, 4, 5, 5, 5), (5, 4, 3, 3, 3)]),
    ("conv_transpose2d", F.conv_transpose2d, [(2, 4, 9, 9), (4, 5, 3, 3)]),
    ("prelu", F.prelu, [(4, 8), (1,)]),
    ("matmul", torch.matmul, [(4, 8), (8, 6)]),
    ("Tensor.__matmul__", torch.Tensor.__matmul__, [(4, 8), (8, 6)]),
    ("mm", torch.mm, [(4, 8), (8, 6)]),
    ("bmm", torch.bmm, [(3, 4, 8), (3, 8, 6)]),
    ("addmm", torch.addmm, [(4, 6), (4, 8), (8, 6)]),
    ("baddbmm", torch.baddbmm, [(3, 4, 6), (3, 4, 8), (3, 8, 6)]),
    ("addbmm", torch.addbmm, [(4, 6), (3, 4, 8), (3, 8, 6)]),
    ("mv", torch.mv, [(4, 8), (8,)]),
    ("addmv", torch.addmv, [(4,), (4, 8), (8,)]),
    ("sdpa", F.scaled_dot_product_attention, [(2, 4, 16, 8)] * 3),
    ("layer_norm", lambda x: F.layer_norm(x, (8,)), [(4, 8)]),
    ("group_norm", lambda x: F.group_norm(x, 2), [(2, 4, 3, 3)]),
    ("softmax", lambda x: F.softmax(x, -1), [(4, 8)]),
    ("Tensor.softmax", lambda x: x.softmax(-1), [(4, 8)]),
    ("log_softmax", lambda x: F.log_softmax(x, -1), [(4, 8)]),
    ("softplus", F.softplus, [(4, 8)]),
    ("normalize", F.normalize, [(4, 8)]),
    ("cosine_similarity", F.cosine_similarity, [(4, 8), (4, 8)]),
    ("exp", torch.exp, [(4, 8)]),
    ("log", lambda x: torch.log(x.abs() + 1), [(4, 8)]),
    ("pow", lambda x: torch.pow(x, 2), [(4, 8)]),
    ("Tensor.__pow__", lambda x: x**2, [(4, 8)]),
    ("rsqrt", lambda x: torch.rsqrt(x.abs() + 1), [(4, 8)]),
    ("expm1", torch.expm1, [(4, 8)]),
    ("log1p", lambda x: torch.log1p(x.abs()), [(4, 8)]),
    ("reciprocal", torch.reciprocal, [(4, 8)]),
    ("softmin", lambda x: F.softmin(x, -1), [(4, 8)]),
    ("prod", lambda x: torch.prod(x, -1), [(4, 8)]),
    ("cumprod", lambda x: torch.cumprod(x, 0), [(4, 8)]),
    ("sum", torch.sum, [(4, 8)]),
    ("Tensor.sum", lambda x: x.sum(), [(4, 8)]),
    ("cumsum", lambda x: torch.cumsum(x, 0), [(4, 8)]),
    ("norm", torch.norm, [(4, 8)]),
    ("cdist", torch.cdist, [(4, 8), (5, 8)]),
    (
        "cross_entropy",
        lambda x: F.cross_entropy(x, torch.zeros(4, dtype=torch.long, device=x.device)),
        [(4, 8)],
    ),
    ("mse_loss", F.mse_loss, [(4, 8), (4, 8)]),
    ("l1_loss", F.l1_loss, [(4, 8), (4, 8)]),
    ("binary_cross_entropy", lambda x: F.binary_cross_entropy(x.sigmoid(), x.sigmoid()), [(4, 8)]),
    ("bce_with_logits", F.binary_cross_entropy_with_logits, [(4, 8), (4, 8)]),
    ("kl_div", lambda x, y: F.kl_div(x, y, reduction="batchmean"), [(4, 8), (4, 8)]),
    # on neither list: the type the inputs promote to
    ("batch_norm (training)", lambda x: F.batch_norm(x, None, None, training=True), [(4, 3, 5, 5)]),
    ("relu", F.relu, [(4, 8)]),
    ("silu", F.silu, [(4, 8)]),
    ("tanh", torch.tanh, [(4, 8)]),
    ("mean", torch.mean, [(4, 8)]),
    ("gelu", F.gelu, [(4, 8)]),
    ("add", torch.add, [(4, 8), (4, 8)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), [(2, 3, 8, 8)]),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, 1), [(2, 3, 8, 8)]),
    ("dropout", lambda x: F.dropout(x, 0.1), [(4, 8)]),
]
# a model's step: (task, local batch)
MODELS = [("imagenet-resnet50", 8), ("kjv-gpt", 8), ("cifar10-resnet20", 16)]


def _inputs(shapes: list[tuple[int, ...]], dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(shape, dtype=dtype).to(device) for shape in shapes]


def check_ops(device: str) -> list[dict[str, Any]]:
    """Each op's output type under the device's autocast and under ``AsOnDevice``."""
    rows = []
    for name, op, shapes in OPS:
        for given in (torch.float32, torch.bfloat16):
            try:
                with torch.autocast(device, dtype=torch.bfloat16):
                    real = str(op(*_inputs(shapes, given, device)).dtype)
            except RuntimeError as error:  # e.g. an op autocast refuses
                real = f"refused: {str(error).splitlines()[0][:80]}"
            with AsOnDevice(device, torch.bfloat16):
                meta = str(op(*_inputs(shapes, given, "meta")).dtype)
            rows.append(
                {
                    "op": name,
                    "inputs": str(given),
                    "device": real,
                    "meta": meta,
                    "same": real == meta,
                }
            )
    return rows


def _batch(task: Any, batch: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    shape, outputs = task.input_shape, task.num_outputs
    if task.loss == "next_token":
        ids = torch.randint(0, outputs, (batch, *shape))
        return ids.to(device), ids.to(device)
    return torch.randn(batch, *shape).to(device), torch.randint(0, outputs, (batch,)).to(device)


def check_models(device_name: str, precisions: list[str]) -> list[dict[str, Any]]:
    """A step's bytes kept for backward: the real model on the device against the meta
    replica's count, as a run makes it."""
    from dmlbench.models import build_model
    from dmlbench.models.losses import LOSSES
    from dmlbench.tasks import get_task
    from dmlbench.train.measures import count_step_flops

    device = torch.device(device_name)
    rows = []
    for task_name, batch in MODELS:
        task = get_task(task_name)
        spec, loss_fn = task.recipe.model, LOSSES[task.loss][0]
        layout = device.type == "cuda" and len(task.input_shape) == 3  # the trainer's auto

        def replica(spec: Any = spec, task: Any = task, layout: bool = layout) -> torch.nn.Module:
            model = build_model(spec, task.input_shape, task.num_outputs)
            return to_channels_last(model) if layout else model

        for precision in precisions:
            torch.manual_seed(0)
            model = replica().to(device)
            x, y = _batch(task, batch, device_name)
            if layout:
                x = x.contiguous(memory_format=torch.channels_last)
            with tf32_math(False):  # autocast_for sets tf32 for the process: undo after
                autocast = autocast_for(precision, device)
                with SavedForBackward(model) as saved, autocast():
                    out = model(x)
                    loss_fn(out, y).mean()
                counted = count_step_flops(replica, x, y, loss_fn, device, precision)
            rows.append(
                {
                    "task": task_name,
                    "local_batch": batch,
                    "precision": precision,
                    "device_bytes": saved.bytes,
                    "meta_bytes": counted.kept_bytes,
                    "error": counted.kept_bytes / saved.bytes - 1,
                    "output_device": out.numel() * out.element_size(),
                    "output_meta": counted.output_bytes,
                }
            )
            del model, out
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    precisions = ["fp32", "bf16"]
    with contextlib.suppress(Exception):
        check_precision("tf32", torch.device(args.device))
        precisions.insert(1, "tf32")
    ops = check_ops(args.device)
    for row in ops:
        mark = "ok" if row["same"] else "DIFFERS"
        real, meta = row["device"], row["meta"]
        print(f"{row['op']:24} from {row['inputs']:15} {real:16} meta {meta:16} {mark}")
    models = check_models(args.device, precisions)
    for row in models:
        print(
            f"{row['task']:18} b={row['local_batch']:<3} {row['precision']:5} kept for backward: "
            f"device {row['device_bytes'] / 2**20:9.2f} MiB, meta {row['meta_bytes'] / 2**20:9.2f} "
            f"MiB ({100 * row['error']:+.1f}%)"
        )
    differ = [f"{r['op']} ({r['inputs']})" for r in ops if not r["same"]]
    print(
        f"ops: {len(ops) - len(differ)} of {len(ops)} agree"
        + (f"; differ: {', '.join(differ)}" if differ else "")
    )
    if args.out:
        device = torch.cuda.get_device_name() if args.device == "cuda" else args.device
        write_summary(args.out, {"device": device, "ops": ops, "models": models})


if __name__ == "__main__":
    main()
