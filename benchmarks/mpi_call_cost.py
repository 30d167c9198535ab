"""Open MPI's cost per collective call and per message, for an 8 kB all-reduce over TCP,
measured on their own (issue 54, items 3 and 6: mlbench task 2a's replay).

mlbench's task 2a all-reduces an 8,004-byte model (epsilon's 2,000 features and a bias)
with Open MPI over TCP after every local step. Its replay in
``dmlbench.perfmodel.replays`` charges each message step a software cost and a one-way
latency; what a call costs beyond its message steps, and the host work of mlbench's
aggregation around it, it did not charge. This measures both, on this machine, apart
from mlbench's figure, with two processes on loopback (no wire, so only software):

- **one message**: half a ping-pong's round trip (MPI_Send, MPI_Recv);
- **one exchange**: MPI_Sendrecv between the two, the step a recursive doubling round
  takes;
- **one call**: MPI_Allreduce (MPI_SUM) at 2 processes, which is one such exchange
  plus the call's own work (algorithm selection, the reduction, the request);
- **the host work** of mlbench's weight aggregation around the call, in torch on one
  thread: pack the parameters into one flat tensor, divide by the world size, unpack it
  into views and give them back to the parameters. It is timed in this process alone,
  as on mlbench's nodes, where no other rank shares the machine (Open MPI's ranks
  spin while they wait).

The per-call cost is ``call - exchange + host work``. Two processes on loopback, TCP
only (``btl tcp,self``), each bound to a core, in a network namespace of their own
where this machine gives one (Open MPI's runtime listens on every interface). Several
launches, since a machine shared with others drifts between regimes over minutes:
each figure is the median over every round of every launch, with the launches' spread.

    python benchmarks/mpi_call_cost.py --out benchmarks/results/mpi_call_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from summary import run_main, write_summary

FEATURES = 2_000  # epsilon's, as in mlbench's task 2a: 8,004 bytes with the bias


def worker(out: Path, rounds: int, calls: int) -> None:
    """One of the two MPI ranks: every measurement, ``rounds`` times ``calls`` calls."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, other = comm.Get_rank(), 1 - comm.Get_rank()
    send = np.ones(FEATURES + 1, dtype=np.float32)
    recv = np.empty_like(send)

    def ping_pong() -> None:
        if rank == 0:
            comm.Send(send, dest=other)
            comm.Recv(recv, source=other)
        else:
            comm.Recv(recv, source=other)
            comm.Send(send, dest=other)

    def exchange() -> None:
        comm.Sendrecv(send, dest=other, recvbuf=recv, source=other)

    def allreduce() -> None:
        comm.Allreduce(send, recv, op=MPI.SUM)

    measured = {"ping_pong": ping_pong, "exchange": exchange, "allreduce": allreduce}
    timings = {name: rounds_of(run, rounds, calls, comm.Barrier) for name, run in measured.items()}
    gathered = comm.gather(timings, root=0)
    if rank == 0:
        out.write_text(json.dumps(gathered))


def rounds_of(
    call: Callable[[], None], rounds: int, calls: int, before: Callable[[], None] = lambda: None
) -> list[float]:
    """Seconds per call, one mean a round, after a warm-up (connections, caches)."""
    for _ in range(calls // 10):
        call()
    means = []
    for _ in range(rounds):
        before()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        means.append((time.perf_counter() - start) / calls)
    return means


def host_work(rounds: int, calls: int) -> list[float]:
    """mlbench's aggregation of a model's weights, all but the all-reduce itself."""
    import torch

    torch.set_num_threads(1)
    params = list(torch.nn.Linear(FEATURES, 1).parameters())
    sizes = [p.numel() for p in params]

    def aggregate() -> None:
        with torch.no_grad():
            packed = torch.cat([p.data.reshape(-1) for p in params])
            packed.div_(2)
            for param, flat in zip(params, packed.split(sizes), strict=True):
                param.data = flat.view_as(param)

    return rounds_of(aggregate, rounds, calls)


def mpirun_command(script: Path, out: Path, rounds: int, calls: int) -> list[str]:
    from dmlbench.comm.mpi_bench import mpirun_path, tcp_mpirun
    from dmlbench.netem.host import NetworkError, private_network_prefix

    mpirun = mpirun_path()
    if mpirun is None:
        raise SystemExit("needs Open MPI's mpirun and mpi4py: pip install 'dmlbench[mpi]'")
    try:
        prefix = private_network_prefix()
    except NetworkError as error:
        print(f"note: {error}; Open MPI listens on this machine's interfaces meanwhile")
        prefix = []
    command = tcp_mpirun(mpirun, 2, "lo", prefix, bind="core", oversubscribe=False)
    worker = ["--worker", str(out), "--rounds", str(rounds), "--calls", str(calls)]
    return [*command, sys.executable, str(script), *worker]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.rounds, args.calls)
        return
    launches: list[dict[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as folder:
        for launch in range(args.launches):
            raw = Path(folder) / f"timings-{launch}.json"
            command = mpirun_command(Path(__file__).resolve(), raw, args.rounds, args.calls)
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0 or not raw.is_file():
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise SystemExit("mpirun failed: " + " / ".join(tail))
            ranks = json.loads(raw.read_text())
            # a round of a collective lasts as long as its slower rank
            launch_rounds = {
                name: [max(rank[name][i] for rank in ranks) for i in range(args.rounds)]
                for name in ranks[0]
            }
            launch_rounds["host_work"] = host_work(args.rounds, args.calls)
            launches.append(launch_rounds)
    names = list(launches[0])
    medians = {name: statistics.median(t for got in launches for t in got[name]) for name in names}
    spread = {name: [statistics.median(got[name]) for got in launches] for name in names}
    message = medians["ping_pong"] / 2
    call = medians["allreduce"] - medians["exchange"]
    per_call = call + medians["host_work"]

    def line(what: str, name: str, halve: bool = False) -> str:
        k = 0.5 if halve else 1.0
        low, high = min(spread[name]) * k, max(spread[name]) * k
        return (
            f"  {what:<34} {medians[name] * k * 1e6:6.1f} µs "
            f"(launches {low * 1e6:.1f}–{high * 1e6:.1f})"
        )

    print(
        f"{FEATURES + 1:,} float32s, 2 processes on loopback TCP; median of "
        f"{args.launches} launches × {args.rounds} rounds × {args.calls:,} calls"
    )
    print(line("one message (half a ping-pong)", "ping_pong", halve=True))
    print(line("one exchange (MPI_Sendrecv)", "exchange"))
    print(line("one all-reduce (MPI_Allreduce)", "allreduce"))
    print(line("mlbench's host work around it", "host_work"))
    print(f"  per call: all-reduce − exchange + host work = {per_call * 1e6:.1f} µs")
    if args.out:
        write_summary(
            args.out,
            {
                "bytes": 4 * (FEATURES + 1),
                "launches": args.launches,
                "rounds": args.rounds,
                "calls_per_round": args.calls,
                "median_s": medians,
                "launch_medians_s": spread,
                "message_s": message,
                "call_beyond_exchange_s": call,
                "per_call_s": per_call,
            },
        )


if __name__ == "__main__":
    run_main(main)
