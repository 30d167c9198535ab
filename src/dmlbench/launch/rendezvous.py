"""torch's c10d rendezvous, with both of its stores listening on the run's address only.

torch's own ``c10d`` backend creates two ``TCPStore`` servers, the rendezvous store and
the store the workers' process group bootstraps from, and both listen on every
interface. This backend (``dmlbench-c10d``) is the same engine, torch's
``DynamicRendezvousHandler`` over ``C10dRendezvousBackend``, whose servers listen on
the rendezvous endpoint's host: 127.0.0.1 by default, the emulated bridge under
``--network``. Nothing else differs.
"""

from __future__ import annotations

from datetime import timedelta

from torch.distributed import Store, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousParameters,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
)
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from dmlbench.listeners import tcp_store_server

BACKEND = "dmlbench-c10d"
DEFAULT_PORT = 29400
# Workers bootstrap from the agent's store (ours, bound); never from one of their own.
SHARE_STORE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}


class BoundRendezvousHandler(DynamicRendezvousHandler):
    """torch's handler; the store it makes for the workers listens on this node's address."""

    def _create_tcp_store_server(self, master_addr: str, master_port: int) -> TCPStore:
        return tcp_store_server(master_addr, master_port, timeout=timedelta(seconds=300))

    def get_backend(self) -> str:
        return BACKEND


def _seconds(params: RendezvousParameters, key: str) -> timedelta | None:
    value = params.get_as_int(f"{key}_timeout")
    return None if value is None else timedelta(seconds=value)


def _create_handler(params: RendezvousParameters) -> RendezvousHandler:
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=DEFAULT_PORT)
    read_timeout = timedelta(seconds=params.get_as_int("read_timeout", 60) or 60)
    store: Store
    if params.get_as_bool("is_host", True):
        store = tcp_store_server(host, port, timeout=read_timeout)
    else:
        store = TCPStore(host, port, is_master=False, multi_tenant=True, timeout=read_timeout)
    timeout = RendezvousTimeout(*(_seconds(params, k) for k in ("join", "last_call", "close",
                                                                "heartbeat")))  # fmt: skip
    return BoundRendezvousHandler.from_backend(
        params.run_id,
        store,
        C10dRendezvousBackend(store, params.run_id),
        params.min_nodes,
        params.max_nodes,
        params.local_addr,
        timeout,
        keep_alive_interval=params.get_as_int("keep_alive_interval", 5) or 5,
        keep_alive_max_attempt=params.get_as_int("keep_alive_max_attempt", 3) or 3,
    )


rendezvous_handler_registry.register(BACKEND, _create_handler)
