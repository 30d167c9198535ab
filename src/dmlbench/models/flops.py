"""A model's FLOPs per training step: what the trainer's MFU and the performance
model's compute term both start from, so it sits below both.

:func:`step_flops` counts one step (forward and backward) with torch's flop counter,
on a copy of the model so the run's weights, statistics and random streams are
untouched (on the meta device it needs no data and no memory). The counter knows the
GPU kernels of ``scaled_dot_product_attention`` but not the CPU one; its formulas are
registered for that kernel here, so attention counts on every device. Its convolution
backward counts a grouped convolution's weight gradient ``groups`` times over (to torch
2.13 at least: pytorch/pytorch#183405); the count here divides it, so ResNeXt's step is
3× its forward as for any convolution, not 4.7×."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from functools import cache

import torch
from torch import nn
from torch.utils.flop_counter import (
    FlopCounterMode,
    conv_flop_count,
    flop_registry,
    register_flop_formula,
    sdpa_backward_flop,
    sdpa_backward_flop_count,
    sdpa_flop,
)


@contextlib.contextmanager
def forked_rng(device: torch.device) -> Iterator[None]:
    """Random draws inside leave the CPU's (and ``device``'s) random streams as they were."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        yield


def _count_cpu_attention() -> None:
    """Count the CPU's fused attention kernel as torch counts the GPU's (forward: the
    scores and the weighted sum; backward: both again and their gradients)."""
    aten = torch.ops.aten
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", sdpa_flop),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", sdpa_backward_flop),
    ):
        op = getattr(aten, name, None)
        if op is not None and op not in flop_registry and op.default not in flop_registry:
            register_flop_formula(op, get_raw=True)(formula)  # torch's, already shape-wrapped


_count_cpu_attention()


def _swap(shape: Sequence[int]) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


def _weight_gradient_flops(
    grad_out: Sequence[int], x: Sequence[int], weight: Sequence[int], transposed: bool
) -> int:
    """The weight gradient's FLOPs as torch's formula counts them (all groups as one)."""
    a, b = (grad_out, x) if transposed else (x, grad_out)
    return int(conv_flop_count(_swap(a), _swap(b), _swap(weight), transposed=False))


_torch_conv_backward = flop_registry[torch.ops.aten.convolution_backward]  # shape-wrapped


@cache
def _torch_overcounts_groups() -> bool:
    """Whether this torch counts a grouped convolution's weight gradient ``groups``
    times: a depthwise 1×1 convolution of 4 channels takes 8 FLOPs forward, and its input
    and weight gradients 8 each."""
    shape, weight = [1, 4, 1, 1], [4, 1, 1, 1]
    args = (shape, shape, weight, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 4)
    total = _torch_conv_backward(*args, [True, True, False], out_val=[shape, weight, None])
    return int(total) != 16


def _conv_backward_flop(
    grad_out_shape: Sequence[int],
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    bias: object,
    stride: object,
    padding: object,
    dilation: object,
    transposed: bool,
    output_padding: object,
    groups: int,
    output_mask: Sequence[bool],
    out_shape: Sequence[Sequence[int] | None],
    **kwargs: object,
) -> int:
    """torch's convolution backward count, its weight gradient divided by ``groups``."""
    args = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed)
    flops = int(_torch_conv_backward(*args, output_padding, groups, output_mask, out_val=out_shape))
    weight = out_shape[1]
    if groups > 1 and output_mask[1] and weight is not None and _torch_overcounts_groups():
        term = _weight_gradient_flops(grad_out_shape, x_shape, weight, transposed)
        flops -= term - term // groups
    return flops


def _attention_backward_flop(
    grad_out_shape: Sequence[int],
    query_shape: Sequence[int],
    key_shape: Sequence[int],
    value_shape: Sequence[int],
    *args: object,
    **kwargs: object,
) -> int:
    """A fused attention's backward as the model's FLOPs: the four products of its
    gradients, without the kernel's recomputation of the scores (MFU counts the model's
    work; the unfused path, which keeps the scores, does exactly these four)."""
    b, heads, s_q, d_q = query_shape
    s_k = key_shape[2]
    recompute = 2 * b * heads * s_q * d_q * s_k
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape) - recompute


def step_flops(
    model: nn.Module, step: Callable[[nn.Module], torch.Tensor], device: torch.device
) -> int:
    """FLOPs of ``step(model)`` (a forward pass returning the loss) and its backward, on a
    copy of ``model``; the caller's random streams are restored after. Model FLOPs: a
    grouped convolution's weight gradient once, a fused attention's backward without
    its recomputation."""
    shadow = copy.deepcopy(model)
    grouped = {
        torch.ops.aten.convolution_backward: _conv_backward_flop,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: (
            _attention_backward_flop
        ),
    }
    with (
        forked_rng(device),
        FlopCounterMode(display=False, custom_mapping=grouped) as counter,
    ):
        step(shadow).backward()
    return int(counter.get_total_flops())
