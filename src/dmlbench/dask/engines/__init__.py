"""The two ways a fit trains on Dask, behind one interface (:class:`Engine`).

- :class:`Centralised` (``engine="centralised"``, the paper's architecture): per update
  the batch is split into ``ceil(B / grads_per_worker)`` gradient tasks; the driver sums
  their gradients and steps its optimizer. The cluster is scaled with the task count.
- :class:`DDP` (``engine="ddp"``): torch ``DistributedDataParallel`` across the Dask
  workers, one rank per worker; an epoch is one task per rank. The process group is a
  *generation*: when the wanted world size changes with the batch size, the ranks leave
  it and a new one starts (a fresh port) from rank 0's last state.

Both hold the training data on the workers once (scattered), and neither ever ships a
pickled model or optimizer per update.
"""

from dmlbench.dask.engines.base import Engine
from dmlbench.dask.engines.centralised import Centralised
from dmlbench.dask.engines.ddp import DDP

ENGINES: dict[str, type[Engine]] = {cls.name: cls for cls in (Centralised, DDP)}

__all__ = ["DDP", "ENGINES", "Centralised", "Engine"]
