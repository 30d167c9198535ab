"""A latency-bandwidth (α-β) model of synchronous data-parallel training.

For ``N`` workers exchanging ``S`` bytes of gradients per step over links of bus
bandwidth ``β`` (bytes/s) and one-way latency ``L``, with a per-message software
overhead ``α``:

- ring all-reduce: ``2(N−1)`` steps, each a message of ``S/N`` bytes::

      T = 2(N−1)·(α + r·L) + 2(N−1)/N · S / β

- recursive halving and doubling (Rabenseifner's: a reduce-scatter by halving, an
  all-gather by doubling; ``2⌈log2 N⌉`` steps, two more where ``N`` is not a power of
  two, the binary blocks variant), the ring's bytes in far fewer steps::

      T = (2⌈log2 N⌉ [+ 2])·(α + r·L) + 2(N−1)/N · S / β

- tree all-reduce (reduce then broadcast along a binary tree)::

      T = 2⌈log2 N⌉·(α + r·L + S / β)

- centralised parameter server (one server; its link carries every worker's
  gradients in and the weights out)::

      T = 2·(α + r·L) + 2·N·S / β

On a cluster of ``n`` nodes of ``p`` workers (``N = n·p``; links ``inter`` between
nodes, ``intra`` inside one, shared by the node's workers; unshaped ``intra`` is the
hosts' own bandwidth):

- flat ring (gloo's all-reduce over every rank; ranks numbered node by node): every
  ring step sends one message of ``S/N`` on every hop at once, ``n`` hops between
  nodes and ``p−1`` (``p`` on one node) inside each node, so a step lasts as long as
  its slowest hop::

      T = 2(N−1)·(α + r·max L) + 2(N−1)/N · S / min(β_inter, β_intra / hops_intra)

- hierarchical (reduce inside each node, an all-reduce among the nodes' first
  workers, broadcast inside each node), with a ring among the nodes::

      T = 2·[(p−1)·(α + r·L_intra) + (p−1)/p · S/β_intra]
          + 2(n−1)·(α + r·L_inter) + 2(n−1)/n · S/β_inter

  or recursive halving and doubling among them (``between="halving-doubling"``: Goyal
  et al.'s Gloo between Big Basin servers), in ``2⌈log2 n⌉`` steps [+ 2].

``r`` is how many one-way latencies one message step costs (2 for gloo, measured:
each step waits for its peer's reply). A step takes compute plus ``T`` (no overlap:
the reference exchange form). Time to accuracy is epochs to the target × steps per
epoch × step time, plus evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dmlbench.errors import chosen

Algorithm = Literal["ring", "halving-doubling", "tree", "ps", "hierarchical"]
ALGORITHMS: tuple[Algorithm, ...] = ("ring", "halving-doubling", "tree", "ps", "hierarchical")
TWO_LEVEL: tuple[Algorithm, ...] = ("ring", "hierarchical")
"""The algorithms the two-level (nodes) model has."""
Between = Literal["ring", "halving-doubling"]
"""The all-reduce among the nodes of a hierarchical one."""


def algorithms_named(
    names: Sequence[str], allowed: Sequence[Algorithm] = ALGORITHMS
) -> list[Algorithm]:
    """``names`` as algorithms, the first one not ``allowed`` refused in one line."""
    return chosen("--algorithm", names, allowed)


@dataclass(frozen=True)
class Link:
    """One worker's link: bus bandwidth in bytes/s (``inf``: not the bottleneck), latency."""

    bandwidth: float
    latency_s: float = 0.0


@dataclass(frozen=True)
class CommCalibration:
    """Measured constants of the communication stack (from ``bench allreduce``)."""

    alpha_s: float  # per-message software overhead
    host_busbw: float  # bytes/s the hosts themselves move (copying, TCP) without shaping
    link_efficiency: float = 0.95  # payload share of a shaped link (TCP/IP headers)
    latencies_per_step: float = 2.0  # r: one-way latencies per message step


def effective_bandwidth(link: Link, calibration: CommCalibration) -> float:
    """The slower of the shaped link (less protocol overhead) and the hosts."""
    shaped = link.bandwidth * calibration.link_efficiency
    return min(shaped, calibration.host_busbw)


@dataclass(frozen=True)
class Layout:
    """Workers spread over ``nodes`` hosts; ``intra`` is one node's own link, which all
    of its workers share (``inf``: its loopback, bounded by the hosts' bandwidth)."""

    nodes: int
    intra: Link = Link(math.inf)


def _step(link: Link, calibration: CommCalibration) -> float:
    return calibration.alpha_s + calibration.latencies_per_step * link.latency_s


def cluster_allreduce_time(
    algorithm: Algorithm,
    workers: int,
    size: float,
    inter: Link,
    layout: Layout,
    calibration: CommCalibration,
    between: Between = "ring",
) -> float:
    """Seconds for one all-reduce of ``size`` bytes among ``workers`` on ``layout.nodes``
    nodes: the flat ``ring`` or the two-level ``hierarchical`` algorithm, the nodes
    all-reducing ``between`` them as a ring or by halving and doubling."""
    nodes, per_node = layout.nodes, workers // layout.nodes
    if workers <= 1 or size <= 0:
        return 0.0
    if algorithm == "hierarchical":
        inner = 0.0
        if per_node > 1:
            beta = effective_bandwidth(layout.intra, calibration)
            inner = 2 * (
                (per_node - 1) * _step(layout.intra, calibration)
                + (per_node - 1) / per_node * size / beta
            )
        return inner + allreduce_time(between, nodes, size, inter, calibration)
    if algorithm != "ring":
        raise ValueError(f"on several nodes choose ring or hierarchical, not {algorithm!r}")
    if per_node == 1:
        return allreduce_time("ring", workers, size, inter, calibration)
    hops_inside = per_node - 1 if nodes > 1 else per_node
    shared = Link(layout.intra.bandwidth / hops_inside, layout.intra.latency_s)
    betas = [effective_bandwidth(shared, calibration)]
    latency = layout.intra.latency_s
    if nodes > 1:
        betas.append(effective_bandwidth(inter, calibration))
        latency = max(latency, inter.latency_s)
    steps = 2 * (workers - 1)
    hop = calibration.alpha_s + calibration.latencies_per_step * latency
    return steps * hop + steps / workers * size / min(betas)


def allreduce_time(
    algorithm: Algorithm, workers: int, size: float, link: Link, calibration: CommCalibration
) -> float:
    """Seconds for one all-reduce of ``size`` bytes among ``workers``, each on its own
    ``link``."""
    if workers <= 1 or size <= 0:
        return 0.0
    if algorithm == "hierarchical":  # one worker per node: the nodes' ring
        algorithm = "ring"
    beta = effective_bandwidth(link, calibration)
    hop = calibration.alpha_s + calibration.latencies_per_step * link.latency_s
    if algorithm == "ring":
        steps = 2 * (workers - 1)
        return steps * hop + steps / workers * size / beta
    if algorithm == "halving-doubling":
        rounds = math.ceil(math.log2(workers))
        steps = 2 * rounds + (0 if 2**rounds == workers else 2)
        return steps * hop + 2 * (workers - 1) / workers * size / beta
    if algorithm == "tree":
        depth = math.ceil(math.log2(workers))
        return 2 * depth * (hop + size / beta)
    if algorithm == "ps":
        return 2 * hop + 2 * workers * size / beta
    raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")


@dataclass(frozen=True)
class Prediction:
    workers: int
    algorithm: str
    global_batch: int
    compute_s: float
    comm_s: float
    epochs: float
    steps: int
    tta_s: float
    cost: float | None

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s

    @property
    def comm_ratio(self) -> float:
        return self.comm_s / self.step_s if self.step_s else 0.0


def predict(
    *,
    workers: int,
    algorithm: Algorithm,
    local_batch: int,
    compute_per_example_s: float,
    compute_fixed_s: float,
    gradient_bytes: float,
    train_examples: int,
    epochs_to_target: float,
    eval_s_per_epoch: float,
    link: Link,
    calibration: CommCalibration,
    price_per_worker_hour: float | None = None,
    layout: Layout | None = None,
) -> Prediction:
    """Step time, time to accuracy and cost of one configuration (weak scaling: ``b``
    fixed). With a ``layout`` the workers are spread over its nodes, ``link`` between
    them; without, every worker is on its own ``link``."""
    global_batch = local_batch * workers
    compute = compute_fixed_s + compute_per_example_s * local_batch
    if layout is not None:
        comm = cluster_allreduce_time(algorithm, workers, gradient_bytes, link, layout, calibration)
    else:
        comm = allreduce_time(algorithm, workers, gradient_bytes, link, calibration)
    steps_per_epoch = math.ceil(train_examples / global_batch)
    steps = math.ceil(epochs_to_target * steps_per_epoch)
    tta = steps * (compute + comm) + math.ceil(epochs_to_target) * eval_s_per_epoch
    cost = tta / 3600 * workers * price_per_worker_hour if price_per_worker_hour else None
    return Prediction(
        workers, algorithm, global_batch, compute, comm, epochs_to_target, steps, tta, cost
    )
