"""Looking at real processes from tests: trees, command lines, liveness, free ports."""

from __future__ import annotations

import socket
import time
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_tree(root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running or stopped; a zombie (exited, not yet reaped) counts as gone."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def spawned_workers(launcher: int) -> set[int]:
    """The worker processes torch's elastic agent spawned under ``launcher``."""
    return {p for p in process_tree(launcher) - {launcher} if "spawn_main" in command_line(p)}


def wait_until_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait up to ``timeout`` seconds for ``pids`` to exit; return those still alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return left
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def free_port() -> int:
    """A loopback port nothing listens on (the kernel's pick, released at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
