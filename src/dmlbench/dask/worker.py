"""What runs on the Dask workers: gradient tasks (centralised engine) and DDP epochs.

Workers receive the training data once per fit (scattered) and a :class:`Recipe` (how
to build the module and the loss) once per fit; each worker thread builds its replica
from the recipe the first time and caches it. Per update only the flat weight vector
(``float32``, parameters then floating-point buffers) travels to the workers, and only
each task's flat gradient sum comes back.

A replica trains on the recipe's ``device`` (:func:`resolve_device`: ``cpu``, ``cuda``,
``cuda:N`` or ``auto``); whatever travels between driver and workers is on the CPU, so
a driver without a GPU can drive workers with one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
from torch import nn

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TrainData:
    """The training set as workers hold it: ``x`` float32, ``y`` int64 class indices
    (classification) or float32 targets (regression)."""

    x: np.ndarray
    y: np.ndarray

    def batch(self, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.x[index]), torch.from_numpy(self.y[index])


@dataclass(frozen=True)
class Recipe:
    """Everything needed to build the same module and loss anywhere."""

    key: str  # unique per fit: names the worker-side cache entry
    module: Any  # an nn.Module class (built with module_kwargs) or an instance (copied)
    module_kwargs: dict[str, Any]
    loss: Any  # a loss class (built with loss_kwargs) or a callable
    loss_kwargs: dict[str, Any]
    torch_threads: int | None = None
    device: str = "cpu"  # where the replicas train: see resolve_device

    def build_module(self) -> nn.Module:
        if isinstance(self.module, nn.Module):
            import copy

            return copy.deepcopy(self.module)
        return self.module(**self.module_kwargs)

    def build_loss(self) -> LossFn:
        if isinstance(self.loss, type):
            return self.loss(**self.loss_kwargs)
        return self.loss


DEVICES = "'cpu', 'cuda', 'cuda:N' or 'auto'"


def check_device_name(name: Any) -> None:
    """Refuse a device name no worker could use, before anything starts."""
    valid = isinstance(name, str) and (
        name in ("auto", "cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit())
    )
    if not valid:
        raise ValueError(f"device must be {DEVICES}, not {name!r}")


def resolve_device(name: str, where: str = "this machine") -> torch.device:
    """The device a replica trains on here: ``auto`` is the first GPU where there is
    one, else the CPU; a GPU that is absent is refused in one line."""
    check_device_name(name)
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name == "auto":
        return torch.device("cuda:0" if available else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and (device.index or 0) >= available:
        raise RuntimeError(
            f"device={name!r}, but {where} has {available} CUDA device"
            f"{'' if available == 1 else 's'}: use device='cpu', or 'auto' to take a "
            "GPU only where there is one"
        )
    return device


def to_cpu(value: Any) -> Any:
    """A state dict (nested dicts and lists of tensors) with every tensor on the CPU."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(v) for v in value)
    return value


def fit_output(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A regressor's ``(n, 1)`` output meets a ``(n,)`` target."""
    if output.dim() == target.dim() + 1 and output.shape[-1] == 1:
        return output.squeeze(-1)
    return output


# ---------------------------------------------------------------- flat weight vectors


def state_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters, then floating-point buffers (BatchNorm statistics), in module order."""
    tensors: list[torch.Tensor] = list(module.parameters())
    tensors += [b for b in module.buffers() if b.is_floating_point()]
    return tensors


def flat_state(module: nn.Module) -> np.ndarray:
    with torch.no_grad():
        flat = torch.cat([t.detach().reshape(-1).float() for t in state_tensors(module)])
        return flat.cpu().numpy()


def load_flat_state(module: nn.Module, vector: np.ndarray) -> None:
    source = torch.from_numpy(np.require(vector, requirements="W"))
    offset = 0
    with torch.no_grad():
        for tensor in state_tensors(module):
            n = tensor.numel()
            tensor.copy_(source[offset : offset + n].view_as(tensor))
            offset += n
    if offset != source.numel():
        raise ValueError(f"weight vector has {source.numel()} values, the module {offset}")


def flat_grad(module: nn.Module) -> torch.Tensor:
    parts = []
    for p in module.parameters():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        parts.append(grad.reshape(-1))
    return torch.cat(parts)


def n_parameter_values(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---------------------------------------------------------------- the centralised engine


@dataclass(frozen=True)
class GradientResult:
    grad_sum: np.ndarray  # Σ over the task's examples of ∇loss (float32, parameters only)
    loss_sum: float
    count: int
    buffers: np.ndarray | None  # floating-point buffers after the forward pass, if any
    compute_s: float  # gathering the examples, forward, backward
    worker: str


def worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except ValueError:  # not on a worker (a local call)
        return f"local-{os.getpid()}"


class GradientWorker:
    """A Dask actor, one per worker per fit: holds the data and a replica of the module,
    and computes gradient tasks. The driver calls it directly (no scheduler round trip
    per task); workers that join later get their own as they arrive."""

    def __init__(self, recipe: Recipe, data: TrainData) -> None:
        if recipe.torch_threads:
            torch.set_num_threads(recipe.torch_threads)
        torch.manual_seed(0)  # tasks differ by their examples, not by worker-local seeds
        self.address = worker_address()
        self.device = resolve_device(recipe.device, f"Dask worker {self.address}")
        self.data = data
        self.module = recipe.build_module().to(self.device)
        self.loss = recipe.build_loss()
        self.n_params = n_parameter_values(self.module)

    def gradients(self, weights: np.ndarray, indices: list[np.ndarray]) -> list[GradientResult]:
        """Several gradient tasks at the same ``weights``: one message per worker and
        update however many tasks it takes."""
        load_flat_state(self.module, weights)
        return [self._gradient(index) for index in indices]

    def _gradient(self, index: np.ndarray) -> GradientResult:
        """The summed gradient of ``index``'s examples at the loaded weights."""
        start = time.perf_counter()
        x, y = (t.to(self.device) for t in self.data.batch(index))
        self.module.train()
        self.module.zero_grad(set_to_none=True)
        output = self.module(x)
        loss = self.loss(fit_output(output, y), y)
        loss.backward()
        count = len(index)
        grad = (flat_grad(self.module) * count).cpu().numpy()  # waits for a GPU
        compute = time.perf_counter() - start
        state = flat_state(self.module)
        buffers = state[self.n_params :].copy() if state.size > self.n_params else None
        return GradientResult(grad, loss.item() * count, count, buffers, compute, self.address)


# ---------------------------------------------------------------- the DDP engine


@dataclass(frozen=True)
class Generation:
    """One process group: fixed workers and world size. A new one when either changes."""

    number: int
    key: str  # the fit's recipe key
    master_addr: str
    master_port: int
    world_size: int
    timeout_s: float


@dataclass(frozen=True)
class EpochPlan:
    """One epoch of a DDP generation: per update, this rank's example indices, the global
    batch size and the learning-rate factor."""

    indices: list[np.ndarray]
    global_batches: list[int]
    lr_factors: list[float]


@dataclass(frozen=True)
class TrainerState:
    """What a new generation starts from: flat weights and the optimizer's state dict."""

    weights: np.ndarray
    optimizer_state: dict[str, Any]


@dataclass(frozen=True)
class EpochResult:
    rank: int
    loss_sums: list[float]
    counts: list[int]
    compute_s: list[float]  # per update: forward + backward + all-reduce + step
    worker: str
    state: TrainerState | None  # rank 0 only


_DDP: dict[str, Any] = {}


def _worker_host() -> str:
    """The address this Dask worker listens on (where its peers reach it)."""
    try:
        from distributed import get_worker

        address = get_worker().address
    except ValueError:
        return "127.0.0.1"
    return address.split("://")[-1].rsplit(":", 1)[0].strip("[]")


def open_rendezvous(timeout_s: float) -> tuple[str, int]:
    """Start the next generation's store on this worker (its rank 0), listening on the
    worker's own address only, and return where the other ranks find it."""
    from dmlbench.listeners import tcp_store_server

    host = _worker_host()
    ddp_teardown()
    store = tcp_store_server(host, 0, timeout=timedelta(seconds=timeout_s))
    _DDP["store"] = store
    return host, int(store.port)


def process_id() -> int:
    return os.getpid()


def hold(value: object) -> None:
    """Nothing: a task that makes its worker fetch ``value`` (see Session.broadcast)."""


def ddp_teardown() -> bool:
    """Destroy this worker's process group, if any (end of fit, or a failed generation)."""
    import torch.distributed as dist

    _DDP.clear()  # the generation's store, if this worker held it, goes with it
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a broken group (a peer died) may refuse to go quietly
            return False
    return True


CONNECT_S = 20.0  # the most a rank waits for its generation's store to answer


def _connect(generation: Generation, timeout: timedelta) -> Any:
    """A client of the generation's store, with the group's ``timeout`` once connected.
    The store was listening before any rank's task was sent, so one that does not answer
    within :data:`CONNECT_S` is gone: the driver abandoned the generation (a peer failed)
    before this task started. Giving up then, rather than after the group timeout, frees
    this worker for the next generation."""
    import torch.distributed as dist

    host, port = generation.master_addr, generation.master_port
    answer = min(timedelta(seconds=CONNECT_S), timeout)
    try:
        store = dist.TCPStore(host, port, is_master=False, timeout=answer)
    except dist.DistError:
        raise RuntimeError(
            f"generation {generation.number}'s store at {host}:{port} is gone: the driver "
            "abandoned it before this rank started"
        ) from None
    store.set_timeout(timeout)
    return store


def _join(
    recipe: Recipe,
    generation: Generation,
    rank: int,
    start: TrainerState,
    optimizer: Any,
    optimizer_kwargs: dict[str, Any],
) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if _DDP.get("generation") == (generation, rank):
        return _DDP
    from dmlbench.comm.group import join_group
    from dmlbench.listeners import interface_of

    # first what needs nobody else: a worker that cannot run the generation says so at once
    device = resolve_device(recipe.device, f"Dask worker {worker_address()}")
    timeout = timedelta(seconds=generation.timeout_s)
    store = _DDP.get("store") if rank == 0 else None  # made by open_rendezvous, bound
    if dist.is_initialized():
        dist.destroy_process_group()
    _DDP.clear()
    if store is None:
        store = _connect(generation, timeout)
    interface = interface_of(_worker_host())
    if interface:  # gloo listens there, not on whatever the host name resolves to
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    backend = "nccl" if device.type == "cuda" else "gloo"
    join_group(
        backend,
        rank=rank,
        world_size=generation.world_size,
        threads=recipe.torch_threads,
        store=store,
        timeout=timeout,
    )
    module = recipe.build_module().to(device)
    load_flat_state(module, start.weights)
    opt = optimizer(module.parameters(), **optimizer_kwargs)
    opt.load_state_dict(start.optimizer_state)
    _DDP.update(
        store=store,
        generation=(generation, rank),
        module=module,
        optimizer=opt,
        ddp=DistributedDataParallel(module, device_ids=[device] if device.type == "cuda" else None),
        device=device,
        loss=recipe.build_loss(),
        base_lrs=[g["lr"] for g in opt.param_groups],
    )
    return _DDP


def ddp_epoch(
    recipe: Recipe,
    data: TrainData,
    generation: Generation,
    rank: int,
    start: TrainerState,
    optimizer: Any,
    optimizer_kwargs: dict[str, Any],
    plan: EpochPlan,
) -> EpochResult:
    """Run one epoch's updates as rank ``rank`` of ``generation``; rank 0 returns the
    state the next epoch or generation starts from."""
    state = _join(recipe, generation, rank, start, optimizer, optimizer_kwargs)
    module, ddp, opt, loss_fn = state["module"], state["ddp"], state["optimizer"], state["loss"]
    losses, counts, times = [], [], []
    for index, global_batch, factor in zip(
        plan.indices, plan.global_batches, plan.lr_factors, strict=True
    ):
        begin = time.perf_counter()
        for group, base in zip(opt.param_groups, state["base_lrs"], strict=True):
            group["lr"] = base * factor
        x, y = (t.to(state["device"]) for t in data.batch(index))
        module.train()
        opt.zero_grad(set_to_none=True)
        count = len(index)  # ≥ 1: the driver never plans an empty shard
        loss = loss_fn(fit_output(ddp(x), y), y)
        # DDP averages over ranks; weight each rank by its share of the global batch
        (loss * (count * generation.world_size / global_batch)).backward()
        losses.append(loss.item() * count)
        opt.step()
        counts.append(count)
        times.append(time.perf_counter() - begin)
    final = None
    if rank == 0:
        final = TrainerState(flat_state(module), to_cpu(opt.state_dict()))
    return EpochResult(rank, losses, counts, times, worker_address(), final)
