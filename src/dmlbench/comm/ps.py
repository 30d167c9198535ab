"""A parameter server, its own process: ``ps-sync``, ``ps-async`` and ``ssp``.

Rank 0 starts the server (a child process that dies with it) and a TCP store for it,
bound to the address of the interface gloo uses (loopback by default; a worker's own
address in an emulated network). Server and workers form
a gloo group of their own, the server rank 0 in it, worker r rank r + 1, and talk point
to point; the workers' own group is untouched.

Each worker steps its own optimizer on its own gradient (momentum and weight decay are
the worker's), then pushes the change to the weights it last pulled and waits for the
server's current weights. The server adds each push divided by the number of workers,
so one push from everyone moves the weights by one synchronous step; it answers a
worker that has pushed c times once the slowest worker has pushed c - s times:

- ``ps-sync``: s = 0, every worker waits for all of them: synchronous SGD (the same
  weights, since the average of the workers' optimizer steps from the same weights is
  one step on the averaged gradient, momentum included: each is linear);
- ``ssp``: stale-synchronous, s = ``staleness`` (Ho et al. 2013);
- ``ps-async``: no bound, no barrier: a worker gets whatever the server holds.

Waiting for the server's answer is the step's ``comm``. Before an evaluation the
workers meet at a barrier and pull the server's weights, which every push has reached,
so all evaluate the same model. Bytes per worker per step: the change (4 bytes per
parameter) and a 16-byte header; an evaluation's pull sends a header.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from pydantic import Field
from torch import nn
from torch.nn.utils import parameters_to_vector

from dmlbench.comm.collectives import world_size
from dmlbench.comm.sync import AllReduceExchange
from dmlbench.listeners import LOOPBACK, NODE_ADDRESS_ENV, address_of, tcp_store_server
from dmlbench.strict import StrictModel
from dmlbench.system import die_with_parent, process_cpu_s

PUSH, PULL, DONE = 0, 1, 2  # a header's kind
HEADER, PAYLOAD, REPLY, INITIAL = 0, 1, 2, 3  # message tags
PREFIX = "dmlbench-ps"
TIMEOUT = timedelta(minutes=10)
ADDRESS_BYTES = 64  # room for an IPv6 address or a host name


class SSPOptions(StrictModel):
    staleness: int = Field(
        2, ge=0, le=1_000_000, description="s: pushes a worker may be ahead of the slowest"
    )


def serve(
    parent: int, host: str, port: int, workers: int, numel: int, staleness: int | None
) -> None:
    """The server's loop: weights from worker 0, then pushes and pulls until all are done."""
    die_with_parent(parent)  # a worker killed mid-run leaves no server behind
    torch.set_num_threads(1)
    store = dist.TCPStore(host, port, is_master=False, timeout=TIMEOUT)
    prefixed = dist.PrefixStore(PREFIX, store)
    group: Any = cast(Any, dist.ProcessGroupGloo(prefixed, 0, workers + 1, TIMEOUT))
    weights = torch.empty(numel)
    group.recv([weights], 1, INITIAL).wait()
    header = torch.zeros(2, dtype=torch.int64)
    change = torch.empty(numel)
    pushes = [0] * workers
    waiting: set[int] = set()
    done: set[int] = set()
    while len(done) < workers:
        work = group.recv_anysource([header], HEADER)
        work.wait()
        peer = work._source_rank()
        kind = int(header[0])
        if kind == PUSH:
            group.recv([change], peer, PAYLOAD).wait()
            weights.add_(change, alpha=1.0 / workers)
            pushes[peer - 1] += 1
            waiting.add(peer)
        elif kind == PULL:
            group.send([weights], peer, REPLY).wait()
            continue
        else:
            done.add(peer)
        active = [pushes[r - 1] for r in range(1, workers + 1) if r not in done]
        slowest = min(active, default=0)
        for peer in sorted(waiting):
            if peer in done or staleness is None or pushes[peer - 1] - slowest <= staleness:
                group.send([weights], peer, REPLY).wait()
                waiting.discard(peer)


def _my_address() -> str:
    """Where rank 0 can listen for its peers: the address of the interface gloo uses (a
    worker's own in an emulated network), else its node's, else loopback."""
    interface = os.environ.get("GLOO_SOCKET_IFNAME")
    found = address_of(interface) if interface else None
    return found or os.environ.get(NODE_ADDRESS_ENV) or LOOPBACK


class ParameterServerExchange(AllReduceExchange):
    """Workers push their optimizer's change and pull the server's weights (see module)."""

    name = "ps-sync"
    exact = False
    vote_every = 16
    sends_alone = True  # to its server, a process of its own

    def staleness(self) -> int | None:
        return 0

    def prepare(self, model: nn.Module) -> nn.Module:
        prepared = super().prepare(model)  # every rank starts from rank 0's weights
        self.pulled = parameters_to_vector(self.params).detach()  # a new tensor
        workers = world_size()
        rank = dist.get_rank() if workers > 1 else 0
        self.server: multiprocessing.process.BaseProcess | None = None
        address = torch.zeros(ADDRESS_BYTES + 8, dtype=torch.uint8)  # host, then port
        if rank == 0:
            host = _my_address()
            self.store = tcp_store_server(host, timeout=TIMEOUT)
            where = (os.getpid(), host, self.store.port)
            self.server = multiprocessing.get_context("spawn").Process(
                target=serve,
                args=(*where, workers, self.pulled.numel(), self.staleness()),
                name="dmlbench-ps",
                daemon=True,
            )
            self.server.start()
            encoded = host.encode()[:ADDRESS_BYTES]
            address[: len(encoded)] = torch.tensor(list(encoded), dtype=torch.uint8)
            address[ADDRESS_BYTES:] = torch.tensor([self.store.port]).view(torch.uint8)
            store: dist.Store = self.store
        if workers > 1:
            dist.broadcast(address, src=0)  # where rank 0's store listens
        if rank != 0:
            host = bytes(address[:ADDRESS_BYTES].tolist()).rstrip(b"\0").decode()
            port = int(address[ADDRESS_BYTES:].view(torch.int64))
            store = dist.TCPStore(host, port, is_master=False, timeout=TIMEOUT)
        prefixed = dist.PrefixStore(PREFIX, store)
        # typed Any: torch's stubs give a gloo backend no send/recv, which it has
        self.group: Any = cast(Any, dist.ProcessGroupGloo(prefixed, rank + 1, workers + 1, TIMEOUT))
        if rank == 0:
            self.group.send([self.pulled], 0, INITIAL).wait()
        self.header = torch.zeros(2, dtype=torch.int64)
        self.pushes = 0
        self.closed = False
        return prepared

    def exchange(self, stop: bool | None) -> bool:
        return self._vote_alone(stop)  # gradients stay with their worker

    def _send_header(self, kind: int) -> None:
        self.header[0], self.header[1] = kind, self.pushes
        self.group.send([self.header], 0, HEADER).wait()
        self.bytes_sent += self.header.numel() * self.header.element_size()

    def _pull(self) -> None:
        self.group.recv([self.pulled], 0, REPLY).wait()
        offset = 0
        with torch.no_grad():  # a copy: the parameters must not share the pulled buffer
            for p in self.params:
                p.copy_(self.pulled[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

    def after_step(self) -> bool:
        change = parameters_to_vector(self.params).detach() - self.pulled
        self._send_header(PUSH)
        self.group.send([change], 0, PAYLOAD).wait()
        self.bytes_sent += change.numel() * change.element_size()
        self.pushes += 1
        self._pull()
        return True

    def sync_buffers(self, model: nn.Module) -> None:
        if world_size() > 1:
            dist.barrier()  # every worker's last push has reached the server
        self._send_header(PULL)
        self._pull()
        super().sync_buffers(model)

    def helper_cpu_s(self) -> float:
        return process_cpu_s(self.server.pid) if self.server and self.server.pid else 0.0

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(RuntimeError):  # a gone server: a failure is reported already
            self._send_header(DONE)
        if self.server is not None:
            self.server.join(timeout=30)
            if self.server.is_alive():
                self.server.kill()
                self.server.join()


class SSPExchange(ParameterServerExchange):
    """The parameter server with stale synchronous parallel: a worker runs ahead of the
    slowest by at most ``staleness`` steps."""

    name = "ssp"
    Options = SSPOptions

    def staleness(self) -> int | None:
        options = self.options_as(SSPOptions)
        return options.staleness


class AsyncParameterServerExchange(ParameterServerExchange):
    """The parameter server without waiting: each worker pushes and pulls on its own."""

    name = "ps-async"

    def staleness(self) -> int | None:
        return None
