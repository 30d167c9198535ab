"""Exchanges' own arithmetic in one process (world size 1): encodings, error feedback,
gossip graphs. The multi-process behaviour is in test_training.py."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
from torch import nn

from dmlbench.comm.compressed import pack_signs, unpack_signs
from dmlbench.comm.exchange import EXCHANGES, check_options, is_exact, make_exchange
from dmlbench.comm.local import gossip_peers, mixing_matrix, torus_shape
from dmlbench.errors import SpecError
from dmlbench.resolve import deviations, resolve_spec

CPU = torch.device("cpu")


def _prepared(name: str, options: dict | None = None, size: int = 13):
    """An exchange prepared on a one-layer model with ``size`` parameters, and its grads."""
    model = nn.Linear(size, 1, bias=False)
    exchange = make_exchange(name, CPU, options)
    exchange.prepare(model)
    return exchange, model.weight


def test_allreduce_keeps_each_gradient_in_its_parameters_layout_inside_its_buffer() -> None:
    """A channels-last model's gradients are views of the flat buffer laid out as their
    weights are (a fused optimizer walks both alike; torch 2.13's fused SGD on a CPU
    steps a mismatched pair to wrong weights), and backward fills them as it would
    without the exchange."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(64, 2))
    model = model.to(memory_format=torch.channels_last)
    alone = copy.deepcopy(model)
    exchange = make_exchange("allreduce", CPU, None)
    exchange.prepare(model)
    x = torch.randn(5, 3, 6, 6).contiguous(memory_format=torch.channels_last)
    for net in (model, alone):
        net(x).square().sum().backward()
    weight = model[0].weight
    assert weight.stride() != weight.contiguous().stride()  # a channels-last weight
    for p, q in zip(model.parameters(), alone.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        assert p.grad.stride() == p.stride()
        assert p.grad.untyped_storage().data_ptr() == exchange.flat.untyped_storage().data_ptr()
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("size", [1, 7, 8, 9, 100])
def test_signs_pack_eight_to_a_byte_and_come_back(size: int) -> None:
    values = torch.randn(size)
    values[0] = 0.0  # zero counts as +
    message = pack_signs(values, torch.tensor(0.25))
    assert message.dtype == torch.uint8 and message.numel() == 4 + -(-size // 8)
    signs, scale = unpack_signs(message, size)
    torch.testing.assert_close(signs, torch.where(values >= 0, 1.0, -1.0))
    assert float(scale) == 0.25


def test_signsgd_steps_by_the_scaled_sign_and_a_tied_vote_is_zero() -> None:
    exchange, weight = _prepared("signsgd", size=4)
    grads = torch.tensor([0.5, -1.0, 2.0, -0.5])
    weight.grad.view(-1).copy_(grads)
    assert exchange.exchange(None) is False
    scale = grads.abs().mean()
    torch.testing.assert_close(weight.grad.view(-1), torch.sign(grads) * scale)
    # two workers disagreeing on the last entry: the vote ties, no step there
    flat = torch.zeros(4)
    a, b = (
        pack_signs(torch.tensor([1.0, -1, 1, 1]), torch.tensor(1.0)),
        pack_signs(torch.tensor([1.0, -1, 1, -1]), torch.tensor(3.0)),
    )
    exchange.decode([a, b], flat)
    torch.testing.assert_close(flat, torch.tensor([2.0, -2.0, 2.0, 0.0]))
    assert exchange.sent() == 0  # alone: compressed all the same, and nothing sent


def test_ef_signsgd_keeps_what_the_compression_lost() -> None:
    exchange, weight = _prepared("ef-signsgd", size=5)
    first = torch.tensor([3.0, -1.0, 0.5, 0.0, -2.0])
    weight.grad.view(-1).copy_(first)
    exchange.exchange(None)
    sent = weight.grad.view(-1).clone()
    scale = first.abs().mean()
    torch.testing.assert_close(sent, torch.where(first >= 0, 1.0, -1.0) * scale)
    torch.testing.assert_close(exchange.error, first - sent)  # nothing lost for good
    second = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0])
    weight.grad.view(-1).copy_(second)
    exchange.exchange(None)
    corrected = second + (first - sent)
    expected = torch.where(corrected >= 0, 1.0, -1.0) * corrected.abs().mean()
    torch.testing.assert_close(weight.grad.view(-1), expected)


@pytest.mark.parametrize("error_feedback", [True, False])
def test_topk_sends_the_largest_entries_and_remembers_the_rest(error_feedback: bool) -> None:
    options = {"ratio": 0.25, "error_feedback": error_feedback}
    exchange, weight = _prepared("topk", options, size=8)
    grads = torch.tensor([0.1, -4.0, 0.2, 3.0, -0.3, 0.0, 0.05, -0.01])
    weight.grad.view(-1).copy_(grads)
    exchange.exchange(None)
    expected = torch.zeros(8)
    expected[[1, 3]] = grads[[1, 3]]
    torch.testing.assert_close(weight.grad.view(-1), expected)
    assert exchange.sent() == 0
    if error_feedback:
        torch.testing.assert_close(exchange.error, grads - expected)
        weight.grad.view(-1).copy_(torch.zeros(8))
        exchange.exchange(None)  # the kept error is sent next: -0.3 and 0.2 now lead
        expected = torch.zeros(8)
        expected[[2, 4]] = grads[[2, 4]]
        torch.testing.assert_close(weight.grad.view(-1), expected)
    else:
        assert not hasattr(exchange, "error")


@pytest.mark.parametrize("topology", ["ring", "torus", "exponential", "complete"])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 6, 8, 9, 12])
def test_every_gossip_graph_mixes_with_a_doubly_stochastic_matrix(
    topology: str, world: int
) -> None:
    weights = mixing_matrix(topology, world)
    ones = torch.ones(world, dtype=torch.float64)
    torch.testing.assert_close(weights.sum(0), ones)
    torch.testing.assert_close(weights.sum(1), ones)
    for rank in range(world):  # what one rank sends is what the others expect to hear
        out, _ = gossip_peers(topology, rank, world)
        assert all(rank in gossip_peers(topology, peer, world)[1] for peer in out)
    if world > 2:  # repeated mixing reaches consensus: the graph is connected
        power = torch.linalg.matrix_power(weights, 200)
        torch.testing.assert_close(
            power, torch.full((world, world), 1 / world, dtype=torch.float64)
        )


def test_gossip_graphs_have_the_expected_neighbours() -> None:
    assert gossip_peers("ring", 0, 8) == ([1, 7], [1, 7])
    assert gossip_peers("exponential", 0, 8) == ([1, 2, 4], [4, 6, 7])
    assert torus_shape(12) == (3, 4) and torus_shape(7) == (1, 7)
    assert gossip_peers("torus", 5, 12) == ([1, 4, 6, 9], [1, 4, 6, 9])
    torch.testing.assert_close(
        mixing_matrix("complete", 4), torch.full((4, 4), 0.25, dtype=torch.float64)
    )


def test_options_are_checked_per_exchange_and_name_the_bad_key() -> None:
    assert check_options("powersgd", {"rank": 4}).rank == 4  # type: ignore[attr-defined]
    with pytest.raises(SpecError, match="start_step"):
        resolve_spec(
            "digits-mlp", overrides=["exchange=powersgd", "exchange_options={start_step: 1}"]
        )
    with pytest.raises(SpecError, match="topology"):
        resolve_spec(
            "digits-mlp", overrides=["exchange=gossip", "exchange_options={topology: star}"]
        )
    with pytest.raises(SpecError, match="staleness"):
        resolve_spec("digits-mlp", overrides=["exchange=ssp", "exchange_options={staleness: -1}"])
    with pytest.raises(SpecError, match="ratio"):
        resolve_spec("digits-mlp", overrides=["exchange=topk", "exchange_options={ratio: 0}"])
    # `dmlbench exchanges` says options are set as exchange_options.KEY: that was refused
    # ("unknown spec key 'exchange_options.ratio'"), the mapping being empty by default
    spec = resolve_spec("digits-mlp", overrides=["exchange=topk", "exchange_options.ratio=0.2"])
    assert spec.exchange_options == {"ratio": 0.2}
    # a misspelt option is named with the closest the exchange takes ("Extra inputs...")
    with pytest.raises(SpecError, match=r"ratoi: unknown key \(did you mean 'ratio'\?\)"):
        resolve_spec("digits-mlp", overrides=["exchange=topk", "exchange_options={ratoi: 1}"])
    with pytest.raises(SpecError, match=r"ratio: unknown key \(it takes none\)"):
        resolve_spec("digits-mlp", overrides=["exchange=ddp", "exchange_options={ratio: 1}"])


def test_only_synchronous_sgd_is_closed_division() -> None:
    # the sharded ones compute the same update (their weights are DDP's: test_language)
    exact = {name for name in EXCHANGES if is_exact(name)}
    assert exact == {"allreduce", "ddp", "zero1", "fsdp"}
    spec = resolve_spec("digits-mlp", overrides=["exchange=topk", "exchange_options={ratio: 0.1}"])
    assert deviations(spec) == {
        "exchange": {"reference": "allreduce", "actual": "topk"},
        "exchange_options.ratio": {"reference": None, "actual": 0.1},
    }


def test_gathered_values_come_back_by_name_not_by_position() -> None:
    from dmlbench.comm.collectives import all_gather_named

    values = {"phases": [1.0, 2.0, 3.0], "faults": 7, "cpu": [4.0, 5.0], "sent": 2.5}
    (rank,) = all_gather_named(values, torch.device("cpu"))  # one rank: no group
    assert rank == {"phases": [1.0, 2.0, 3.0], "faults": 7.0, "cpu": [4.0, 5.0], "sent": 2.5}
    (empty,) = all_gather_named({"none": [], "one": 1.0}, torch.device("cpu"))
    assert empty == {"none": [], "one": 1.0}


def test_what_an_exchange_imports_when_first_used_loads_before_the_memory_is_measured() -> None:
    """ZeRO's optimizer module costs megabytes of a worker's memory when imported: the
    trainer loads it before it reads the starting memory, so it is not counted as the
    run's. Fresh interpreters, as a worker's first import would be."""
    import subprocess
    import sys

    probe = (
        "import sys; from dmlbench.comm import load_modules; "
        "before = 'torch.distributed.optim' in sys.modules; load_modules('zero1'); "
        "print(before, 'torch.distributed.optim' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "True"], done.stderr
    for name, exchange in EXCHANGES.items():  # each names a module that exists
        for module in exchange.modules:
            assert importlib.util.find_spec(module) is not None, (name, module)


@pytest.fixture
def group_of_one():
    """A real gloo process group of one rank (DDP and FSDP need one even alone)."""
    import socket

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


SERVED = ("ps-sync", "ssp", "ps-async")  # a server process of their own: they do send


@pytest.mark.parametrize("name", [name for name in EXCHANGES if name not in SERVED])
def test_one_worker_sends_nothing_whatever_its_exchange(group_of_one, name: str) -> None:
    """A worker alone hands its gradients to no one: every exchange counts 0 bytes, as
    the reference all-reduce does (DDP's hooks all-reduce over a group of one; the
    report drew its 1-worker runs at 38 KB a step beside allreduce's 0)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(13, 8), nn.ReLU(), nn.Linear(8, 2))
    exchange = make_exchange(name, CPU, None)
    net = exchange.prepare(model)
    optimizer = exchange.wrap_optimizer(
        lambda groups: torch.optim.SGD(groups, lr=0.1), [{"params": list(model.parameters())}]
    )
    for _ in range(3):
        exchange.zero_grad()
        net(torch.randn(4, 13)).sum().backward()
        exchange.exchange(None)
        optimizer.step()
        exchange.after_step()
    assert exchange.sent() == 0, name
