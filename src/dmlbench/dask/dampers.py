"""Dampers: batch-size schedules that reduce gradient noise as training goes on.

A damper is a pure function of the training state: called with a :class:`TrainState`
it returns a :class:`Damping` (the batch size to use now and a learning-rate factor),
and it keeps no state of its own, so a fit can be resumed, cloned or pickled at any
point. Every damper honours ``max_batch_size``: past it the batch stays at the
maximum and the learning rate decays by the same factor instead (the hybrid rule of
Sievert & Shah's AdaDamp paper and of Smith et al.'s "Don't decay the learning rate,
increase the batch size").

- :class:`Constant`: the same batch throughout.
- :class:`GeoDamp`: ``initial × factor^⌊epoch / delay⌋`` (geometric growth every
  ``delay`` epochs).
- :class:`GeoDampLR`: the learning-rate twin of GeoDamp at a fixed batch: the rate
  decays by ``factor`` every ``delay`` epochs.
- :class:`PadaDamp`: ``initial + ⌈rate × updates⌉`` (linear growth in model updates).
- :class:`AdaDamp`: ``initial × loss₀ / loss`` (the batch grows as the loss falls).
- :class:`NoiseScaleDamp`: the batch from a running estimate of McCandlish et al.'s
  simple gradient noise scale ``B_simple = tr(Σ) / |G|²``, see
  :func:`dmlbench.noise.noise_scale_estimate`.

:data:`PAPER_SCHEDULES` holds the adadamp paper's five schedules, ready to use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import Field, dataclass, fields
from typing import Any, ClassVar

from dmlbench.errors import SpecError


@dataclass(frozen=True)
class TrainState:
    """What a damper may look at: where training is, not how it got there."""

    epoch: float = 0.0  # examples seen / training examples
    updates: int = 0  # model updates so far
    loss: float | None = None  # the latest training loss
    initial_loss: float | None = None  # the loss before the first update
    noise_scale: float | None = None  # running estimate of B_simple, if measured


@dataclass(frozen=True)
class Damping:
    batch_size: int
    lr_factor: float = 1.0  # multiplies the optimizer's base learning rate


class Damper:
    """Base class: subclasses give :meth:`wanted`; the hybrid rule is applied here. Every
    damper is a frozen dataclass of its options."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    initial: int
    max_batch_size: int | None

    def wanted(self, state: TrainState) -> float:
        raise NotImplementedError

    def lr_decay(self, state: TrainState) -> float:
        return 1.0

    def __call__(self, state: TrainState) -> Damping:
        wanted = max(1.0, float(self.wanted(state)))
        if not math.isfinite(wanted):
            wanted = float(self.max_batch_size or self.initial)
        batch = math.ceil(wanted - 1e-9)
        factor = self.lr_decay(state)
        if self.max_batch_size is not None and batch > self.max_batch_size:
            factor *= self.max_batch_size / wanted  # decay the rate instead of growing more
            batch = self.max_batch_size
        return Damping(batch, factor)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments (scikit-learn's protocol, so ``clone`` copies a damper)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Refuses impossible options; subclasses add their own after this one's."""
        if self.initial < 1:
            raise ValueError(f"{type(self).__name__}: initial batch size must be ≥ 1")
        if self.max_batch_size is not None and self.max_batch_size < self.initial:
            raise ValueError(
                f"{type(self).__name__}: max_batch_size {self.max_batch_size} is "
                f"below the initial batch size {self.initial}"
            )


@dataclass(frozen=True)
class Constant(Damper):
    initial: int = 32
    max_batch_size: int | None = None

    def wanted(self, state: TrainState) -> float:
        return self.initial


@dataclass(frozen=True)
class GeoDamp(Damper):
    initial: int = 32
    delay: float = 60.0  # epochs between increases
    factor: float = 5.0
    max_batch_size: int | None = None

    def _check(self) -> None:
        super()._check()
        if self.delay <= 0 or self.factor < 1:
            raise ValueError(f"{type(self).__name__}: delay must be > 0 and factor ≥ 1")

    def wanted(self, state: TrainState) -> float:
        return self.initial * self.factor ** math.floor(state.epoch / self.delay)


@dataclass(frozen=True)
class GeoDampLR(GeoDamp):
    """GeoDamp's twin at a fixed batch size: the learning rate falls by ``factor``."""

    def wanted(self, state: TrainState) -> float:
        return self.initial

    def lr_decay(self, state: TrainState) -> float:
        return float(self.factor ** -math.floor(state.epoch / self.delay))


@dataclass(frozen=True)
class PadaDamp(Damper):
    initial: int = 32
    rate: float = 0.1  # examples added to the batch per model update
    max_batch_size: int | None = None

    def _check(self) -> None:
        super()._check()
        if self.rate < 0:
            raise ValueError("PadaDamp: rate must be ≥ 0")

    def wanted(self, state: TrainState) -> float:
        return self.initial + math.ceil(self.rate * state.updates)


@dataclass(frozen=True)
class AdaDamp(Damper):
    initial: int = 32
    max_batch_size: int | None = None

    def wanted(self, state: TrainState) -> float:
        if not state.loss or not state.initial_loss or state.loss <= 0:
            return self.initial
        return self.initial * state.initial_loss / state.loss


@dataclass(frozen=True)
class NoiseScaleDamp(Damper):
    """Batch = ``scale × B_simple`` once measured (``initial`` until then), never below
    ``initial``."""

    initial: int = 32
    scale: float = 1.0
    max_batch_size: int | None = None

    def _check(self) -> None:
        super()._check()
        if self.scale <= 0:
            raise ValueError("NoiseScaleDamp: scale must be > 0")

    def wanted(self, state: TrainState) -> float:
        if state.noise_scale is None or not math.isfinite(state.noise_scale):
            return self.initial
        return max(self.initial, self.scale * state.noise_scale)


DAMPERS: dict[str, type[Damper]] = {
    cls.__name__: cls for cls in (Constant, GeoDamp, GeoDampLR, PadaDamp, AdaDamp, NoiseScaleDamp)
}


# The adadamp paper's five schedules (Sievert & Shah, WRN-16-4 on CIFAR-10, about 200
# epochs): at epochs 60, 120 and 180 the batch grows ×5 until its maximum, after which
# the learning rate falls ×5 instead (the hybrid rule above). "128 → 128" is the
# learning-rate decay baseline; "256 → 5,120 (*2)" starts at twice the batch. Past its
# maximum a schedule's rate falls by what the batch would have grown: 256 → 1,280 →
# 5,120 (×0.8 in the rate, since 6,400 was wanted), then ×0.16 at epoch 180.
PAPER_EPOCHS = 200
PAPER_SCHEDULES: dict[str, Damper] = {
    "128 → 128": GeoDamp(initial=128, delay=60, factor=5, max_batch_size=128),
    "128 → 640": GeoDamp(initial=128, delay=60, factor=5, max_batch_size=640),
    "128 → 3,200": GeoDamp(initial=128, delay=60, factor=5, max_batch_size=3_200),
    "128 → 16,000": GeoDamp(initial=128, delay=60, factor=5, max_batch_size=16_000),
    "256 → 5,120 (*2)": GeoDamp(initial=256, delay=60, factor=5, max_batch_size=5_120),
}


DAMPER_NAMES = {name.lower(): cls for name, cls in DAMPERS.items()}


def make_damper(
    name: str,
    initial: int,
    options: dict[str, float | int | None],
    flags: Mapping[str, str] | None = None,
) -> Damper:
    """A damper from its (case-insensitive) name, its first batch and the options given
    (``None``: not given); an option the damper does not take is refused in one line,
    which names each option as ``flags`` says the caller takes it (by default
    ``--field-name``)."""
    cls = DAMPER_NAMES.get(name.lower())
    if cls is None:
        raise SpecError(f"unknown damper {name!r}: choose {', '.join(DAMPER_NAMES)}")
    given = {key: value for key, value in options.items() if value is not None}
    takes = set(cls.__dataclass_fields__) - {"initial"}
    extra = sorted(set(given) - takes)
    if extra:

        def flag(field: str) -> str:
            return (flags or {}).get(field) or "--" + field.replace("_", "-")

        said = ", ".join(map(flag, extra))
        allowed = ", ".join(map(flag, sorted(takes))) or "none"
        raise SpecError(f"damper {cls.__name__} does not take {said} (it takes {allowed})")
    try:
        return cls(**{"initial": initial, **given})
    except (TypeError, ValueError) as error:
        raise SpecError(str(error)) from None
