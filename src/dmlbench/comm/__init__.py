"""Gradient exchange algorithms and small collective helpers, each timed the same way."""

from dmlbench.comm.exchange import (
    EXCHANGES,
    AllReduceExchange,
    DDPExchange,
    GradientExchange,
    load_modules,
    make_exchange,
)

__all__ = [
    "EXCHANGES",
    "AllReduceExchange",
    "DDPExchange",
    "GradientExchange",
    "load_modules",
    "make_exchange",
]
