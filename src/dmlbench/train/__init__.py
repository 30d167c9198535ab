"""One worker's training loop: :class:`~dmlbench.train.trainer.Trainer`, its phase
timers (``timers``), the worker's entry point (``worker``), and what the launcher
decides for it (``allocator``: which C allocator the workers preload).

The package imports nothing itself, so that the launcher's light modules of it do not
import torch: import from the modules.
"""
