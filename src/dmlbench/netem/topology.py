"""Emulated networks on one machine: a namespace per worker, veth pairs, a bridge, tc.

::

    root namespace: bridge dmlb<tag>br (10.X.255.254/16) ── the launcher's rendezvous
        ├── veth dmlb<tag>v0 ─── eth0 in namespace dmlb<tag>n0 (10.X.0.1)   worker rank 0
        ├── veth dmlb<tag>v1 ─── eth0 in namespace dmlb<tag>n1 (10.X.0.2)   worker rank 1
        └── ...

Bandwidth: ``tbf`` on both ends of every veth (a worker's egress and its ingress).
Latency: ``netem`` on each worker's egress where the kernel has it. Set-up and
tear-down are one context manager; everything it creates is named after the
launcher's pid, so leftovers of a launcher that was killed are removed by the next
one. The bridge network is host-only: nothing is routed off the machine.

An emulated cluster (``--nodes``) is the same picture with one namespace per *node*:
its workers share the namespace and its veth (a machine's NIC), and talk to each other
over the namespace's loopback, shaped by the profile's ``intra_*`` values when it
has them.

Each topology takes its own ``10.X.0.0/16`` (X from 100 to 199): the first no interface
on this host uses, chosen and claimed (the bridge gets its address) under a lock, so
concurrent runs never share a subnet (:mod:`dmlbench.netem.host` finds it, names
everything and removes what killed launchers left).
"""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from dmlbench.netem.host import (
    SEPARATOR,
    NetworkError,
    allocation_lock,
    base36,
    free_subnet,
    netem_available,
    prefix,
    preflight,
    remove_stale,
    run,
)
from dmlbench.netem.namespaces import TUN_DEVICE
from dmlbench.netem.profiles import ResolvedNetwork

TUN_MTU = 9000  # fewer, larger packets for the forwarder; small enough for a tight tbf
NETWORK_FILE = "network.json"
WORKER_IFNAME = "eth0"


def _add_netem(device: str, delay_s: float, ns: str) -> None:
    """A netem qdisc delaying everything ``device`` sends by ``delay_s`` (kernels that
    have netem; dmlbench's forwarder delays where they do not)."""
    delay = f"{delay_s * 1e6:.0f}us"
    run(
        *("tc", "qdisc", "add", "dev", device, "root", "handle", "2:"),
        *("netem", "delay", delay, "limit", "100000"),
        ns=ns,
    )


@dataclass
class Topology:
    """``workers`` namespaces joined through a bridge, shaped as ``network`` says."""

    workers: int
    network: ResolvedNetwork
    record_to: Any = None  # a run folder: network.json is written there on tear-down
    tag: str = ""
    namespaces: list[str] = field(default_factory=list)
    delay_by: str = "none"  # how latency is added: none, netem, or forwarder (TUN)
    forwarder_stats: dict[str, Any] = field(default_factory=dict)
    _made: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) to remove
    _forwarder: subprocess.Popen[str] | None = None

    _count = 0

    def __post_init__(self) -> None:
        Topology._count += 1
        self.tag = self.tag or f"{base36(os.getpid())}{SEPARATOR}{base36(Topology._count)}"
        if self.workers > 250 * 255:
            raise NetworkError(f"{self.workers} workers do not fit one emulated /16 network")
        self.subnet = 0  # 10.<subnet>.0.0/16, host-only; allocated when the bridge is made

    @property
    def gso_bytes(self) -> int:
        """Largest GSO packet on the veths: about 1 ms of traffic, 4-64 KiB.

        Large segments keep fast links fast (the host handles fewer packets), small ones
        keep slow links honest (tbf's bucket must hold two of them).
        """
        if not self.network.rate_bps:
            return 65536
        return int(min(65536, max(4096, self.network.rate_bps / 8 * 0.001)))

    @property
    def bridge(self) -> str:
        return f"{prefix()}{self.tag}br"

    @property
    def hub_address(self) -> str:
        return f"10.{self.subnet}.255.254"

    def address(self, rank: int) -> str:
        return f"10.{self.subnet}.{rank // 250}.{rank % 250 + 1}"

    def _tbf(self, device: str, ns: str | None) -> list[str]:
        assert self.network.rate_bps
        rate_bytes = self.network.rate_bps / 8
        # The bucket holds 1 ms of traffic, and at least two of the largest packets: a
        # larger burst would let whole small messages through unshaped.
        largest = TUN_MTU if device == TUN_DEVICE else self.gso_bytes
        burst = int(max(2 * largest + 1024, rate_bytes * 0.001))
        under_netem = device == WORKER_IFNAME and ns is not None and self.delay_by == "netem"
        return [
            "tc",
            "qdisc",
            "add",
            "dev",
            device,
            "parent" if under_netem else "root",
            *(["2:1"] if under_netem else []),
            "handle",
            "20:",
            "tbf",
            "rate",
            f"{int(self.network.rate_bps)}bit",
            "burst",
            str(burst),
            "latency",
            "100ms",
        ]

    def __enter__(self) -> Topology:
        preflight(self.network)
        remove_stale()
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _build(self) -> None:
        if self.network.delay_s:
            self.delay_by = "netem" if netem_available() else "forwarder"
        with allocation_lock():  # the bridge's address is the claim on its subnet
            self.subnet = free_subnet()
            run("ip", "link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            run("ip", "addr", "add", f"{self.hub_address}/16", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for rank in range(self.workers):
            ns, veth = f"{prefix()}{self.tag}n{rank}", f"{prefix()}{self.tag}v{base36(rank)}"
            run("ip", "netns", "add", ns)
            self._made.append(("netns", ns))
            self.namespaces.append(ns)
            run(
                "ip",
                "link",
                "add",
                veth,
                "type",
                "veth",
                "peer",
                "name",
                WORKER_IFNAME,
                "netns",
                ns,
            )
            # deleted by name too: a namespace whose processes (or sockets) outlive its
            # `ip netns del` keeps its veth pair, and with it the host's end, alive
            self._made.append(("link", veth))
            gso = str(self.gso_bytes)
            run("ip", "link", "set", veth, "master", self.bridge, "up", "gso_max_size", gso)
            run("ip", "addr", "add", f"{self.address(rank)}/16", "dev", WORKER_IFNAME, ns=ns)
            run("ip", "link", "set", WORKER_IFNAME, "up", "gso_max_size", gso, ns=ns)
            run("ip", "link", "set", "lo", "up", ns=ns)
            if self.delay_by == "netem":
                _add_netem(WORKER_IFNAME, self.network.delay_s, ns)
            if self.network.rate_bps:
                run(*self._tbf(WORKER_IFNAME, ns), ns=ns)  # this worker's egress
                run(*self._tbf(veth, None))  # its ingress
        if self.delay_by == "forwarder":
            self._start_forwarder()
        if self.network.shapes_intra:
            for ns in self.namespaces:
                self._shape_loopback(ns)

    def _shape_loopback(self, ns: str) -> None:
        """The intra-node link: everything between a node's own workers crosses its lo."""
        parent = ["root"]
        if self.network.intra_delay_s:
            _add_netem("lo", self.network.intra_delay_s, ns)
            parent = ["parent", "2:1"]
        if self.network.intra_rate_bps:
            rate_bytes = self.network.intra_rate_bps / 8
            burst = int(max(2 * 65536 + 1024, rate_bytes * 0.001))  # lo sends 64 KiB packets
            run(
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                *parent,
                "handle",
                "20:",
                "tbf",
                "rate",
                f"{int(self.network.intra_rate_bps)}bit",
                "burst",
                str(burst),
                "latency",
                "100ms",
                ns=ns,
            )

    def _start_forwarder(self) -> None:
        """Route worker-to-worker traffic through TUN devices and the delay forwarder."""
        import select
        import sys

        endpoints = [f"{ns}={self.address(i)}" for i, ns in enumerate(self.namespaces)]
        self._forwarder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dmlbench.netem.forwarder",
                "--delay-us",
                f"{self.network.delay_s * 1e6:.1f}",
                *endpoints,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._forwarder.stdout is not None
        ready, _, _ = select.select([self._forwarder.stdout], [], [], 20)
        if not ready or self._forwarder.stdout.readline().strip() != "ready":
            self._forwarder.kill()
            _, err = self._forwarder.communicate(timeout=5)
            last = err.strip().splitlines()[-1] if err.strip() else "no output"
            raise NetworkError(f"the delay forwarder did not start: {last}")
        for rank, ns in enumerate(self.namespaces):
            run("ip", "link", "set", TUN_DEVICE, "up", "mtu", str(TUN_MTU), ns=ns)
            run(
                "sysctl",
                "-qw",
                "net.ipv4.conf.all.rp_filter=0",
                f"net.ipv4.conf.{TUN_DEVICE}.rp_filter=0",
                ns=ns,
            )
            for peer in range(self.workers):
                if peer != rank:
                    run(
                        "ip",
                        "route",
                        "add",
                        f"{self.address(peer)}/32",
                        "dev",
                        TUN_DEVICE,
                        "src",
                        self.address(rank),
                        ns=ns,
                    )
            if self.network.rate_bps:
                run(*self._tbf(TUN_DEVICE, None), ns=ns)

    def _stop_forwarder(self) -> None:
        if self._forwarder is None:
            return
        self._forwarder.terminate()
        try:
            out, _ = self._forwarder.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._forwarder.kill()
            out, _ = self._forwarder.communicate()
        lines = out.strip().splitlines()  # its last words: one JSON line of its own cost
        try:
            stats = json.loads(lines[-1]) if lines else {}
        except ValueError:
            stats = {}
        self.forwarder_stats = stats if isinstance(stats, dict) else {}
        self._forwarder = None

    def describe(self) -> dict[str, Any]:
        """What was emulated and how, with the forwarder's own cost when there was one."""
        return {
            "network": self.network.model_dump(),
            "names": [name for _, name in self._made],  # what it made, removed on exit
            "delay_by": self.delay_by,
            "workers": self.workers,
            "forwarder": self.forwarder_stats,
        }

    def __exit__(self, *exc: object) -> None:
        self._stop_forwarder()
        if self.record_to is not None:
            from pathlib import Path

            (Path(self.record_to) / NETWORK_FILE).write_text(json.dumps(self.describe(), indent=2))
        for kind, name in reversed(self._made):
            if kind == "netns":
                run("ip", "netns", "del", name, check=False)
            else:
                run("ip", "link", "del", name, check=False)
        self._made.clear()


def emulated(
    workers: int, network: ResolvedNetwork | None, record_to: Any = None
) -> AbstractContextManager[Topology | None]:
    """The emulated network for a run, or a no-op context when it runs unshaped."""
    if network is None:
        return nullcontext()
    return Topology(workers, network, record_to=record_to)
