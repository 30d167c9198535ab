"""Compressed gradient exchanges (open division: each changes the update).

Through DDP's communication hooks, torch's own: ``fp16`` and ``bf16`` (buckets cast to
half precision, all-reduced, averaged in fp32 again) and ``powersgd`` (Vogels et al.
2019: each gradient matrix replaced by a rank-r product P Qᵀ found by one step of power
iteration, with error feedback and a warm-started Q; vectors and matrices too small to
gain stay uncompressed).

Written here, on the reference form's flat buffer (torch has none of them), with the
exchange timed as its own ``comm`` phase, encoding and decoding included:

- ``signsgd``: signSGD with majority vote (Bernstein et al. 2019). Each worker sends the
  signs of its gradient, one bit per parameter, and one float, its mean |g|; the update
  is the sign of the vote, scaled by the workers' mean |g| so the recipe's learning rate
  keeps its meaning.
- ``ef-signsgd``: scaled sign compression with error feedback (Karimireddy et al.
  2019). Each worker adds the error it kept to its gradient, sends sign and ‖p‖₁/d, and
  keeps what the compression lost; the update is the mean of the workers' compressed
  gradients.
- ``topk``: top-k sparsification with error feedback (Stich et al. 2018). Each worker
  sends the k = ratio·d largest entries of gradient plus kept error, as values and
  indices; the update is the mean of the sparse gradients.

Bytes counted are what each worker hands to the collectives (the input of an
all-gather, the buffer of an all-reduce).
"""

from __future__ import annotations

import math
from abc import abstractmethod

import torch
import torch.distributed as dist
from pydantic import Field
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

from dmlbench.comm.collectives import world_size
from dmlbench.comm.sync import AllReduceExchange, DDPExchange
from dmlbench.strict import StrictModel


class Fp16Exchange(DDPExchange):
    """DDP with torch's fp16 compression hook: buckets cast to half, all-reduced, cast
    back and divided in fp32. Half the bytes of ``ddp``; rounding changes the update."""

    name = "fp16"
    exact = False
    compress = staticmethod(default_hooks.fp16_compress_hook)

    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        self.bytes_sent += bucket.buffer().numel() * 2  # two bytes a value
        return self.compress(None, bucket)  # type: ignore[arg-type]


class Bf16Exchange(Fp16Exchange):
    """As ``fp16`` with bfloat16: fp32's range, 8 bits of mantissa."""

    name = "bf16"
    compress = staticmethod(default_hooks.bf16_compress_hook)


class PowerSGDOptions(StrictModel):
    rank: int = Field(2, ge=1, le=4096, description="r: rank of each matrix's approximation")
    start_step: int = Field(
        10, ge=2, description="plain all-reduce for the first steps (torch needs at least 2)"
    )
    error_feedback: bool = Field(True, description="keep what compression lost for next step")
    warm_start: bool = Field(True, description="start each power iteration from the last Q")
    min_compression_rate: float = Field(
        2.0, ge=0.0, description="compress a matrix only when it shrinks by this factor"
    )


class PowerSGDExchange(DDPExchange):
    """DDP with torch's PowerSGD hook (``PowerSGDState``, one state per run, the same
    random seed on every rank so the first Q agree)."""

    name = "powersgd"
    exact = False
    Options = PowerSGDOptions

    def prepare(self, model: nn.Module) -> nn.Module:
        options = self.options_as(PowerSGDOptions)
        self.state = powersgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=options.rank,
            start_powerSGD_iter=options.start_step,
            min_compression_rate=options.min_compression_rate,
            use_error_feedback=options.error_feedback,
            warm_start=options.warm_start,
        )
        self._previous: torch.futures.Future[torch.Tensor] | None = None
        return super().prepare(model)

    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        state, buffer = self.state, bucket.buffer()
        plain = state.iter < state.start_powerSGD_iter
        before = state.total_numel_after_compression
        # The hook chains three collectives per bucket (uncompressed tensors, P, Q), the
        # later ones from callbacks on gloo's threads. With two or more buckets those race
        # the next bucket's first collective, in a different order on each rank, and gloo
        # pairs mismatched messages ("collective mismatch"; ResNet-20's 1.08 MB fill two
        # buckets). Each bucket waits for the one before: the order is the same everywhere.
        if self._previous is not None and not plain:
            self._previous.wait()
        future = powersgd.powerSGD_hook(state, bucket)
        self._previous = future
        # the hook counts what it hands to its all-reduces: P and Q of each compressed
        # matrix, every uncompressed tensor whole
        numel = buffer.numel() if plain else state.total_numel_after_compression - before
        self.bytes_sent += numel * buffer.element_size()
        return future


class FlatCompressedExchange(AllReduceExchange):
    """An exchange that all-gathers one compressed message per worker from the flat
    gradient buffer and writes the decoded average back into it. The stop vote is a
    separate message every 16 steps."""

    vote_every = 16
    exact = False

    def exchange(self, stop: bool | None) -> bool:
        grads = self.flat[:-1]
        message = self.encode(grads)
        self.bytes_sent += message.numel() * message.element_size()
        if world_size() == 1:
            messages = [message]
        else:
            messages = [torch.empty_like(message) for _ in range(world_size())]
            dist.all_gather(messages, message)
        self.decode(messages, grads)
        return self._vote_alone(stop)

    @abstractmethod
    def encode(self, grads: torch.Tensor) -> torch.Tensor:
        """This worker's message (a 1-D tensor of the same size on every rank)."""

    @abstractmethod
    def decode(self, messages: list[torch.Tensor], grads: torch.Tensor) -> None:
        """Write the update all workers agree on into ``grads``, from every message."""

    def _keep_errors(self) -> None:
        """Error feedback's memory: what compression has not sent yet, per parameter."""
        self.error = torch.zeros_like(self.flat[:-1])


_SHIFTS = torch.arange(7, -1, -1, dtype=torch.uint8)


def pack_signs(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``scale``'s 4 bytes, then ``values >= 0`` as bits, 8 to a byte: one uint8 message."""
    bits = (values >= 0).to(torch.uint8)
    bits = nn.functional.pad(bits, (0, -bits.numel() % 8)).view(-1, 8)
    packed = (bits << _SHIFTS.to(bits.device)).sum(1, dtype=torch.uint8)
    return torch.cat([scale.reshape(1).float().view(torch.uint8), packed])


def unpack_signs(message: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(±1 float signs of length ``size``, scale) from ``pack_signs``'s message."""
    scale, packed = message[:4].view(torch.float32), message[4:]
    bits = (packed.unsqueeze(1) >> _SHIFTS.to(message.device)) & 1
    return bits.view(-1)[:size].float() * 2 - 1, scale


class SignSGDExchange(FlatCompressedExchange):
    """signSGD with majority vote; the vote's sign scaled by the workers' mean |g|."""

    name = "signsgd"

    def encode(self, grads: torch.Tensor) -> torch.Tensor:
        return pack_signs(grads, grads.abs().mean())

    def decode(self, messages: list[torch.Tensor], grads: torch.Tensor) -> None:
        votes = torch.zeros_like(grads)
        scale = torch.zeros(1, device=grads.device)
        for message in messages:
            signs, their_scale = unpack_signs(message, grads.numel())
            votes += signs
            scale += their_scale
        torch.sign(votes, out=grads)  # a tie is 0: no step for that parameter
        grads.mul_(scale / len(messages))


class EFSignSGDExchange(FlatCompressedExchange):
    """Scaled sign compression with error feedback; the mean of the compressed gradients."""

    name = "ef-signsgd"

    def prepare(self, model: nn.Module) -> nn.Module:
        prepared = super().prepare(model)
        self._keep_errors()
        return prepared

    def encode(self, grads: torch.Tensor) -> torch.Tensor:
        corrected = grads + self.error
        scale = corrected.abs().mean()
        self.error = corrected - scale * torch.where(corrected >= 0, 1.0, -1.0)
        return pack_signs(corrected, scale)

    def decode(self, messages: list[torch.Tensor], grads: torch.Tensor) -> None:
        grads.zero_()
        for message in messages:
            signs, scale = unpack_signs(message, grads.numel())
            grads.add_(signs, alpha=float(scale) / len(messages))


class TopKOptions(StrictModel):
    ratio: float = Field(
        0.01, gt=0.0, le=1.0, description="k / d: the share of entries each worker sends"
    )
    error_feedback: bool = Field(True, description="keep the entries not sent for next step")


class TopKExchange(FlatCompressedExchange):
    """Top-k sparsification with error feedback: values and their int32 indices (as
    float32 bits) in one message of 2k floats."""

    name = "topk"
    Options = TopKOptions

    def prepare(self, model: nn.Module) -> nn.Module:
        prepared = super().prepare(model)
        options = self.options_as(TopKOptions)
        self.error_feedback = options.error_feedback
        self.k = max(1, math.ceil(options.ratio * (self.flat.numel() - 1)))  # of d entries
        if self.error_feedback:
            self._keep_errors()
        return prepared

    def encode(self, grads: torch.Tensor) -> torch.Tensor:
        corrected = grads + self.error if self.error_feedback else grads
        indices = corrected.abs().topk(self.k, sorted=False).indices
        values = corrected[indices]
        if self.error_feedback:
            corrected[indices] = 0.0
            self.error = corrected
        return torch.cat([values, indices.to(torch.int32).view(torch.float32)])

    def decode(self, messages: list[torch.Tensor], grads: torch.Tensor) -> None:
        grads.zero_()
        for message in messages:
            values, indices = message.view(2, -1)
            grads.index_add_(0, indices.view(torch.int32).long(), values)
        grads.div_(len(messages))
