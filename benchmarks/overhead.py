"""dmlbench's step time against a minimal hand-written DDP loop, side by side.

    python benchmarks/overhead.py                  # ResNet-20, local batch 32, 1 and 2 workers
    python benchmarks/overhead.py --workers 1 2 --steps 30 --rounds 10

The loops run in the same worker processes on the same in-memory CIFAR-shaped data,
model and batch, interleaved round by round in rotating order (A B C, B C A, ...) so
machine noise hits them alike; the first steps of every block are run untimed.
Reported: median ms per step over all timed steps, and the ratio to the hand-written
loop (≤ 1.05 is the goal).

- ``minimal-ddp``: DDP-wrapped ResNet, SGD, gather a random batch, cast, normalise.
- ``dmlbench-ddp``: dmlbench's Trainer.train_step with exchange=ddp (includes the
  recipe's random crop + flip augmentation, which the minimal loop does not do).
- ``dmlbench-allreduce``: the reference form (one flat all-reduce after backward).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from summary import run_main
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from torch.nn.parallel import DistributedDataParallel

from dmlbench.comm.sync import DDP_NO_BUFFER_SYNC
from dmlbench.data import Dataset, Preprocess
from dmlbench.data.augment import ChannelNormalize
from dmlbench.data.cifar10 import MEAN, STD
from dmlbench.models.resnet import CifarResNet
from dmlbench.resolve import resolve_spec
from dmlbench.results.environment import collect_environment
from dmlbench.tasks import get_task
from dmlbench.train.context import DistContext
from dmlbench.train.trainer import Trainer

EXAMPLES = 4096


def synthetic_cifar(seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (EXAMPLES, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 10, (EXAMPLES,), generator=g)
    norm = ChannelNormalize(MEAN, STD)
    return Dataset(x, y, x[:512], y[:512], 10, Preprocess(norm, 4, True), Preprocess(norm))


class MinimalDDP:
    """What a person writes by hand: the baseline."""

    def __init__(self, data: Dataset, local_batch: int, seed: int) -> None:
        torch.manual_seed(seed)
        self.model = DistributedDataParallel(CifarResNet(20), **DDP_NO_BUFFER_SYNC)
        self.opt = torch.optim.SGD(
            self.model.parameters(), lr=0.0125, momentum=0.9, nesterov=True, weight_decay=1e-4
        )
        if not isinstance(data.train_x, torch.Tensor):
            raise TypeError("the baseline trains on images held as one tensor")
        self.images, self.labels, self.b = data.train_x, data.train_y, local_batch
        self.mean = torch.tensor(MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(STD).view(1, 3, 1, 1)
        self.g = torch.Generator().manual_seed(seed + dist.get_rank())

    def step(self) -> None:
        idx = torch.randint(0, EXAMPLES, (self.b,), generator=self.g)
        x = (self.images[idx].float() / 255 - self.mean) / self.std
        y = self.labels[idx]
        self.opt.zero_grad()
        F.cross_entropy(self.model(x), y).backward()
        self.opt.step()


class DmlbenchLoop:
    def __init__(self, data: Dataset, exchange: str, workers: int) -> None:
        spec = resolve_spec("cifar10-resnet20", workers=workers, exchange=exchange)
        rank = dist.get_rank()
        ctx = DistContext(rank, workers, rank, torch.device("cpu"), "gloo")
        self.trainer = Trainer(spec, get_task(spec.task), data, ctx)
        self.rows: Iterator[torch.Tensor] = iter(())
        self.epoch = 0

    def step(self) -> None:
        row = next(self.rows, None)
        if row is None:
            self.rows = iter(self.trainer.sharding.indices(self.epoch))
            self.epoch += 1
            row = next(self.rows)
        self.trainer.train_step(row)


def worker(workers: int, steps: int, warm: int, rounds: int, out_path: str) -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workers))
    data = synthetic_cifar()
    loops: dict[str, MinimalDDP | DmlbenchLoop] = {
        "minimal-ddp": MinimalDDP(data, 32, seed=0),
        "dmlbench-ddp": DmlbenchLoop(data, "ddp", workers),
    }
    loops["dmlbench-allreduce"] = allreduce = DmlbenchLoop(data, "allreduce", workers)
    times: dict[str, list[float]] = {name: [] for name in loops}
    names = list(loops)
    for round_index in range(rounds):
        shift = round_index % len(names)  # rotate the order: no loop always goes first
        for name in names[shift:] + names[:shift]:
            loop = loops[name]
            for _ in range(warm):
                loop.step()
            dist.barrier()
            for _ in range(steps):
                start = time.perf_counter()
                loop.step()
                times[name].append(time.perf_counter() - start)
    trainer = allreduce.trainer
    phases = trainer.timer.seconds
    step_total = sum(phases[p] for p in ("data", "forward", "backward", "comm", "optimizer"))
    data_share = phases["data"] / step_total
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps({"times": times, "data_share": data_share}))
    dist.destroy_process_group()


def launch(workers: int, steps: int, warm: int, rounds: int) -> dict:
    out = Path(tempfile.mkdtemp()) / "result.json"
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=workers,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        local_addr="127.0.0.1",
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=tempfile.mkdtemp(), tee=Std.ALL),
    )
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    elastic_launch(config, worker)(workers, steps, warm, rounds, str(out))
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per block")
    parser.add_argument("--warm", type=int, default=5, help="untimed steps before each block")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    args = parser.parse_args()
    env = collect_environment()
    print(
        f"# {env['cpu_model']}, {env['cores']} cores, torch {env['torch']}, "
        f"python {env['python']}, dmlbench {env['git_revision']}"
    )
    print(f"# command: python benchmarks/overhead.py {' '.join(sys.argv[1:])}".rstrip())
    print("| workers | loop | ms/step (median of all steps) | p25–p75 | ratio to minimal-ddp |")
    print("|---|---|---|---|---|")
    for workers in args.workers:
        result = launch(workers, args.steps, args.warm, args.rounds)
        base = statistics.median(result["times"]["minimal-ddp"])
        for name, samples in result["times"].items():
            median = statistics.median(samples)
            p25, _, p75 = statistics.quantiles(samples, n=4)
            print(
                f"| {workers} | {name} | {1000 * median:.1f} | "
                f"{1000 * p25:.1f}–{1000 * p75:.1f} | {median / base:.3f} |"
            )
        print(
            f"| {workers} | data share of dmlbench step | {100 * result['data_share']:.1f}% | | |"
        )


if __name__ == "__main__":
    run_main(main)
