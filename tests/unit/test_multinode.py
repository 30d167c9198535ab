"""Multi-node runs: node-level launch through torch's elastic agent and c10d rendezvous.

The real path is tested without root by starting two node agents on this host's
loopback (exactly the command a user runs on two machines), and as root on an
emulated cluster, one network namespace and one agent per node.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmlbench.resolve import resolve_spec
from dmlbench.spec.sweep import validate_sweep
from dmlbench.sweep.plan import plan_sweep
from dmlbench.train.agreement import first_differences, node_view


def test_layout_is_nodes_times_workers_per_node() -> None:
    spec = resolve_spec("synthetic-mlp", nodes=2, nproc_per_node=3)
    assert (spec.workers, spec.per_node, spec.layout) == (6, 3, "2×3")
    assert resolve_spec("synthetic-mlp", workers=4, nodes=2).per_node == 2
    assert resolve_spec("synthetic-mlp", workers=4).layout == "1×4"
    again = resolve_spec("synthetic-mlp", config=spec.to_json_dict())
    assert again.to_json_dict() == spec.to_json_dict()
    with pytest.raises(Exception, match="do not divide among 2 nodes"):
        resolve_spec("synthetic-mlp", workers=3, nodes=2)
    with pytest.raises(Exception, match="workers 4 is not nodes 2 × nproc_per_node 3"):
        resolve_spec("synthetic-mlp", workers=4, nodes=2, nproc_per_node=3)


def test_nodes_and_nproc_per_node_are_sweep_axes() -> None:
    sweep = validate_sweep(
        {
            "name": "layouts",
            "task": "synthetic-mlp",
            "axes": {"nodes": [1, 2, 4]},
            "derived": {"nproc_per_node": "4 // nodes"},
        }
    )
    plan = plan_sweep(sweep)
    assert [r.spec.layout for r in plan.runs] == ["1×4", "2×2", "4×1"]
    assert {r.spec.workers for r in plan.runs} == {4}
    assert len({r.key for r in plan.runs}) == 3


def test_nodes_that_differ_are_named_with_what_differs() -> None:
    spec = resolve_spec("synthetic-mlp").to_json_dict()
    other = json.loads(json.dumps(spec))
    other["recipe"]["max_epochs"] = 5
    other["data_dir"] = "/elsewhere"  # where a node finds its data may differ
    same = [node_view(spec, "10.0.0.1"), node_view({**spec, "data_dir": "/x"}, "10.0.0.2")]
    assert first_differences(same) is None
    problem = first_differences([node_view(spec, "a"), node_view(other, "b")])
    assert problem is not None
    assert f"node 1 has recipe.max_epochs=5, node 0 has {spec['recipe']['max_epochs']}" in problem
    older = node_view(spec, "b") | {"version": "0.0.1"}
    assert "node 1 runs dmlbench 0.0.1" in (first_differences([same[0], older]) or "")


def test_multi_node_flags_are_refused_in_one_line(dmlbench) -> None:
    code, _, err = dmlbench("run", "--nnodes", "2", "--dry-run")
    assert code == 2 and "--nnodes needs --rdzv-endpoint" in err
    code, _, err = dmlbench("run", "--nnodes", "2", "--nodes", "2", "--rdzv-endpoint", "h:1")
    assert code == 2 and "not both" in err
    code, _, err = dmlbench(
        "run", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", "--network", "1gbit"
    )
    assert code == 2 and "drop --network" in err
    code, out, _ = dmlbench("run", "--nodes", "2", "--nproc-per-node", "3", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["spec"]["workers"] == 6


def test_a_rendezvous_id_names_one_folder_in_the_store(dmlbench, tmp_path: Path) -> None:
    """``--rdzv-id`` becomes the run's folder on every node: never a path (issue 40)."""
    from dmlbench.results.rundir import create_run_dir

    store = tmp_path / "s"
    for bad in ["../../x", str(tmp_path / "outside"), "..", ".hidden", "a/b", "x\ny"]:
        code, _, err = dmlbench(
            "run",
            "synthetic-mlp",
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            "127.0.0.1:1",
            "--rdzv-id",
            bad,
            "--store",
            str(store),
        )
        assert code == 2 and "--rdzv-id" in err and "becomes a folder name" in err, err
        with pytest.raises(Exception, match="becomes a folder name"):
            create_run_dir(store / "runs", {}, bad)
    assert not (tmp_path / "outside").exists() and not (tmp_path / "x").exists()
    assert create_run_dir(store / "runs", {}, "slurm-41.3")[0] == "slurm-41.3"


def test_the_lost_node_is_named_from_the_peer_gloo_names() -> None:
    from dmlbench.launch.lifecycle import name_lost_node

    error = "worker rank 0 failed: [pair.cc:553] Connection closed by peer [10.0.0.2]:16608."
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert name_lost_node(error, hosts, "10.0.0.1").startswith("lost node 1 (10.0.0.2): worker")
    assert name_lost_node(error, ["127.0.0.1", "127.0.0.1"], "127.0.0.1") == error  # ambiguous


def test_simulate_layouts_pair_by_position_and_name_their_option() -> None:
    from dmlbench.errors import DmlbenchError
    from dmlbench.launch.request import layouts as _layouts

    assert _layouts("1,2", "2,2") == [(1, 2), (2, 2)]  # a repeated count is a layout too
    assert _layouts("1,2,4", "4") == [(1, 4), (2, 4), (4, 4)]
    with pytest.raises(DmlbenchError, match=r"^--nodes '0,2': node counts must be at least 1"):
        _layouts("0,2", "2")


@pytest.mark.parametrize(
    ("ranks", "says"), [((1,), "ran rank 1 (finished)"), ((2, 3), "ran ranks 2-3")]
)
def test_a_node_without_rank_0_says_which_ranks_it_ran(
    ranks: tuple[int, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node of one worker said "this node ran ranks 1-1"."""
    from dmlbench.cli.run import _node_outcome
    from dmlbench.launch.lifecycle import RunOutcome
    from dmlbench.results.records import RunSummary

    outcome = RunOutcome("w1", "finished", RunSummary(), [], None, "runs/w1", False, ranks)
    _node_outcome(outcome, json_out=False)
    assert says in " ".join(capsys.readouterr().out.split())
