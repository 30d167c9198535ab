"""Network profiles: bandwidth and latency per link, named in YAML or given inline.

``bandwidth``/``latency`` shape the link between hosts: each worker's own link when
every worker is its own host, each node's link in an emulated cluster (its workers
share it, as they share a machine's NIC). ``intra_bandwidth``/``intra_latency`` shape
the traffic between the workers of one node; unset, they talk over the node's
loopback, unshaped.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from dmlbench.errors import SpecError, known_keys, unknown
from dmlbench.files import load_mapping_file
from dmlbench.strict import StrictModel

PROFILES_FILE = Path(__file__).with_name("profiles.yaml")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|tbit)\s*$", re.I)
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|ms|us|ns)\s*$", re.I)
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def parse_rate(text: str) -> float:
    """``"100mbit"`` → 1e8 bits per second."""
    match = _RATE.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise SpecError(f"bandwidth {text!r} is not a positive rate like 100mbit or 10gbit")
    return float(match.group(1)) * _RATE_UNITS[match.group(2).lower()]


def parse_time(text: str) -> float:
    """``"5ms"`` → 0.005 seconds."""
    match = _TIME.match(str(text))
    if not match:
        raise SpecError(f"latency {text!r} is not a time like 5ms or 50us")
    return float(match.group(1)) * _TIME_UNITS[match.group(2).lower()]


class NetworkSpec(StrictModel):
    """Which network the workers run under. ``none``: the host's loopback, unshaped."""

    profile: str = Field("none", description="a named profile (see `dmlbench networks`)")
    bandwidth: str | None = Field(None, description="per link and direction, e.g. 100mbit")
    latency: str | None = Field(None, description="one-way delay per packet, e.g. 5ms")
    intra_bandwidth: str | None = Field(
        None,
        description="between the workers of one node (all of them together); "
        "default: the node's loopback, unshaped",
    )
    intra_latency: str | None = Field(None, description="one-way delay inside a node")
    profiles_file: str | None = Field(None, description="your own profiles YAML")

    @model_validator(mode="after")
    def _units(self) -> NetworkSpec:
        for rate in (self.bandwidth, self.intra_bandwidth):
            if rate is not None:
                parse_rate(rate)
        for delay in (self.latency, self.intra_latency):
            if delay is not None:
                parse_time(delay)
        return self

    @property
    def enabled(self) -> bool:
        return self.profile != "none" or any(
            value is not None
            for value in (self.bandwidth, self.latency, self.intra_bandwidth, self.intra_latency)
        )

    def resolve(self) -> ResolvedNetwork:
        """The profile's values with inline ones on top; refuses unknown names."""
        values: dict[str, Any] = {}
        if self.profile != "none":
            profiles = load_profiles(Path(self.profiles_file) if self.profiles_file else None)
            if self.profile not in profiles:
                known = f"known: {', '.join(profiles)}"
                raise SpecError(unknown("network profile", self.profile, profiles, known))
            values = dict(profiles[self.profile])
        inline = {key: getattr(self, key) for key in _LINK_KEYS if getattr(self, key) is not None}
        values.update(inline)

        def rate(key: str) -> float | None:
            return parse_rate(values[key]) if values.get(key) else None

        def delay(key: str) -> float:
            return parse_time(values[key]) if values.get(key) else 0.0

        name = self.profile if self.profile != "none" else "custom"
        if self.profile != "none" and inline:
            name += "+custom"
        return ResolvedNetwork(
            name=name,
            rate_bps=rate("bandwidth"),
            delay_s=delay("latency"),
            intra_rate_bps=rate("intra_bandwidth"),
            intra_delay_s=delay("intra_latency"),
        )

    def label(self) -> str:
        return self.resolve().describe() if self.enabled else "none"


_LINK_KEYS = ("bandwidth", "latency", "intra_bandwidth", "intra_latency")
_PROFILE_KEYS = (*_LINK_KEYS, "description")


class ResolvedNetwork(StrictModel):
    name: str
    rate_bps: float | None  # between hosts; None: unshaped
    delay_s: float = 0.0
    intra_rate_bps: float | None = None  # inside a node; None: its loopback, unshaped
    intra_delay_s: float = 0.0

    @property
    def shapes_intra(self) -> bool:
        return bool(self.intra_rate_bps or self.intra_delay_s)

    def describe(self) -> str:
        parts = [self.name]
        if self.rate_bps:
            parts.append(f"{self.rate_bps / 1e6:g} Mbit/s")
        if self.delay_s:
            parts.append(f"{self.delay_s * 1e3:g} ms")
        if self.intra_rate_bps:
            parts.append(f"intra-node {self.intra_rate_bps / 1e6:g} Mbit/s")
        if self.intra_delay_s:
            parts.append(f"intra-node {self.intra_delay_s * 1e3:g} ms")
        return " · ".join(parts)


def network_option(value: str | None) -> dict[str, str] | None:
    """``--network``'s value as a spec's ``network``: a profile's name, or a bare rate
    no built-in profile is named (``250mbit``: links of that bandwidth), as ``simulate``
    and ``advise`` take it."""
    if not value:
        return None
    if value not in load_profiles() and value[:1].isdigit():
        with contextlib.suppress(SpecError):
            parse_rate(value)
            return {"bandwidth": value}
    return {"profile": value}


def load_profiles(path: Path | None = None) -> dict[str, dict[str, Any]]:
    path = path or PROFILES_FILE
    data = load_mapping_file(path, "network profiles file", "names to bandwidth/latency")
    for name, entry in data.items():
        if not isinstance(entry, dict) or not any(entry.get(key) for key in _LINK_KEYS):
            raise SpecError(f"network profile '{name}' in {path} needs a bandwidth or latency")
        known_keys(entry, _PROFILE_KEYS, f"network profile '{name}' in {path}", "a profile")
        try:
            for key in ("bandwidth", "intra_bandwidth"):
                if entry.get(key):
                    parse_rate(entry[key])
            for key in ("latency", "intra_latency"):
                if entry.get(key):
                    parse_time(entry[key])
        except SpecError as error:  # which entry of which file
            raise SpecError(f"network profile '{name}' in {path}: {error}") from None
    return {str(k): v for k, v in data.items()}
