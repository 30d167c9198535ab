"""torch's c10d rendezvous, with both of its stores listening on the run's address only.

torch's own ``c10d`` backend creates two ``TCPStore`` servers, the rendezvous store and
the store the workers' process group bootstraps from, and both listen on every
interface. This backend (``dmlbench-c10d``) is the same engine, torch's
``DynamicRendezvousHandler`` over ``C10dRendezvousBackend``, whose servers listen on
the rendezvous endpoint's host: 127.0.0.1 by default, the emulated bridge under
``--network``. Nothing else differs.

Which process hosts the rendezvous store: ``is_host`` true or false as torchrun's
``is_host``; unset (multi-node), the one that can listen on the endpoint's address (it
is this host's, and no agent here holds the port yet), as torch's own c10d decides.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from torch.distributed import Store, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousConnectionError,
    RendezvousHandler,
    RendezvousParameters,
    RendezvousTimeoutError,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
)
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from dmlbench.errors import DmlbenchError
from dmlbench.listeners import RENDEZVOUS_PORT, tcp_store_server

BACKEND = "dmlbench-c10d"
# Workers bootstrap from the agent's store (ours, bound); never from one of their own.
SHARE_STORE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}


class RendezvousFull(RendezvousTimeoutError):
    """The rendezvous holds all its nodes already, and this node is not one of them."""


class _JoinWithin:
    """torch's rendezvous operations, with joining bounded by the join timeout.

    torch keeps a node that finds the rendezvous full (its "redundancy list") waiting
    for a later round with no timeout at all: a rogue third node of a two-node job
    waited for the whole job, then failed with torch's message about a closed
    rendezvous. Here it gives up at its own deadline and says why."""

    def __init__(self, inner: Any, deadline: float, handler: DynamicRendezvousHandler) -> None:
        self.inner, self.deadline, self.handler = inner, deadline, handler

    def run(self, state_handler: Any, deadline: float, update_deadline: Any = None) -> None:
        def bounded(ctx: Any, op_deadline: float) -> Any:
            waiting = ctx.node in getattr(ctx.state, "redundancy_list", ())
            if waiting and time.monotonic() > self.deadline:
                settings = self.handler.settings
                raise RendezvousFull(
                    f"the rendezvous (id {settings.run_id}) already has all its "
                    f"{settings.max_nodes} nodes, and this node is not one of them"
                )
            return state_handler(ctx, op_deadline)

        if update_deadline is None:
            return self.inner.run(bounded, deadline)
        return self.inner.run(bounded, deadline, update_deadline)


class BoundRendezvousHandler(DynamicRendezvousHandler):
    """torch's handler; the store it makes for the workers listens on this node's
    address, and a node never waits past its join timeout (see :class:`_JoinWithin`)."""

    def _create_tcp_store_server(self, master_addr: str, master_port: int) -> TCPStore:
        return tcp_store_server(master_addr, master_port, timeout=timedelta(seconds=300))

    def next_rendezvous(self) -> Any:
        inner = self._op_executor
        join = self.settings.timeout.join.total_seconds()
        self._op_executor = _JoinWithin(inner, time.monotonic() + join, self)  # type: ignore[assignment]
        try:
            return super().next_rendezvous()
        finally:
            self._op_executor = inner

    def get_backend(self) -> str:
        return BACKEND


def _seconds(params: RendezvousParameters, key: str) -> timedelta | None:
    value = params.get_as_int(f"{key}_timeout")
    return None if value is None else timedelta(seconds=value)


def _connect(host: str, port: int, wait: timedelta) -> TCPStore:
    """A client of the rendezvous store at ``host:port``, within ``wait`` whatever listens
    there. torch's own connect honours its timeout only until the TCP connection is up:
    a listener that accepts and never answers its handshake held a node 150 s against a
    20 s timeout, bounded only by the other side. The connect runs in a thread (it lets
    go of the GIL), and one that has not finished in time is given up."""
    made: dict[str, Any] = {}

    def connect() -> None:
        try:
            made["store"] = TCPStore(host, port, is_master=False, multi_tenant=True, timeout=wait)
        except Exception as error:  # torch's DistNetworkError, with a C++ trace in it
            made["error"] = error

    thread = threading.Thread(target=connect, name="rendezvous-connect", daemon=True)
    thread.start()
    thread.join(wait.total_seconds() + 1)
    where = f"cannot reach the rendezvous store at {host}:{port} within {wait.seconds} s"
    if thread.is_alive():  # left blocked; it ends with this process
        raise RendezvousConnectionError(
            f"{where}: something accepted the connection but never answered as a torch "
            "rendezvous store (not one, or a frozen one)"
        )
    if "error" in made:
        reason = str(made["error"]).split("\n")[0].rpartition("): ")[2][:200]
        if "Ping failed" in reason:  # an answer, but not a c10d store's
            reason = "something else listens there (not a torch rendezvous store)"
        raise RendezvousConnectionError(f"{where}: {reason}")
    store: TCPStore = made["store"]
    return store


def _create_handler(params: RendezvousParameters) -> RendezvousHandler:
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=RENDEZVOUS_PORT)
    read_timeout = timedelta(seconds=params.get_as_int("read_timeout", 60) or 60)
    store: Store | None = None
    is_host = params.get_as_bool("is_host")
    if is_host:
        store = tcp_store_server(host, port, timeout=read_timeout)
    elif is_host is None:  # multi-node: host it if this host can listen there
        try:
            store = tcp_store_server(host, port, timeout=read_timeout)
        except OSError:  # not an address of this host, or another agent here hosts it
            store = None
    if store is None:  # wait for the host's store as long as for the other nodes
        wait = timedelta(seconds=params.get_as_int("join_timeout", 600) or 600)
        store = _connect(host, port, wait)
        store.set_timeout(read_timeout)
    timeout = RendezvousTimeout(
        *(_seconds(params, k) for k in ("join", "last_call", "close", "heartbeat"))
    )
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


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of one multi-node job meet: torchrun's ``--rdzv-*`` flags.

    Every node runs ``dmlbench run`` with the same endpoint and id; the node that can
    listen on the endpoint hosts torch's rendezvous store there, the others join it.
    ``local_addr`` is the address this node's listeners bind (gloo, and the workers'
    store when this node holds rank 0): by default the one that faces the endpoint.
    """

    endpoint: str  # HOST:PORT
    run_id: str
    nodes: int
    timeout_s: int = 600
    local_addr: str | None = None

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_rendezvous_endpoint(self.endpoint, default_port=RENDEZVOUS_PORT)

    def address(self) -> str:
        """The address this node binds: ``local_addr``, or the one facing the endpoint."""
        if self.local_addr:
            return self.local_addr
        host, port = self.host_port
        return address_towards(host, port)


def address_towards(host: str, port: int = RENDEZVOUS_PORT) -> str:
    """This host's address on the route to ``host`` (no packet is sent)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as error:
        raise DmlbenchError(
            f"rendezvous host {host!r} does not resolve: {error.strerror}; "
            "give its address in --rdzv-endpoint"
        ) from None
    family, _, _, _, where = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(where)
        except OSError as error:
            raise DmlbenchError(
                f"no route from this host to the rendezvous host {host}: {error.strerror}"
            ) from None
        return str(probe.getsockname()[0])
