"""Small facts about the operating system that several packages need."""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists (one we may not signal counts as alive)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` exits (Linux); if it already
    has (this process is an orphan), exit now."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
