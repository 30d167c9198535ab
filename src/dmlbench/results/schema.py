"""The names a run's records are made of, shared by the trainer that writes them and
the store and reports that read them (so neither imports the other)."""

from __future__ import annotations

# Per step, in order; their sum is the step's wall time.
PHASES = ("data", "forward", "backward", "comm", "optimizer")
# Outside the steps. dmlbench does not checkpoint (yet), so there is no checkpoint phase.
EXTRA_PHASES = ("eval",)
ALL_PHASES = PHASES + EXTRA_PHASES
