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
concurrent runs never share a subnet.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dmlbench.errors import DmlbenchError
from dmlbench.names import shorten
from dmlbench.netem.namespaces import TUN_DEVICE
from dmlbench.netem.profiles import ResolvedNetwork
from dmlbench.system import pid_alive

PREFIX = "dmlb"  # every name's first four characters, unless PREFIX_ENV says others
# Two users, or two CI jobs, on one machine keep their emulated networks apart with a
# prefix each: ``leftovers`` and ``remove_stale`` see only names of this process's
# prefix. Four characters, so that the longest name (15, IFNAMSIZ) still fits.
PREFIX_ENV = "DMLBENCH_NETEM_PREFIX"
_PREFIX_FORM = re.compile(r"[a-z][a-z0-9]{3}")
TUN_MTU = 9000  # fewer, larger packets for the forwarder; small enough for a tight tbf
NETWORK_FILE = "network.json"
WORKER_IFNAME = "eth0"
# Names carry the creating launcher's pid (base 36), "_", and a counter: dmlb<pid>_<n>br.
# Before, the separator was "x", itself a base-36 digit (pid 8978 is "6xe"): such
# names are still read, splitting at the last "x".
SEPARATOR = "_"


class NetworkError(DmlbenchError):
    """An emulated network cannot be set up here (not root, no tc, an impossible profile)."""


def prefix() -> str:
    """The first four characters of every namespace, bridge and veth name: ``dmlb``, or
    what ``DMLBENCH_NETEM_PREFIX`` says (a lower-case letter and three letters or
    digits)."""
    chosen = os.environ.get(PREFIX_ENV) or PREFIX
    if not _PREFIX_FORM.fullmatch(chosen):
        raise NetworkError(
            f"{PREFIX_ENV}={shorten(chosen)!r}: give a lower-case letter and three lower-case "
            "letters or digits, e.g. dmlc"
        )
    return chosen


def _names() -> re.Pattern[str]:
    """The names this process's prefix gives: ``<prefix><tag>`` + br, n<rank> or v<rank>."""
    return re.compile(rf"^{prefix()}([0-9a-z_]+)(?:n\d+|br|v[0-9a-z]+)$")


def _creator(tag: str) -> int:
    """The pid that made the names with this tag."""
    pid, _, _ = tag.rpartition(SEPARATOR) if SEPARATOR in tag else tag.rpartition("x")
    return int(pid, 36)


def _base36(number: int) -> str:
    return np.base_repr(number, 36).lower()


def _run(*args: str, ns: str | None = None, check: bool = True) -> str:
    command = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
    return done.stdout


def leftovers() -> list[str]:
    """Every namespace, bridge and veth dmlbench created under this process's prefix that
    still exists (any launcher's)."""
    if shutil.which("ip") is None:
        return []
    names = [
        line.split()[0]
        for line in _run("ip", "netns", "list", check=False).splitlines()
        if line.strip()
    ]
    for kind in ("bridge", "veth"):
        links = _run("ip", "-o", "link", "show", "type", kind, check=False)
        names += [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)", links, re.M)]
    pattern = _names()
    return [n for n in names if pattern.match(n)]


def remove_stale() -> list[str]:
    """Remove what killed launchers left behind; return the names removed."""
    removed = []
    pattern = _names()
    for name in leftovers():
        match = pattern.match(name)
        assert match
        try:
            pid = _creator(match.group(1))
        except ValueError:  # not a name dmlbench makes
            continue
        if pid_alive(pid):
            continue
        if name.endswith("br") or not re.search(r"n\d+$", name):  # a bridge or a veth
            _run("ip", "link", "del", name, check=False)
        else:
            _run("ip", "netns", "del", name, check=False)
        removed.append(name)
    return removed


SUBNETS = range(100, 200)  # 10.X.0.0/16 networks dmlbench may use
LOCK_PATH = "/run/lock/dmlbench-netem.lock"


@contextmanager
def _allocation_lock() -> Iterator[None]:
    """Serialises subnet allocation between launchers (an flock, freed if one dies)."""
    import fcntl

    path = LOCK_PATH if os.path.isdir(os.path.dirname(LOCK_PATH)) else "/tmp/dmlbench-netem.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def free_subnet() -> int:
    """The first X in :data:`SUBNETS` with no address in 10.X.0.0/16 on this host."""
    used = set()
    for match in re.finditer(r"inet 10\.(\d+)\.", _run("ip", "-o", "-4", "addr", "show")):
        used.add(int(match.group(1)))
    for subnet in SUBNETS:
        if subnet not in used:
            return subnet
    raise NetworkError(
        f"all {len(SUBNETS)} emulated subnets (10.100-199.0.0/16) are in use: too many "
        "emulated runs at once, or leftovers (`ip link show type bridge`)"
    )


_PRIVATE_NETWORK = ["sh", "-c", 'ip link set lo up && exec "$@"', "dmlbench-private-net"]


@functools.cache  # a capability of this machine: probed once per process
def private_network_prefix() -> list[str]:
    """A command prefix that runs a program in a network namespace of its own, with
    loopback only: whatever it listens on, nothing outside can reach. As root plain
    ``unshare --net``; otherwise inside a user namespace, where the kernel allows it.
    Raises :class:`NetworkError` when neither works here."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        raise NetworkError(
            "a private network namespace needs `unshare` (util-linux) and `ip` (iproute2)"
        )
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    prefix = ["unshare", "--net", *user, *_PRIVATE_NETWORK]
    done = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no reason given"
        raise NetworkError(f"this machine gives no private network namespace ({why})")
    return prefix


@functools.cache  # a kernel capability: probed once per process, not per check
def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (tried on a throwaway namespace)."""
    probe = f"{prefix()}{_base36(os.getpid())}{SEPARATOR}probe"
    _run("ip", "netns", "add", probe, check=False)
    try:
        _run("ip", "link", "set", "lo", "up", ns=probe, check=False)
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                probe,
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
            capture_output=True,
        )
        return done.returncode == 0
    finally:
        _run("ip", "netns", "del", probe, check=False)


def check_can_emulate() -> None:
    if os.geteuid() != 0:
        raise NetworkError(
            "network emulation needs root (it creates network namespaces and tc qdiscs); "
            "run as root, e.g. with sudo, or drop --network"
        )
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NetworkError(
                f"network emulation needs `{tool}` (Debian: apt-get install iproute2)"
            )


def preflight(network: ResolvedNetwork) -> None:
    """Refuse, in one line, what cannot be emulated here; before anything is created."""
    check_can_emulate()
    if network.intra_delay_s and not netem_available():
        raise NetworkError(
            f"network '{network.name}' asks for intra-node latency, which needs the netem "
            "qdisc; this kernel has none: drop intra_latency"
        )
    if network.delay_s and not netem_available() and not os.path.exists("/dev/net/tun"):
        raise NetworkError(
            f"network '{network.name}' asks for {network.delay_s * 1e3:g} ms of latency, but "
            "this kernel has neither the netem qdisc nor /dev/net/tun for dmlbench's own "
            "delay forwarder; use a profile without latency (e.g. 1gbit)"
        )


def _add_netem(device: str, delay_s: float, ns: str) -> None:
    """A netem qdisc delaying everything ``device`` sends by ``delay_s`` (kernels that
    have netem; dmlbench's forwarder delays where they do not)."""
    delay = f"{delay_s * 1e6:.0f}us"
    _run(
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
        self.tag = self.tag or f"{_base36(os.getpid())}{SEPARATOR}{_base36(Topology._count)}"
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
        with _allocation_lock():  # the bridge's address is the claim on its subnet
            self.subnet = free_subnet()
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _run("ip", "addr", "add", f"{self.hub_address}/16", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for rank in range(self.workers):
            ns, veth = f"{prefix()}{self.tag}n{rank}", f"{prefix()}{self.tag}v{_base36(rank)}"
            _run("ip", "netns", "add", ns)
            self._made.append(("netns", ns))
            self.namespaces.append(ns)
            _run(
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
            _run("ip", "link", "set", veth, "master", self.bridge, "up", "gso_max_size", gso)
            _run("ip", "addr", "add", f"{self.address(rank)}/16", "dev", WORKER_IFNAME, ns=ns)
            _run("ip", "link", "set", WORKER_IFNAME, "up", "gso_max_size", gso, ns=ns)
            _run("ip", "link", "set", "lo", "up", ns=ns)
            if self.delay_by == "netem":
                _add_netem(WORKER_IFNAME, self.network.delay_s, ns)
            if self.network.rate_bps:
                _run(*self._tbf(WORKER_IFNAME, ns), ns=ns)  # this worker's egress
                _run(*self._tbf(veth, None))  # its ingress
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
            _run(
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
            _run("ip", "link", "set", TUN_DEVICE, "up", "mtu", str(TUN_MTU), ns=ns)
            _run(
                "sysctl",
                "-qw",
                "net.ipv4.conf.all.rp_filter=0",
                f"net.ipv4.conf.{TUN_DEVICE}.rp_filter=0",
                ns=ns,
            )
            for peer in range(self.workers):
                if peer != rank:
                    _run(
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
                _run(*self._tbf(TUN_DEVICE, None), ns=ns)

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
                _run("ip", "netns", "del", name, check=False)
            else:
                _run("ip", "link", "del", name, check=False)
        self._made.clear()


def emulated(
    workers: int, network: ResolvedNetwork | None, record_to: Any = None
) -> AbstractContextManager[Topology | None]:
    """The emulated network for a run, or a no-op context when it runs unshaped."""
    if network is None:
        return nullcontext()
    return Topology(workers, network, record_to=record_to)
