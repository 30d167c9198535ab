"""What every worker process runs first, before the task's own function.

``worker_entry`` is the function torch's elastic agent starts in each worker. It:

0. ends on Ctrl-C without a traceback (the launcher says it in one line);
1. asks the kernel to kill this worker when the launcher dies (``PR_SET_PDEATHSIG``),
   so a killed launcher leaves no orphan waiting 20 minutes on a store that is gone;
2. joins the rank's network namespace when the network is emulated (before any socket);
3. starts the heartbeat the launcher's watchdog reads (:mod:`dmlbench.heartbeat`);
4. runs ``module:function`` with the given arguments.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from dmlbench.heartbeat import start_heartbeat
from dmlbench.system import die_with_parent


def _end_quietly(signum: int, frame: Any) -> None:
    os._exit(128 + signum)


def worker_entry(settings_json: str, target: str, *args: Any) -> Any:
    # Ctrl-C reaches every process of the terminal's group, and the agent passes it on
    # to its workers; the launcher reports it in one line, so a worker just ends (its
    # KeyboardInterrupt printed a traceback per rank).
    signal.signal(signal.SIGINT, _end_quietly)
    settings = json.loads(settings_json)
    die_with_parent(settings["launcher_pid"])
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
