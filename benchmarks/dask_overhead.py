"""Per-update overhead on Dask: dmlbench's centralised engine against adadamp's per-step
pattern, and the DDP engine's time per update against both, on one LocalCluster.

    python benchmarks/dask_overhead.py                     # MLP and ResNet-20, 2 workers
    python benchmarks/dask_overhead.py --models mlp --rounds 5 --updates 40

Every update is a batch of ``--batch`` examples split into ``batch / grads_per_worker``
gradient tasks (2 by default, one per worker). Per update we record the driver's wall
clock and the slowest task's own compute (gathering its examples, forward, backward),
both engines timing the same region; **overhead = wall − compute** (the cost of getting
work to the workers and results back). Rounds alternate the three loops in rotating
order so machine noise hits them alike; each block's first epoch is untimed.

- ``dmlbench``: ``DaskClassifier(engine="centralised")``: data scattered once, one flat
  float32 weight vector per update inside the task messages, flat gradient sums back.
- ``adadamp``: a faithful re-implementation of adadamp's per-step pattern (its
  ``BaseDamper.train_step`` and ``_dist.gradient``): every step the model *and* the
  optimizer are deep-copied and scattered (broadcast) to the workers; each task gathers
  its examples one by one from the dataset, computes a summed loss, and returns a dict
  of named gradient tensors that the driver sums name by name before stepping. The
  data is scattered once (adadamp loads it on each worker), so the only difference is
  the per-step pattern.
- ``ddp``: ``DaskClassifier(engine="ddp")``: one task per rank per epoch; its per-update
  time is the epoch's driver wall clock over its updates.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import time
from typing import Any

import numpy as np
import torch
from distributed import Client, LocalCluster
from summary import run_main, write_summary

from dmlbench.dask import DaskClassifier
from dmlbench.models.mlp import MLP
from dmlbench.models.resnet import CifarResNet

MODELS: dict[str, dict[str, Any]] = {
    "mlp": {
        "module": MLP,
        "shape": (64,),
        "args": {"module__in_features": 64, "module__hidden": [128], "module__num_outputs": 10},
    },
    "resnet20": {
        "module": CifarResNet,
        "shape": (3, 32, 32),
        "args": {"module__depth": 20, "module__num_classes": 10},
    },
}


# ---------------------------------------------------------------- adadamp's pattern


def adadamp_gradient(train_set: Any, *, model: torch.nn.Module, loss: Any, idx: np.ndarray) -> dict:
    """adadamp's ``_dist.gradient``: examples fetched one by one, summed loss, a dict of
    named gradients back."""
    start = time.perf_counter()
    data_target = [train_set[i] for i in idx]
    inputs = torch.cat([d[0].reshape(-1, *d[0].size()) for d in data_target])
    targets = torch.tensor([int(d[1]) for d in data_target])
    model.zero_grad()
    outputs = model(inputs)
    total = loss(outputs, targets, reduction="sum")
    total.backward()
    grads = {k: v.grad for k, v in model.named_parameters()}
    compute = time.perf_counter() - start
    return {"_num_data": len(outputs), "_loss": total.item(), "_compute_s": compute, **grads}


def adadamp_loop(
    client: Client,
    model: torch.nn.Module,
    data_future: Any,
    n: int,
    batch: int,
    grads_per_worker: int,
    updates: int,
    rng: np.random.Generator,
) -> list[dict]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.nn.functional.cross_entropy
    records = []
    for _ in range(updates):
        begin = time.perf_counter()
        optimizer.zero_grad()
        model_future = client.scatter(copy.deepcopy(model), broadcast=True)
        optimizer_future = client.scatter(copy.deepcopy(optimizer), broadcast=True)
        idx = rng.choice(n, batch, replace=False)
        chunks = np.array_split(idx, max(1, batch // grads_per_worker))
        futures = [
            client.submit(
                adadamp_gradient, data_future, model=model_future, loss=loss, idx=chunk, pure=False
            )
            for chunk in chunks
        ]
        grads = client.gather(futures)
        num_data = sum(g["_num_data"] for g in grads)
        for name, param in model.named_parameters():
            param.grad = sum(g[name] for g in grads) / num_data
        optimizer.step()
        del model_future, optimizer_future
        records.append(
            {
                "wall_s": time.perf_counter() - begin,
                "compute_s": max(g["_compute_s"] for g in grads),
            }
        )
    return records


# ---------------------------------------------------------------- dmlbench's engines


def engine_loop(
    client: Client,
    name: str,
    model: dict,
    x: np.ndarray,
    y: np.ndarray,
    batch: int,
    grads_per_worker: int,
    workers: int,
) -> tuple[list[dict], float]:
    """Two epochs of ``partial_fit``; the second is timed. Returns its update records and
    the driver's wall clock per update."""
    est = DaskClassifier(
        model["module"],
        **model["args"],
        optimizer__lr=0.01,
        batch_size=batch,
        grads_per_worker=grads_per_worker,
        min_workers=workers,
        max_workers=workers,
        engine=name,
        client=client,
        random_state=0,
    )
    est.partial_fit(x, y)
    start = time.perf_counter()
    est.partial_fit(x, y)
    wall = time.perf_counter() - start
    updates = est.history_[-1]["updates"]
    est._close_engine()
    return updates, wall / len(updates)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def run_model(client: Client, model_name: str, args: argparse.Namespace) -> dict[str, Any]:
    model = MODELS[model_name]
    n = args.batch * args.updates
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, *model["shape"])).astype(np.float32)
    y = rng.integers(0, 10, size=n)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    data_future = client.scatter(dataset, broadcast=True)
    torch.manual_seed(0)
    module = model["module"](**{k.removeprefix("module__"): v for k, v in model["args"].items()})
    parameters = sum(p.numel() for p in module.parameters())
    loops = ["dmlbench", "adadamp", "ddp"]
    found: dict[str, dict[str, list[float]]] = {
        k: {"wall": [], "compute": [], "per_update": []} for k in loops
    }
    for round_ in range(args.rounds):
        for name in loops[round_ % 3 :] + loops[: round_ % 3]:
            if name == "adadamp":
                adadamp_loop(
                    client, module, data_future, n, args.batch, args.grads_per_worker, 3, rng
                )  # untimed warm-up
                records = adadamp_loop(
                    client,
                    module,
                    data_future,
                    n,
                    args.batch,
                    args.grads_per_worker,
                    args.updates,
                    rng,
                )
                per_update = [r["wall_s"] for r in records]
            else:
                engine = "centralised" if name == "dmlbench" else "ddp"
                records, each = engine_loop(
                    client, engine, model, x, y, args.batch, args.grads_per_worker, args.workers
                )
                per_update = [each] * len(records)
            found[name]["wall"] += [r["wall_s"] for r in records]
            found[name]["compute"] += [r["compute_s"] for r in records]
            found[name]["per_update"] += per_update
        print(f"  {model_name}: round {round_ + 1}/{args.rounds} done", flush=True)
    result: dict[str, Any] = {"model": model_name, "parameters": parameters}
    for name in loops:
        walls, computes = found[name]["wall"], found[name]["compute"]
        result[name] = {
            "update_ms": median_ms(found[name]["per_update"]),
            "compute_ms": median_ms(computes),
            "overhead_ms": median_ms([w - c for w, c in zip(walls, computes, strict=True)]),
        }
    result["overhead_ratio"] = result["adadamp"]["overhead_ms"] / result["dmlbench"]["overhead_ms"]
    data_future.release()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "resnet20"], choices=MODELS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--grads-per-worker", type=int, default=32)
    parser.add_argument("--updates", type=int, default=30, help="timed updates per block")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        env={"OMP_NUM_THREADS": "1"},
    )
    results = []
    with cluster, Client(cluster, set_as_default=False) as client:
        for model in args.models:
            results.append(run_model(client, model, args))
    print(
        f"\n{args.workers} workers, batch {args.batch}, {args.batch // args.grads_per_worker} "
        f"gradient tasks per update, {args.rounds} rounds × {args.updates} updates; "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )
    print(f"{'model':10} {'loop':9} {'update ms':>10} {'compute ms':>11} {'overhead ms':>12}")
    for r in results:
        for name in ("dmlbench", "adadamp", "ddp"):
            row = r[name]
            overhead = f"{row['overhead_ms']:12.2f}" if name != "ddp" else f"{'—':>12}"
            print(
                f"{r['model']:10} {name:9} {row['update_ms']:10.2f} {row['compute_ms']:11.2f} "
                f"{overhead}"
            )
        print(
            f"{r['model']:10} adadamp's overhead / dmlbench's: {r['overhead_ratio']:.1f}×; "
            f"DDP's update time / dmlbench's: "
            f"{r['ddp']['update_ms'] / r['dmlbench']['update_ms']:.2f}, / adadamp's: "
            f"{r['ddp']['update_ms'] / r['adadamp']['update_ms']:.2f}"
        )
    if args.json:
        write_summary(args.json, {"models": results})


if __name__ == "__main__":
    run_main(main)
