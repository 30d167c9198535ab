"""Listening sockets bound to one address, for dmlbench and the engines it starts.

torch's ``TCPStore`` server listens on every interface (``::`` or ``0.0.0.0``) and
authenticates nobody: anyone who can reach the port reads and writes the run's keys.
It accepts an already listening socket instead (``master_listen_fd``), so dmlbench
binds one to the address the run uses (loopback by default) and hands it over.
"""

from __future__ import annotations

import ipaddress
import socket
from datetime import timedelta
from typing import Any

LOOPBACK = "127.0.0.1"
RENDEZVOUS_PORT = 29400  # torch's rendezvous port, torchrun's default
NODE_ADDRESS_ENV = "DMLBENCH_NODE_ADDRESS"  # in a worker: the address its node's agent binds


def listening_socket(host: str, port: int = 0, backlog: int = 2048) -> socket.socket:
    """A TCP socket listening on ``host`` only (port 0: one the OS picks)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def tcp_store_server(host: str, port: int = 0, *, timeout: timedelta) -> Any:
    """A ``torch.distributed.TCPStore`` server that listens on ``host`` only.

    The store owns the socket from here on and closes it when it is destroyed.
    """
    from torch.distributed import TCPStore

    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    fd = sock.detach()
    return TCPStore(
        host, bound_port, is_master=True, multi_tenant=True, master_listen_fd=fd, timeout=timeout
    )


def interface_of(address: str) -> str | None:
    """The network interface that holds ``address`` (e.g. ``lo`` for 127.0.0.1), or None.

    gloo listens on the interface named by ``GLOO_SOCKET_IFNAME``; without it, on the
    address the host name resolves to, which may face the outside.
    """
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None
    if wanted.is_loopback:
        return "lo"
    try:
        import psutil
    except ImportError:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        for entry in addresses:
            try:
                if ipaddress.ip_address(entry.address.split("%")[0]) == wanted:
                    return name
            except ValueError:
                continue
    return None


def address_of(interface: str) -> str | None:
    """The first IPv4 (else IPv6) address of network interface ``interface``, or None."""
    try:
        import psutil
    except ImportError:
        return None
    entries = psutil.net_if_addrs().get(interface, [])
    for family in (socket.AF_INET, socket.AF_INET6):
        for entry in entries:
            if entry.family == family:
                return str(entry.address).split("%")[0]
    return None
