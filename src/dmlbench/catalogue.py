"""The names of the gradient exchanges, for help texts and spec docs that must not import
their registry (:data:`dmlbench.comm.exchange.EXCHANGES`, which needs torch); a unit
test keeps the two the same."""

from __future__ import annotations

SYNC_EXCHANGES = ("allreduce", "ddp", "zero1", "fsdp")  # synchronous SGD: closed division
OPEN_EXCHANGES = (  # another update than synchronous SGD's: open division
    *("fp16", "bf16", "powersgd", "signsgd", "ef-signsgd", "topk"),
    *("local-sgd", "gossip", "ps-sync", "ssp", "ps-async"),
)
