"""What every worker process runs first, before the task's own function.

``worker_entry`` is the function torch's elastic agent starts in each worker. It:

0. ends on Ctrl-C without a traceback (the launcher says it in one line);
1. asks the kernel to kill this worker when the launcher dies (``PR_SET_PDEATHSIG``),
   so a killed launcher leaves no orphan waiting 20 minutes on a store that is gone; a
   worker forked by the launcher's fork server lets go of the server's liveness pipe and
   dies with the server, which exits with the launcher;
2. takes the launcher's environment at launch: a forked worker inherits the fork
   server's, as it was when the server started (an earlier run's, or an earlier
   test's), and torch's agent adds only the rank's own variables;
3. joins the rank's network namespace when the network is emulated (before any socket);
4. starts the heartbeat the launcher's watchdog reads (:mod:`dmlbench.heartbeat`);
5. runs ``module:function`` with the given arguments.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from dmlbench.heartbeat import start_heartbeat
from dmlbench.system import die_with_parent, leave_the_server

# The environment this module was imported in: the fork server's, which its workers
# inherit, or a spawned worker's own before torch's agent adds the rank's variables.
_IMPORTED_IN = dict(os.environ)


def take_environment(launcher: dict[str, str]) -> None:
    """Make this process's environment the ``launcher``'s, keeping what torch's agent set
    for this rank since this module was imported (``RANK``, ``MASTER_PORT``...)."""
    agent = {k: v for k, v in os.environ.items() if _IMPORTED_IN.get(k) != v}
    os.environ.clear()
    os.environ.update({**launcher, **agent})


def _end_quietly(signum: int, frame: Any) -> None:
    os._exit(128 + signum)


def worker_entry(settings_json: str, target: str, *args: Any) -> Any:
    # Ctrl-C reaches every process of the terminal's group, and the agent passes it on
    # to its workers; the launcher reports it in one line, so a worker just ends (its
    # KeyboardInterrupt printed a traceback per rank).
    signal.signal(signal.SIGINT, _end_quietly)
    settings = json.loads(settings_json)
    leave_the_server()
    die_with_parent(settings["launcher_pid"], via_server=True)
    if "environment" in settings:
        take_environment(settings["environment"])
    namespaces = settings.get("namespaces")
    if namespaces:
        from dmlbench.netem.namespaces import enter_namespace
        from dmlbench.netem.topology import WORKER_IFNAME

        enter_namespace(namespaces[int(os.environ["LOCAL_RANK"])])
        os.environ["GLOO_SOCKET_IFNAME"] = WORKER_IFNAME
    start_heartbeat(
        Path(settings["heartbeat_dir"]), int(os.environ.get("RANK", 0)), settings["heartbeat_s"]
    )
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)(*args)
