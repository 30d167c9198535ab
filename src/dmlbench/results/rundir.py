"""A run's folder: what it holds besides the event log, so a run can be stored later.

Every run folder holds, from its start, ``spec.json`` (the resolved spec) and
``run.json`` (environment, deviations, sweep tag: what the store's row was made of),
and at its end ``outcome.json`` (status and error as the launcher saw them). With the
event log these rebuild the store's row (`dmlbench results --import RUN_DIR`) when the
store could not be written. ``launcher.lock`` is held (``flock``) by the launcher for as
long as the run goes: a lock nobody holds means the launcher is gone, whatever its pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from dmlbench.errors import StoreError, unwritable

SPEC_FILE = "spec.json"
RECORD_FILE = "run.json"
OUTCOME_FILE = "outcome.json"
LOCK_FILE = "launcher.lock"
COMM_RESULTS_FILE = "comm_results.json"  # a communication benchmark's per-size results
NODES_DIR = "nodes"  # in a multi-node run's folder: node<i>/, each node's own store


def node_folder(run_dir: Path, index: int) -> Path:
    """Node ``index``'s own store inside a multi-node run's folder (or inside the store
    a node under srun was given)."""
    return run_dir / NODES_DIR / f"node{index}"


def node_run_dirs(run_dir: Path, run_id: str, nodes: int) -> list[Path]:
    """Each node's folder of the run ``run_id`` (in its own store inside the run's
    folder), in node order: where the node that held rank 0 left the event log."""
    return [node_folder(run_dir, index) / "runs" / run_id for index in range(nodes)]


def new_run_id() -> str:
    """Sortable by start time and unique; task and workers are columns of their own."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` so that ``path`` holds either the old content or all of the new."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(json.dumps(data, indent=2, default=str))
        temporary.replace(path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


# A run folder's JSON files hold a resolved spec, an environment or an outcome: a few
# KB. One past this (or one that is no regular file) is not one dmlbench wrote.
MAX_JSON_BYTES = 16 << 20


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is missing or damaged. What is no regular
    file (a link to ``/dev/zero``, a named pipe) or is over ``MAX_JSON_BYTES`` is refused
    in one line (:class:`StoreError`), unread: a run folder may come from anyone."""
    from dmlbench.files import read_bounded

    if not path.exists() and not path.is_symlink():
        return None
    try:
        return json.loads(read_bounded(path, MAX_JSON_BYTES, "run file", StoreError))
    except (ValueError, RecursionError):
        return None


def create_run_dir(runs: Path, spec: dict[str, Any], name: str | None = None) -> tuple[str, Path]:
    """A fresh run id and its folder under ``runs``, holding ``spec.json``.

    ``name`` asks for that run id (the nodes of a multi-node job share their
    rendezvous id): ``name.2``, ``name.3``... when a run of that name is there already.
    Nothing half-made is left behind: on a full disk the folder is removed again and a
    one-line :class:`StoreError` says so.
    """
    if name is not None:  # a rendezvous id: one folder inside ``runs``, never a path
        from dmlbench.names import path_component

        path_component(name, "the run id")
    run_id = name or new_run_id()
    run_dir = runs / run_id
    try:
        runs.mkdir(parents=True, exist_ok=True)
        for repeat in range(2, 10_000):
            try:
                run_dir.mkdir()
                break
            except FileExistsError:
                if name is None:
                    raise
                run_id = f"{name}.{repeat}"
                run_dir = runs / run_id
        write_json(run_dir / SPEC_FILE, spec)
    except OSError as error:
        remove_run_dir(run_dir)
        raise StoreError(
            f"cannot create the run folder {run_dir}: {error.strerror or error}; "
            f"{unwritable(error, '--store')}; nothing was started"
        ) from None
    return run_id, run_dir


def remove_run_dir(run_dir: Path) -> None:
    """Remove a run folder that never became a run (nothing of value is in it)."""
    for name in (SPEC_FILE, RECORD_FILE, LOCK_FILE, f".{SPEC_FILE}.tmp", f".{RECORD_FILE}.tmp"):
        with contextlib.suppress(OSError):  # not only missing: below a file, never made
            (run_dir / name).unlink()
    with contextlib.suppress(OSError):  # something else is in it: keep it
        run_dir.rmdir()


class LauncherLock:
    """The launcher's hold on its run: an exclusive ``flock`` on ``launcher.lock``.

    The kernel releases it when the launcher exits, however it exits (SIGKILL
    included), and it means the same in any PID namespace or container that shares
    the folder: unlike a stored pid, which inside a container is often 1.
    """

    def __init__(self, run_dir: Path) -> None:
        self.fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def launcher_holds(run_dir: Path) -> bool | None:
    """Whether a live launcher holds ``run_dir``'s lock; None when there is no lock file
    (a run recorded before locks existed, or a folder removed by hand)."""
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return True  # cannot tell: assume it runs rather than mark it interrupted
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the lock we may have taken
    return False
