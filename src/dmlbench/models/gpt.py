"""A decoder-only transformer with GPT-2's architecture (Radford et al. 2019).

Learned token and position embeddings, ``depth`` pre-norm blocks (causal self-attention
on ``scaled_dot_product_attention``, then a 4×-wide MLP with tanh-approximated GELU), a
final LayerNorm and a language-model head tied to the token embedding. GPT-2's
initialisation: N(0, 0.02) everywhere, the projections back into the residual stream
scaled by 1/√(2·depth). GPT-2 small (``GPT(50257, 1024)``) has exactly 124,439,808
parameters.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F
import torch.overrides
from torch import nn
from torch.utils.checkpoint import checkpoint


def _recompute_as_forward() -> tuple[AbstractContextManager[None], AbstractContextManager[None]]:
    """Checkpoint's ``context_fn``: recompute under the torch-function modes forward ran
    under, as checkpoint already does for autocast. Autograd's engine runs backward
    without them, and a mode that changes what forward computes (dmlbench counts a
    step's memory on a meta replica under one) would otherwise recompute something
    else."""
    current: Callable[[], list[Any]] = getattr(
        torch.overrides, "_get_current_function_mode_stack", list
    )
    modes = current()

    @contextlib.contextmanager
    def again() -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for mode in modes:
                stack.enter_context(mode)
            yield

    return contextlib.nullcontext(), again()


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        heads = self.qkv(x).view(batch, tokens, 3, self.heads, width // self.heads)
        q, k, v = heads.permute(2, 0, 3, 1, 4)
        drop = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, width))


class DecoderBlock(nn.Module):
    """GPT-2's block: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads, dropout)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attention(self.norm1(x)))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    """Token ids ``(batch, tokens)`` → next-token logits ``(batch, tokens, vocab)``.

    ``checkpoint_activations`` keeps only each block's input through forward and computes
    the rest again in backward (activation checkpointing): less memory, about a third
    more compute.
    """

    def __init__(
        self,
        vocab: int,
        context: int,
        *,
        width: int = 768,
        depth: int = 12,
        heads: int = 12,
        dropout: float = 0.0,
        checkpoint_activations: bool = False,
    ) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"GPT: the width ({width}) must split into {heads} heads")
        self.context, self.depth, self.width = context, depth, width
        self.checkpoint_activations = checkpoint_activations
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(DecoderBlock(width, heads, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied: one matrix reads and writes tokens
        self.apply(self._init)
        for block in self.blocks:
            assert isinstance(block, DecoderBlock)
            for projection in (block.attention.proj, block.mlp[2]):
                assert isinstance(projection, nn.Linear)
                nn.init.normal_(projection.weight, std=0.02 / math.sqrt(2 * depth))

    def shard_units(self) -> list[nn.Module]:
        """What FSDP shards as units: the blocks (the embeddings, the last norm and the
        tied head stay with the root)."""
        return list(self.blocks)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        tokens = ids.shape[1]
        if tokens > self.context:
            raise ValueError(f"GPT: {tokens} tokens, the context holds {self.context}")
        where = torch.arange(tokens, device=ids.device)
        x = self.drop(self.tokens(ids) + self.positions(where))
        for block in self.blocks:
            if self.checkpoint_activations and self.training:
                x = checkpoint(block, x, use_reentrant=False, context_fn=_recompute_as_forward)
            else:
                x = block(x)
        return self.head(self.norm(x))

    def flops_per_token(self, tokens: int | None = None) -> int:
        """Training FLOPs per token as torchtitan counts them (Kaplan et al.'s 6·N plus
        attention): 6 × the parameters every token multiplies (all but the position
        embedding; the tied head counted once) + 12 · depth · width · ``tokens``
        (the scores and the weighted sum, forward and backward, causal mask ignored)."""
        tokens = self.context if tokens is None else tokens
        weights = sum(p.numel() for p in self.parameters()) - self.positions.weight.numel()
        return 6 * weights + 12 * self.depth * self.width * tokens
