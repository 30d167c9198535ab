"""Price tables for cost figures: data in YAML, never hard-coded in the analysis."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from dmlbench.errors import SpecError, known_keys
from dmlbench.files import load_mapping_file
from dmlbench.names import shorten

BUILTIN_PRICES = Path(__file__).with_name("prices.yaml")
DEFAULT_PRICE = "gcp-n1-standard-4"


@dataclass(frozen=True)
class Price:
    name: str
    per_worker_hour: float
    currency: str = "USD"
    source: str = ""
    # what one worker is: "cpu" (a machine without an accelerator), a part of an
    # accelerator's name ("T4" prices "Tesla T4"), or None: any (a number given by hand)
    device: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} at {self.per_worker_hour:g} {self.currency}/worker-hour"

    def covers(self, device: str) -> bool:
        """Whether this prices a worker on ``device`` (``cpu`` or an accelerator's name):
        a CPU machine's price says nothing of what an A100 costs."""
        if self.device is None:
            return True
        if self.device.lower() == "cpu":
            return device.lower() == "cpu"
        return device.lower() != "cpu" and self.device.lower() in device.lower()

    def unpriced(self, devices: str) -> str:
        """Why runs on ``devices`` (a comma-separated list) get no cost at this price,
        and how to give them one: first the built-in entries that price them, by name."""
        ran_on = devices.split(", ")
        built_in = [
            entry.name
            for entry in _built_in()
            if entry.device and any(entry.covers(device) for device in ran_on)
        ]
        named = f"--price {' or '.join(built_in)} (built in), " if built_in else ""
        return (
            f"no cost: {self.name} prices {self.what}, and the runs ran on {devices}; "
            f"{named}--price PER_WORKER_HOUR, or --prices FILE with an entry whose device "
            "names theirs (e.g. device: A100), prices them"
        )

    @property
    def what(self) -> str:
        """What it prices, for a line that says why a run was left unpriced."""
        if self.device is None:
            return "any worker"
        return "a CPU machine" if self.device.lower() == "cpu" else f"a worker on {self.device}"


MAX_PRICE = 1e6  # per worker-hour: past any machine rented anywhere


def _checked(value: float, what: str) -> float:
    """A price per worker-hour: a finite number from 0 (nan, inf and -1 are no price)."""
    if not 0 <= value <= MAX_PRICE:  # also false for NaN
        raise SpecError(
            f"{what}: {value:g} is no price per worker-hour; give a number from 0 to "
            f"{MAX_PRICE:,.0f}"
        )
    return value


@functools.cache
def _built_in() -> tuple[Price, ...]:
    """The built-in table's entries, read once a process: the report names them in a
    note of every section it could not price."""
    return tuple(load_prices().values())


_PRICE_KEYS = ("per_worker_hour", "currency", "source", "device")


def load_prices(path: Path | None = None) -> dict[str, Price]:
    """Read a price table: ``name: {per_worker_hour, currency, source}`` per entry."""
    path = path or BUILTIN_PRICES
    data = load_mapping_file(path, "price table", "names to {per_worker_hour: ...}")
    if not data:
        raise SpecError(f"price table {path} must map names to {{per_worker_hour: ...}}")
    prices = {}
    for name, entry in data.items():
        if isinstance(entry, dict):  # a misspelt currency meant USD
            where = f"price table {path}: entry {shorten(repr(name))}"
            known_keys(entry, _PRICE_KEYS, where, "an entry")
        try:
            value = float(entry["per_worker_hour"])
        except (TypeError, KeyError, ValueError):
            raise SpecError(
                f"price table {path}: entry '{name}' needs a numeric per_worker_hour"
            ) from None
        _checked(value, f"price table {path}: entry {shorten(repr(name))}")
        device = entry.get("device")
        if device is not None and (not isinstance(device, str) or not device.strip()):
            raise SpecError(
                f"price table {path}: entry {shorten(repr(name))}'s device must be cpu or a "
                "part of an accelerator's name, e.g. A100"
            )
        prices[str(name)] = Price(
            str(name),
            value,
            str(entry.get("currency", "USD")),
            str(entry.get("source", "")),
            device.strip() if device else None,
        )
    return prices


def choose_price(
    price: str | None = None, prices_file: Path | None = None, *, device: str | None = None
) -> Price:
    """``price`` is a number (per worker-hour) or a name in the table; default: the
    example, or where it does not price a worker on ``device``, the table's first entry
    that does (an A100's hour is not a CPU machine's)."""
    if price is not None:
        try:
            value = float(price)
        except ValueError:
            pass
        else:
            return Price("custom", _checked(value, "--price"), source="given on the command line")
    table = load_prices(prices_file)
    name = price or (DEFAULT_PRICE if DEFAULT_PRICE in table else next(iter(table)))
    if name not in table:
        raise SpecError(f"no price named '{name}'; the table has {', '.join(table)}")
    if price is None and device is not None and not table[name].covers(device):
        return next((entry for entry in table.values() if entry.covers(device)), table[name])
    return table[name]
