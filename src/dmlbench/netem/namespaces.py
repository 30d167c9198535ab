"""Network namespaces from inside a process: entering one by name, going back by a file
descriptor. The one place dmlbench calls ``setns`` (topology, the delay forwarder, the
cluster's agents, workers and MPI ranks use it)."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000
TUN_DEVICE = "dmlbt"  # the delay forwarder's device in each worker namespace


def set_namespace(fd: int, what: str) -> None:
    """``setns(fd, CLONE_NEWNET)``; ``what`` names the namespace in the error."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns into {what} failed: {os.strerror(error)}")


def enter_namespace(name: str) -> None:
    """Move the calling process into network namespace ``name`` (before any socket)."""
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        set_namespace(fd, name)
    finally:
        os.close(fd)
