"""Hardware as data: accelerators, interconnects and the clusters they make.

The profiles ship in ``hardware.yaml`` beside this module, each figure with its source;
a user adds or replaces entries with a YAML file of the same layout
(:func:`load_hardware`). A :class:`Cluster` turns into what the α-β model takes: the
link between nodes (its NICs shared by the node's devices), the link inside a node, and
the per-message cost (:meth:`Cluster.links`).

Compute comes from the model, not only from a run here (:func:`compute_step_s`): a
step's FLOPs over the device's peak for the dtype times an achieved efficiency, which a
user's own run on that device gives, else :data:`DEFAULT_EFFICIENCY` (said so).
"""

from __future__ import annotations

import math
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from dmlbench.errors import SpecError, unknown
from dmlbench.files import load_mapping_file
from dmlbench.names import shorten
from dmlbench.perfmodel.curve import Curve, Kind
from dmlbench.perfmodel.model import Between, CommCalibration, Link
from dmlbench.strict import StrictModel

HARDWARE_FILE = Path(__file__).with_name("hardware.yaml")
SECTIONS = ("accelerators", "interconnects", "clusters")

# Every figure of a profile is at most this (1 EFLOP/s a device, 1 PB of memory, 1 s of
# latency in µs): far past any hardware, and far from overflowing what is computed.
BOUND = 1e6

DEFAULT_EFFICIENCY = 0.4
"""The share of the peak a step achieves when no run on the device says: a round
default, not a measurement (well-tuned training of large transformers reaches 30–50% of
its device's dense peak; convolutional networks reach less: ResNet-50 reached 10.6% of
an H200's bf16 peak at 256 images in dmlbench's own runs, BENCHMARKS.md, "The GPU path
on one H200"). A measured curve or speed, a run on the device, or ``--efficiency``
replaces it, and the output says which."""


class Accelerator(StrictModel):
    name: str
    peak_tflops: dict[str, float] = Field(description="dense peak per dtype (fp32, bf16, …)")
    memory_gb: float = Field(gt=0, le=BOUND)
    memory_bandwidth_gbs: float = Field(gt=0, le=BOUND)
    matches: list[str] = Field(default_factory=list, description="in torch's device name")
    kind: Kind = Field(
        "gpu", description="what the device is: a curve measured on the other kind is refused"
    )
    source: str = Field(min_length=1, description="the data sheet the figures come from")

    @model_validator(mode="after")
    def _positive(self) -> Accelerator:
        if not self.peak_tflops or any(not 0 < v <= BOUND for v in self.peak_tflops.values()):
            raise ValueError(
                f"peak_tflops: TFLOP/s per dtype above 0 and at most {BOUND:,.0f}, e.g. "
                "{fp32: 19.5}"
            )
        return self

    def names(self, device: str) -> bool:
        """Whether torch's name of a device (``NVIDIA H200``) is this accelerator."""
        return any(token in device for token in self.matches)

    def specificity(self, device: str) -> int:
        """How closely a device's name names this accelerator: the length of the longest
        of its ``matches`` the name holds, 0 for none (``NVIDIA A100-SXM4-40GB`` names the
        40 GB A100 by ``A100-SXM4-40GB``, the 80 GB one only by ``A100``)."""
        return max((len(token) for token in self.matches if token in device), default=0)

    def step_from(self, curve: Curve, dtype: str, batch: int) -> tuple[float, str, list[str]]:
        """A step's compute at ``batch`` read off a measured curve, where it came from, and
        notes: with a word, and a note of its own, where the curve was measured on another
        device than this one, or names none (a word where at another precision): it is
        used as measured.
        A curve of another kind of device (a CPU's on a GPU) is refused."""
        compute, source = curve.step_at(batch)
        notes: list[str] = []
        if curve.kind and curve.kind != self.kind:  # a CPU's step is no GPU's, off by 100×
            what = curve.kind.upper()
            measured = f"{curve.device}, a {what}" if curve.device else f"a {what}"
            raise SpecError(
                f"--curve was measured on {measured}; {self.name} is a {self.kind.upper()}: "
                "measure the curve there (`dmlbench bench curve`), or describe your own "
                f"device with --hardware FILE (an accelerator of kind: {curve.kind})"
            )
        if curve.device and not self.names(curve.device):
            source += f"; not measured on this profile's {self.name}"
            notes.append(
                f"the --curve was measured on {curve.device}, not on {self.name}: "
                "its step times are that device's, used as they are"
            )
        elif not curve.device:  # a bare list of points: nothing to check it against
            source += f"; the curve names no device, taken as {self.name}'s"
            notes.append(
                f"the --curve names no device: its step times are taken as {self.name}'s "
                "(`dmlbench bench curve` writes a curve that says where it was measured)"
            )
        if curve.precision and curve.precision != dtype:
            source += f"; the peak here is {dtype}'s"
        return compute, source, notes

    def peak_flops(self, dtype: str) -> float:
        if dtype not in self.peak_tflops:
            raise SpecError(
                f"{self.name} has no {dtype} peak in its profile; it has "
                f"{', '.join(self.peak_tflops)}"
            )
        return self.peak_tflops[dtype] * 1e12


class Interconnect(StrictModel):
    name: str
    gbit_per_s: float = Field(gt=0, le=BOUND, description="per device and direction")
    latency_us: float = Field(ge=0, le=BOUND, description="one way")
    message_cost_us: float = Field(
        ge=0, le=BOUND, description="the software's cost per message (α)"
    )
    source: str = Field(min_length=1)

    def link(self, share: int = 1) -> Link:
        """The link one of ``share`` devices gets when they share it."""
        return Link(self.gbit_per_s * 1e9 / 8 / share, self.latency_us * 1e-6)


class ClusterProfile(StrictModel):
    name: str
    accelerator: str
    devices_per_node: int = Field(ge=1, le=1024)
    intra: str
    inter: str
    nics_per_node: int = Field(1, ge=1, le=1024)
    allreduce: Literal["ring", "hierarchical"] = "hierarchical"
    """How the cluster's collective library all-reduces: reduced inside each node first
    (NCCL over NVLink and InfiniBand, Horovod, Goyal et al.'s Gloo), or a flat ring over
    every device (gloo's own)."""
    between_nodes: Between = "ring"
    """A hierarchical all-reduce's algorithm among the nodes."""
    source: str = Field(min_length=1)


class Hardware(StrictModel):
    accelerators: dict[str, Accelerator] = Field(default_factory=dict)
    interconnects: dict[str, Interconnect] = Field(default_factory=dict)
    clusters: dict[str, ClusterProfile] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references(self) -> Hardware:
        for key, cluster in self.clusters.items():
            if cluster.accelerator not in self.accelerators:
                raise ValueError(
                    unknown(f"accelerator of cluster {key}", cluster.accelerator, self.accelerators)
                )
            for role in ("intra", "inter"):
                name = getattr(cluster, role)
                if name not in self.interconnects:
                    raise ValueError(
                        unknown(f"{role} link of cluster {key}", name, self.interconnects)
                    )
        return self

    def clusters_of(self, device: str) -> list[str]:
        """The cluster profiles of a device, by its name: those whose accelerator it
        names, the most closely named first."""
        fits = {
            key: self.accelerators[profile.accelerator].specificity(device)
            for key, profile in self.clusters.items()
        }
        return sorted((key for key, fit in fits.items() if fit), key=lambda key: -fits[key])

    def cluster(self, key: str) -> Cluster:
        if key not in self.clusters:
            raise SpecError(
                unknown(
                    "cluster profile",
                    key,
                    self.clusters,
                    "see `dmlbench simulate-cluster --cluster list`",
                )
            )
        profile = self.clusters[key]
        return Cluster(
            key,
            profile,
            self.accelerators[profile.accelerator],
            self.interconnects[profile.intra],
            self.interconnects[profile.inter],
        )


def load_hardware(extra: Path | None = None) -> Hardware:
    """The shipped profiles, with ``extra``'s entries added (same names replaced)."""
    data = load_mapping_file(
        HARDWARE_FILE, "hardware profiles", "accelerators, interconnects, clusters"
    )
    mine: dict[str, Any] = {}
    if extra is not None:
        mine = load_mapping_file(extra, "hardware file", "accelerators, interconnects, clusters")
        unknown_keys = set(mine) - set(SECTIONS)
        if unknown_keys:
            # a typo of a section is named; anything else is not echoed: a file given by
            # mistake (--hardware /etc/shadow) must not be printed back line by line
            typos = [k for k in sorted(map(str, unknown_keys)) if get_close_matches(k, SECTIONS)]
            what = (
                f"unknown section {shorten(typos[0])!r} (did you mean "
                f"{get_close_matches(typos[0], SECTIONS)[0]!r}?)"
                if typos
                else f"{len(unknown_keys):,} top-level keys that are no section: is it a "
                "hardware file?"
            )
            raise SpecError(
                f"hardware file {extra}: {what}; use accelerators, interconnects and clusters"
            )
        for section, entries in mine.items():
            if not isinstance(entries, dict):
                raise SpecError(f"hardware file {extra}: {section} must map names to entries")
            data.setdefault(section, {}).update(entries)
    try:
        return Hardware.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        section, name = [str(part) for part in [*first["loc"], "", ""][:2]]
        yours = name in (mine.get(section) or {})  # an entry --hardware's file gave
        source = f"hardware file {extra}" if yours else "hardware profiles"
        raise SpecError(f"{source}: {where}: {first['msg']}") from None


class Cluster:
    """A cluster profile resolved: its accelerator and links, at ``nodes`` nodes."""

    def __init__(
        self,
        key: str,
        profile: ClusterProfile,
        accelerator: Accelerator,
        intra: Interconnect,
        inter: Interconnect,
    ) -> None:
        self.key, self.profile, self.accelerator = key, profile, accelerator
        self.intra, self.inter = intra, inter

    @property
    def devices_per_node(self) -> int:
        return self.profile.devices_per_node

    def links(self, devices_per_node: int | None = None) -> tuple[Link, Link]:
        """(between nodes, inside a node) as the two-level model takes them: the inter-node
        link is the node's NICs together (a flat ring crosses each node boundary once
        per step, so one NIC's share carries it); inside a node the devices' own links."""
        per_node = devices_per_node or self.devices_per_node
        nics = min(self.profile.nics_per_node, per_node)
        inter = Link(self.inter.link().bandwidth * nics, self.inter.link().latency_s)
        intra = self.intra.link()
        return inter, Link(intra.bandwidth * per_node, intra.latency_s)

    def allreduce(self, shape: str | None = None) -> str:
        """An all-reduce on this cluster in words, the profile's by default: ``ring`` or
        ``hierarchical`` (and how the nodes all-reduce among them where not a ring)."""
        shape = shape or self.profile.allreduce
        if shape == "hierarchical" and self.profile.between_nodes != "ring":
            return f"{shape}, {self.profile.between_nodes} between nodes"
        return shape

    def calibration(self) -> CommCalibration:
        """The message stack: the slower of the two links' per-message costs, hosts that
        keep up, the data sheet's rate as payload, one latency per message step."""
        alpha = max(self.intra.message_cost_us, self.inter.message_cost_us) * 1e-6
        return CommCalibration(
            alpha_s=alpha, host_busbw=math.inf, link_efficiency=1.0, latencies_per_step=1.0
        )

    def describe(self) -> dict[str, Any]:
        return {
            "cluster": self.key,
            "name": self.profile.name,
            "accelerator": self.accelerator.name,
            "devices_per_node": self.devices_per_node,
            "intra": self.intra.name,
            "inter": f"{self.inter.name} × {self.profile.nics_per_node}",
            "allreduce": self.allreduce(),
            "source": self.profile.source,
        }


def compute_step_s(
    flops_per_step: float, accelerator: Accelerator, dtype: str, efficiency: float
) -> float:
    """Seconds of one device's step: its FLOPs over the peak for ``dtype`` × efficiency."""
    if not 0 < efficiency <= 1:
        raise SpecError(f"efficiency {efficiency}: a share of the peak, above 0 and at most 1")
    return flops_per_step / (accelerator.peak_flops(dtype) * efficiency)
