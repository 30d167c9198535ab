"""Price tables for cost figures: data in YAML, never hard-coded in the analysis."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dmlbench.errors import SpecError
from dmlbench.files import load_mapping_file

BUILTIN_PRICES = Path(__file__).with_name("prices.yaml")
DEFAULT_PRICE = "gcp-n1-standard-4"


@dataclass(frozen=True)
class Price:
    name: str
    per_worker_hour: float
    currency: str = "USD"
    source: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} at {self.per_worker_hour:g} {self.currency}/worker-hour"


def load_prices(path: Path | None = None) -> dict[str, Price]:
    """Read a price table: ``name: {per_worker_hour, currency, source}`` per entry."""
    path = path or BUILTIN_PRICES
    data = load_mapping_file(path, "price table", "names to {per_worker_hour: ...}")
    if not data:
        raise SpecError(f"price table {path} must map names to {{per_worker_hour: ...}}")
    prices = {}
    for name, entry in data.items():
        try:
            value = float(entry["per_worker_hour"])
        except (TypeError, KeyError, ValueError):
            raise SpecError(
                f"price table {path}: entry '{name}' needs a numeric per_worker_hour"
            ) from None
        if value < 0:
            raise SpecError(f"price table {path}: entry '{name}' has a negative price")
        prices[str(name)] = Price(
            str(name), value, str(entry.get("currency", "USD")), str(entry.get("source", ""))
        )
    return prices


def choose_price(price: str | None = None, prices_file: Path | None = None) -> Price:
    """``price`` is a number (per worker-hour) or a name in the table; default: the example."""
    if price is not None:
        try:
            return Price("custom", float(price), source="given on the command line")
        except ValueError:
            pass
    table = load_prices(prices_file)
    name = price or (DEFAULT_PRICE if DEFAULT_PRICE in table else next(iter(table)))
    if name not in table:
        raise SpecError(f"no price named '{name}'; the table has {', '.join(table)}")
    return table[name]
