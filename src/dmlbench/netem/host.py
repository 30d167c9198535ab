"""What emulated networks need of this host and leave on it: the names they take (under
a prefix, carrying the creating launcher's pid), the leftovers of launchers that were
killed, a free ``10.X.0.0/16`` subnet, and whether this host can emulate at all (root,
``ip`` and ``tc``, the netem qdisc, a private network namespace)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from dmlbench.errors import DmlbenchError
from dmlbench.names import shorten
from dmlbench.netem.profiles import ResolvedNetwork
from dmlbench.system import pid_alive

PREFIX = "dmlb"  # every name's first four characters, unless PREFIX_ENV says others
# Two users, or two CI jobs, on one machine keep their emulated networks apart with a
# prefix each: ``leftovers`` and ``remove_stale`` see only names of this process's
# prefix. Four characters, so that the longest name (15, IFNAMSIZ) still fits.
PREFIX_ENV = "DMLBENCH_NETEM_PREFIX"
_PREFIX_FORM = re.compile(r"[a-z][a-z0-9]{3}")
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


def base36(number: int) -> str:
    return np.base_repr(number, 36).lower()


def run(*args: str, ns: str | None = None, check: bool = True) -> str:
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
        for line in run("ip", "netns", "list", check=False).splitlines()
        if line.strip()
    ]
    for kind in ("bridge", "veth"):
        links = run("ip", "-o", "link", "show", "type", kind, check=False)
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
            run("ip", "link", "del", name, check=False)
        else:
            run("ip", "netns", "del", name, check=False)
        removed.append(name)
    return removed


SUBNETS = range(100, 200)  # 10.X.0.0/16 networks dmlbench may use
LOCK_PATH = "/run/lock/dmlbench-netem.lock"


@contextmanager
def allocation_lock() -> Iterator[None]:
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
    for match in re.finditer(r"inet 10\.(\d+)\.", run("ip", "-o", "-4", "addr", "show")):
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
    probe = f"{prefix()}{base36(os.getpid())}{SEPARATOR}probe"
    run("ip", "netns", "add", probe, check=False)
    try:
        run("ip", "link", "set", "lo", "up", ns=probe, check=False)
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
        run("ip", "netns", "del", probe, check=False)


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
