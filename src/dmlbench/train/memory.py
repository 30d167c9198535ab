"""What a worker's memory holds, counted: the model's own accounting and this rank's
shares (see :mod:`dmlbench.perfmodel.memory` for the prediction it feeds).

- :class:`SavedForBackward` counts the bytes autograd keeps for backward during a
  forward (each tensor once; parameters are not activations). It runs on the meta-device
  replica the FLOPs are counted on, so counting costs no memory.
- :class:`AsOnDevice` runs that replica's forward as the device would run it. torch's
  autocast acts per device type and has none for the meta device, so a bf16 run's
  activations were counted as float32 (ResNet-50 at 32 images on an H200: 2.85 GiB
  predicted, 1.77 measured); it casts each op's inputs as the device's autocast would,
  above autograd as autocast itself does, so autograd saves what it saves on the
  device. And attention on the meta device takes the unfused math path, which keeps
  every attention matrix; devices run a fused kernel that keeps the output and one
  log-sum-exp a row, and so does the replica here.
- :func:`local_bytes` is what this rank holds of some tensors: a sharded tensor's
  (DTensor's) local shard.
- :func:`resident_bytes`: the process's own memory now (a GPU: allocated; a CPU: its
  anonymous resident memory); :func:`restart_peak` and :func:`peak_bytes` its peak
  since the last restart (Linux resets a process's VmHWM when "5" is written to its
  ``clear_refs``), so the training steps' peak is told apart from an evaluation's.
- :func:`flight_records`: how many collectives torch's Flight Recorder keeps a record
  of, which a CPU worker's runtime memory grows with.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map


class SavedForBackward:
    """``with SavedForBackward(model) as saved: loss = f(model)`` → ``saved.bytes``."""

    def __init__(self, model: nn.Module) -> None:
        self.params = {id(p) for p in model.parameters()}
        self.seen: set[int] = set()
        self.bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        base = tensor._base if tensor._base is not None else tensor
        if id(base) not in self.params and id(base) not in self.seen:
            self.seen.add(id(base))
            self.bytes += base.numel() * base.element_size()
        return tensor

    def __enter__(self) -> SavedForBackward:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


# torch's automatic mixed precision op reference ("Autocast Op Reference"): the ops
# that run in the lower precision, and those that run in float32, per device type; every
# other op runs in the type its inputs promote to
_LOWER = {
    F.linear,
    F.conv1d,
    F.conv2d,
    F.conv3d,
    F.conv_transpose1d,
    F.conv_transpose2d,
    F.conv_transpose3d,
    F.prelu,
    F.scaled_dot_product_attention,
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.mm,
    torch.Tensor.mm,
    torch.bmm,
    torch.Tensor.bmm,
    torch.addmm,
    torch.Tensor.addmm,
    torch.baddbmm,
    torch.Tensor.baddbmm,
    torch.addbmm,
    torch.Tensor.addbmm,
}
_FLOAT32_LOSSES = {
    F.cross_entropy,
    F.nll_loss,
    F.mse_loss,
    F.l1_loss,
    F.smooth_l1_loss,
    F.huber_loss,
    F.kl_div,
    F.binary_cross_entropy,
    F.binary_cross_entropy_with_logits,
    F.poisson_nll_loss,
    F.soft_margin_loss,
    F.margin_ranking_loss,
    F.hinge_embedding_loss,
}
AUTOCAST_OPS: dict[str, tuple[set[Any], set[Any]]] = {
    "cpu": (
        _LOWER,
        _FLOAT32_LOSSES
        | {
            torch.cdist,
            torch.prod,
            torch.Tensor.prod,
            torch.trace,
            torch.quantile,
            torch.nanquantile,
            F.avg_pool3d,
            F.max_pool3d,
            F.adaptive_avg_pool3d,
            F.grid_sample,
            F.cosine_embedding_loss,
            F.triplet_margin_loss,
            F.multi_margin_loss,
            F.multilabel_margin_loss,
            F.ctc_loss,
        },
    ),
    "cuda": (
        _LOWER | {torch.mv, torch.Tensor.mv, torch.addmv, torch.Tensor.addmv},
        _FLOAT32_LOSSES
        | {
            F.layer_norm,
            F.group_norm,
            F.softmax,
            F.log_softmax,
            F.softmin,
            F.softplus,
            F.normalize,
            F.cosine_similarity,
            torch.softmax,
            torch.Tensor.softmax,
            torch.log_softmax,
            torch.Tensor.log_softmax,
            torch.exp,
            torch.Tensor.exp,
            torch.expm1,
            torch.log,
            torch.Tensor.log,
            torch.log1p,
            torch.pow,
            torch.Tensor.pow,
            torch.Tensor.__pow__,
            torch.rsqrt,
            torch.Tensor.rsqrt,
            torch.reciprocal,
            torch.Tensor.reciprocal,
            torch.sum,
            torch.Tensor.sum,
            torch.prod,
            torch.Tensor.prod,
            torch.cumsum,
            torch.Tensor.cumsum,
            torch.cumprod,
            torch.norm,
            torch.Tensor.norm,
            torch.cdist,
        },
    ),
}


# CUDA widens these ops' lower-precision input inside the kernel (``half_to_float``) and
# keeps that input for backward beside the float32 result: measured on an H200 (torch
# 2.11), a bf16 step of ResNet-50, ResNet-20 and the small GPT kept exactly its logits'
# bytes more than a cast and a float32 kernel do (benchmarks/autocast_check.py)
_KEEP_LOWER_INPUT = {
    "cuda": {
        F.cross_entropy,
        F.log_softmax,
        F.softmax,
        torch.softmax,
        torch.log_softmax,
        torch.Tensor.softmax,
        torch.Tensor.log_softmax,
    }
}


class _KeptCast(torch.autograd.Function):
    """A cast to float32 that keeps its input for backward, as CUDA's widening softmax
    kernels do."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.float()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad.to(x.dtype)


def _fused_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` by a fused kernel (the CPU's flash attention,
    which has a meta kernel): it saves what CUDA's flash and memory-efficient kernels
    save for backward."""
    if kwargs.get("enable_gqa") or query.dim() != 4:  # the kernel takes (batch, heads, …)
        return F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            **kwargs,
        )
    fused = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    output, _ = fused(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    return output


class AsOnDevice(TorchFunctionMode):
    """``with AsOnDevice("cuda", torch.bfloat16):`` runs a meta-device forward in the
    types ``torch.autocast("cuda", torch.bfloat16)`` gives on a CUDA device (no
    autocast: ``dtype=None``), and its attention by a fused kernel."""

    def __init__(self, device_type: str, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.lower, self.float32 = AUTOCAST_OPS.get(device_type, AUTOCAST_OPS["cuda"])
        self.keep_input = _KEEP_LOWER_INPUT.get(device_type, set())
        self.device_type = device_type
        self.dtype = dtype

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        to = None
        if self.dtype is not None:
            to = (
                self.dtype
                if func in self.lower
                else torch.float32
                if func in self.float32
                else None
            )
        first = args[0] if args else None
        if (
            to is torch.float32
            and func in self.keep_input
            and isinstance(first, torch.Tensor)
            and first.dtype in (torch.bfloat16, torch.float16)
        ):
            args = (_KeptCast.apply(first), *args[1:])
        if to is not None:

            def cast(value: Any) -> Any:
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    return value.to(to)
                return value

            args, kwargs = tree_map(cast, (args, kwargs))
        if func is F.scaled_dot_product_attention and not self._unfused(args, kwargs):
            return _fused_attention(*args, **kwargs)
        return func(*args, **kwargs)

    def _unfused(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether the device runs this attention by torch's math kernel, as the meta
        device does: a CPU's, with dropout (its flash kernel has none)."""
        dropout = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
        return self.device_type == "cpu" and bool(dropout)


def local_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of ``tensors`` this rank holds (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    total = 0
    for tensor in tensors:
        if isinstance(tensor, DTensor):
            tensor = tensor.to_local()
        if isinstance(tensor, torch.Tensor):
            total += tensor.numel() * tensor.element_size()
    return total


def optimizer_state(optimizer: torch.optim.Optimizer) -> list[Any]:
    """The tensors of an optimizer's state this rank holds (ZeRO's local optimizer's)."""
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer wraps one
    return [value for state in inner.state.values() for value in state.values()]


def state_slots(optimizer: torch.optim.Optimizer) -> float:
    """Optimizer state in parameter-sized tensors (Adam's two moments: 2), once it has
    stepped; used to predict state not yet made."""
    inner = getattr(optimizer, "optim", optimizer)
    slots = [
        sum(1 for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
        for state in inner.state.values()
    ]
    return max(slots, default=0)


def step_temporary_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Whole-model bytes the optimizer's step allocates and frees again, as torch 2.13
    runs it (measured: a 8 MiB MLP's step, glibc returning what it frees):

    - a fused kernel (dmlbench's default, ``optim.build``): none;
    - foreach Adam and AdamW: the second moment's square root, a tensor for every
      parameter (foreach Adam frees the gradient copy it makes to add L2 weight decay
      before it takes the root);
    - foreach SGD: a copy of the gradients of every parameter it adds weight decay to;
    - torch's one-tensor-at-a-time loops: one parameter's at a time, none counted;
    - LAMB (``optim.layerwise``, two state tensors): one tensor for every parameter.
    """
    inner = getattr(optimizer, "optim", optimizer)  # ZeRO's groups hold every parameter
    builtin = isinstance(inner, (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW))
    # a parameter-sized tensor whatever the decay: Adam's square root, LAMB's own
    adams = (torch.optim.Adam, torch.optim.AdamW)  # AdamW subclasses Adam only lately
    rooted = isinstance(inner, adams) if builtin else state_slots(optimizer) >= 2
    total = 0
    for group in optimizer.param_groups:
        if builtin and (group.get("fused") or not group.get("foreach")):
            continue
        if rooted or (builtin and group["weight_decay"]):  # or SGD's decayed copy
            total += sum(p.numel() * p.element_size() for p in group["params"])
    return total


def restart_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass  # not Linux: the peak then runs from the process's start


def peak_bytes(device: torch.device) -> int:
    """The most memory since :func:`restart_peak`: a GPU's allocated peak, or on a CPU
    the process's peak resident set less the file-backed part resident now (the code
    of torch's libraries that its kernels paged in, memory-mapped data: not the run's
    own memory, and still resident at the peak)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    status = _status()
    return max(0, status.get("VmHWM", 0) - status.get("RssFile", 0) - status.get("RssShmem", 0))


def _status() -> dict[str, int]:
    """The byte counts of /proc/self/status (empty off Linux)."""
    try:
        with open("/proc/self/status") as status:
            lines = status.read().splitlines()
    except OSError:
        return {}
    fields = {}
    for line in lines:
        name, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[name] = int(parts[0]) * 1024
    return fields


def resident_bytes(device: torch.device) -> int:
    """Memory the process holds now: a GPU's allocated bytes, or on a CPU its anonymous
    resident memory (the heap and anonymous maps; code and mapped files left out)."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return _status().get("RssAnon", 0)


# torch's own dump of the Flight Recorder as JSON (include collectives, only active)
FLIGHT_RECORDER_DUMP = "_dump_fr_trace_json"


def flight_records() -> int:
    """How many collectives c10d's Flight Recorder holds records of now, in this process
    (0 where this torch has none, or it is off: ``TORCH_FR_BUFFER_SIZE=0``). torch keeps
    one for every collective of every process group, gloo's too, for debugging hangs, up
    to ``TORCH_FR_BUFFER_SIZE`` (2,000 by default): about a KiB each, which a CPU worker's
    resident memory counts (see perfmodel.memory). Asked through torch's own JSON dump,
    once a run, after its steps: private API, so any failure reads as none."""
    try:
        c10d = importlib.import_module("torch._C._distributed_c10d")
        dump = json.loads(getattr(c10d, FLIGHT_RECORDER_DUMP)(True, False))
    except Exception:  # absent, renamed or refusing: nothing counted
        return 0
    entries = dump.get("entries") if isinstance(dump, dict) else None
    return len(entries) if isinstance(entries, list) else 0
