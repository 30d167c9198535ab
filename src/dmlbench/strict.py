"""The base of every typed spec. Lives apart from ``dmlbench.spec`` so that any package
(``netem`` included) can use it without importing the run spec."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Refuses unknown keys, so a typo in a spec never passes silently, and infinite or
    NaN numbers, which no spec value means."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)
