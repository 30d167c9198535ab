"""Does the meta-device replica that predicts memory run each op in the type a device's
autocast runs it in? (issue 54: "verifying the CUDA autocast memory lists")

dmlbench predicts a run's activation memory on the meta device, where torch's autocast
does nothing; ``AsOnDevice`` applies the device's op lists (``AUTOCAST_OPS``, written
from torch's "Autocast Op Reference") instead. This holds them against the device:

- **ops**: each op of the lists, and common ops on neither, called on the device under
  ``torch.autocast`` and on the meta device under ``AsOnDevice``, from float32 and from
  bfloat16 inputs: the output types must agree;
- **attention**: the bytes each of the device's attention kernels keeps for backward,
  against the fused kernel the replica counts;
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
from summary import run_main, write_summary

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


def check_attention(device: str) -> list[dict[str, Any]]:
    """The small GPT's attention (8 sequences, 4 heads of 32, 128 tokens, causal): the
    bytes each of the device's kernels keeps for backward, with and without dropout,
    against the meta replica's fused kernel (``AsOnDevice``)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = (8, 4, 128, 32)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for dropout in (0.0, 0.1):

            def attend(where: str, dtype: Any = dtype, dropout: float = dropout) -> Any:
                q, k, v = (t.requires_grad_() for t in _inputs([shape] * 3, dtype, where))
                with SavedForBackward(torch.nn.Identity()) as saved:
                    out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
                return saved.bytes, out

            with AsOnDevice(device):
                meta, _ = attend("meta")
            for backend in (None, *SDPBackend.__members__.values()):
                if backend in (SDPBackend.ERROR, SDPBackend.OVERRIDEABLE):
                    continue
                name = "default" if backend is None else backend.name
                try:
                    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                        kept, _ = attend(device)
                except RuntimeError as error:
                    kept = f"refused: {str(error).splitlines()[0][:60]}"
                rows.append(
                    {
                        "dtype": str(dtype),
                        "dropout": dropout,
                        "kernel": name,
                        "device_bytes": kept,
                        "meta_bytes": meta,
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


def kept_by_module(model: torch.nn.Module, forward: Callable[[], Any]) -> dict[str, int]:
    """The bytes kept for backward while each leaf module (and each attention) ran
    ``forward()``; a tensor kept twice counts where it was kept first."""
    totals: dict[str, int] = {}
    marks: dict[str, int] = {}
    saved = SavedForBackward(model)
    handles = []
    for name, module in model.named_modules():
        if next(module.children(), None) is None or name.endswith("attention"):

            def before(*_: Any, name: str = name) -> None:
                marks[name] = saved.bytes

            def after(*_: Any, name: str = name) -> None:
                totals[name] = totals.get(name, 0) + saved.bytes - marks[name]

            handles += [
                module.register_forward_pre_hook(before),
                module.register_forward_hook(after),
            ]
    with saved:
        forward()
    for handle in handles:
        handle.remove()
    totals["(whole step)"] = saved.bytes
    return totals


def module_differences(
    model: torch.nn.Module,
    replica: Callable[[], torch.nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[..., torch.Tensor],
    autocast: Callable[[], Any],
    dtype: torch.dtype | None,
) -> list[dict[str, Any]]:
    """The modules whose bytes kept for backward differ between the device and the meta
    replica, the largest difference first."""
    with autocast():
        real = kept_by_module(model, lambda: loss_fn(model(x), y).mean())
    with torch.device("meta"):
        shadow = replica()
    xm, ym = x.to("meta"), y.to("meta")
    with AsOnDevice(x.device.type, dtype):
        meta = kept_by_module(shadow, lambda: loss_fn(shadow(xm), ym).mean())
    parts = [(k, real.get(k, 0), meta.get(k, 0)) for k in real | meta]
    parts = sorted((p for p in parts if p[1] != p[2]), key=lambda p: p[2] - p[1])
    return [{"module": k, "device": r, "meta": m} for k, r, m in parts[:12]]


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
        if task.input_shape is None:
            sys.exit(f"{task_name}: its input shape is known only from its data")
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
            by_module = []
            if abs(counted.kept_bytes / saved.bytes - 1) > 0.01:  # where the bytes part
                dtype = torch.bfloat16 if precision == "bf16" else None
                by_module = module_differences(model, replica, x, y, loss_fn, autocast, dtype)
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
                    "by_module": by_module,
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
    attention = check_attention(args.device)
    for row in attention:
        kept = row["device_bytes"]
        kept = f"{kept / 2**20:8.2f} MiB" if isinstance(kept, int) else kept
        print(
            f"attention {row['dtype']:15} dropout {row['dropout']}: {row['kernel']:20} keeps "
            f"{kept} for backward; meta {row['meta_bytes'] / 2**20:.2f} MiB"
        )
    models = check_models(args.device, precisions)
    for row in models:
        print(
            f"{row['task']:18} b={row['local_batch']:<3} {row['precision']:5} kept for backward: "
            f"device {row['device_bytes'] / 2**20:9.2f} MiB, meta {row['meta_bytes'] / 2**20:9.2f} "
            f"MiB ({100 * row['error']:+.1f}%)"
        )
        for part in row["by_module"]:
            real, meta = part["device"], part["meta"]
            print(f"    {part['module']:32} device {real:>10,} B, meta {meta:>10,} B")
    differ = [f"{r['op']} ({r['inputs']})" for r in ops if not r["same"]]
    print(
        f"ops: {len(ops) - len(differ)} of {len(ops)} agree"
        + (f"; differ: {', '.join(differ)}" if differ else "")
    )
    if args.out:
        device = torch.cuda.get_device_name() if args.device == "cuda" else args.device
        fields = {"device": device, "ops": ops, "attention": attention, "models": models}
        write_summary(args.out, fields)


if __name__ == "__main__":
    run_main(main)
