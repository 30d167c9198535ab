"""ResNet-50's training step: dmlbench against a plain PyTorch loop, side by side.

    python benchmarks/imagenet_step.py                   # 3 rounds, batch 32, 1 worker
    python benchmarks/imagenet_step.py --rounds 5 --steps 10 --model-depth 101
    python benchmarks/imagenet_step.py --rounds 6 --against plain-jemalloc  # one ratio

Each round runs, in rotating order, one fresh process per contender:

- ``plain``: a loop written here with no dmlbench import at all: its own ResNet-50
  (torchvision's layout), SGD with momentum 0.9 and weight decay 1e-4, one random batch
  of 224² images made once, forward, cross-entropy, backward, step; ``torch`` threads
  as many as dmlbench gives its worker. Timed with ``perf_counter`` after warm-up steps.
- ``plain-channels-last``: the same loop with the model and batch in channels-last
  memory layout (a line an expert adds; dmlbench's default for convolutional models).
- ``plain-jemalloc``: the channels-last loop with jemalloc preloaded and told to keep
  what it frees (``expert.py``: the next thing an expert adds; issue 57).
- ``dmlbench``: ``imagenet-resnet50`` with ``synthetic_data=true`` (DLBS's throughput
  mode) through ``run_benchmark``, its fast defaults on (channels-last, jemalloc);
  the step time is the steady phases' sum over the steady steps.

Reported: mean ms per step of each round and overall, the ratios dmlbench / plain
(≤ 1.0 is the goal, ≤ 0.9 the aim), / plain-channels-last and / plain-jemalloc (≤ 1.0),
dmlbench's page faults a step and its utilisation of the GEMM probe's peak. Results go
to ``benchmarks/results/imagenet_step.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from expert import jemalloc_env, last_json, plain_result
from summary import run_main, write_summary

HERE = Path(__file__).parent

PLAIN = r"""
import ctypes, json, sys, time
import torch
from torch import nn
import torch.nn.functional as F

class Bottleneck(nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.down = None
        if stride != 1 or inplanes != planes * 4:
            self.down = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))

def resnet(blocks, classes=1000):
    layers, inplanes = [], 64
    for i, (planes, count) in enumerate(zip((64, 128, 256, 512), blocks)):
        for j in range(count):
            layers.append(Bottleneck(inplanes, planes, 2 if (i > 0 and j == 0) else 1))
            inplanes = planes * 4
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(inplanes, classes),
    )

threads, batch, warmup, steps = (int(a) for a in sys.argv[1:5])
blocks, channels_last = json.loads(sys.argv[5]), sys.argv[6] == "1"
device, precision = sys.argv[7], sys.argv[8]
torch.set_num_threads(threads)
torch.manual_seed(0)
model = resnet(blocks).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, 224, 224, device=device)
if channels_last:
    model = model.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device=device)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
if precision == "tf32":
    torch.set_float32_matmul_precision("high")
bf16 = precision == "bf16"
times = []
for step in range(warmup + steps):
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    sync()
    if step >= warmup:
        times.append(time.perf_counter() - start)
on_jemalloc = hasattr(ctypes.CDLL(None), "mallctl")  # preloaded: its symbols are global
print(json.dumps({"step_s": sum(times) / len(times), "jemalloc": on_jemalloc}))
"""

DMLBENCH = r"""
import json, sys
from pathlib import Path

def main():
    from dmlbench.launch import run_benchmark
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore

    store_dir, batch, warmup, steps, depth = sys.argv[1], *(int(a) for a in sys.argv[2:6])
    overrides = [
        "synthetic_data=true", f"recipe.local_batch={batch}", f"max_steps={warmup + steps}",
        f"warmup_steps_excluded={warmup}", f"recipe.model.options.depth={depth}",
        f"recipe.precision={sys.argv[6]}", f"device={sys.argv[7]}",
    ]
    spec = resolve_spec("imagenet-resnet50", workers=1, overrides=overrides)
    store = ResultsStore(Path(store_dir))
    outcome = run_benchmark(spec, store, echo=False)
    row = store.runs(outcome.run_id)[0]
    summary = row.summary
    steady = summary.phases_steady[0]
    step_s = sum(v for k, v in steady.items() if k != "eval") / summary.steady_steps
    print(json.dumps({
        "status": outcome.status, "step_s": step_s,
        "flops_per_step": summary.flops_per_step, "peak": summary.peak_flops_per_s,
        "peak_source": summary.peak_source, "threads": summary.threads_per_worker,
        "channels_last": summary.channels_last, "disturbed": row.disturbed,
        "page_faults_per_step": max(summary.page_faults_per_step or [0]),
        "cpu_allocator": summary.cpu_allocator,
    }))

if __name__ == "__main__":
    run_main(main)
"""

CONTENDERS = ["dmlbench", "plain", "plain-channels-last", "plain-jemalloc"]
BLOCKS = {18: None, 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def run_plain(
    threads: int,
    batch: int,
    warmup: int,
    steps: int,
    depth: int,
    channels_last: bool,
    env: dict[str, str] | None = None,
    device: str = "cpu",
    precision: str = "fp32",
) -> dict:
    blocks = BLOCKS[depth]
    if blocks is None:
        raise SystemExit("the plain loop has bottleneck ResNets only: --model-depth 50, 101, 152")
    args = [str(threads), str(batch), str(warmup), str(steps), json.dumps(blocks)]
    args += ["1" if channels_last else "0", device, precision]
    out = subprocess.run(
        [sys.executable, "-c", PLAIN, *args], capture_output=True, text=True, check=True, env=env
    )
    return plain_result(out.stdout, env)


def run_dmlbench(
    store: Path,
    batch: int,
    warmup: int,
    steps: int,
    depth: int,
    device: str = "cpu",
    precision: str = "fp32",
) -> dict:
    args = [str(store), str(batch), str(warmup), str(steps), str(depth), precision, device]
    out = subprocess.run(
        [sys.executable, "-c", DMLBENCH, *args], capture_output=True, text=True, check=True
    )
    return last_json(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--model-depth", type=int, default=50, choices=[50, 101, 152])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "imagenet_step.json")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    parser.add_argument(
        "--against",
        nargs="+",
        choices=CONTENDERS[1:],
        default=CONTENDERS[1:],
        help="the plain loops dmlbench is compared with (default: all)",
    )
    args = parser.parse_args()
    contenders = ["dmlbench", *args.against]
    rows: list[dict] = []
    threads = None
    jemalloc = jemalloc_env() if "plain-jemalloc" in contenders else None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            turn = r % len(contenders)
            for who in contenders[turn:] + contenders[:turn]:  # rotating order
                if who == "dmlbench":
                    got = run_dmlbench(
                        Path(tmp) / "store",
                        args.batch,
                        args.warmup,
                        args.steps,
                        args.model_depth,
                        args.device,
                        args.precision,
                    )
                    threads = got["threads"]
                else:
                    got = run_plain(
                        threads or torch.get_num_threads(),
                        args.batch,
                        args.warmup,
                        args.steps,
                        args.model_depth,
                        channels_last=who != "plain",
                        env=jemalloc if who == "plain-jemalloc" else None,
                        device=args.device,
                        precision=args.precision,
                    )
                rows.append({"round": r, "who": who, **got})
                print(f"round {r} {who:20s} {got['step_s'] * 1000:8.0f} ms per step", flush=True)
    means = {
        who: statistics.mean(row["step_s"] for row in rows if row["who"] == who)
        for who in contenders
    }
    ratios = {who: means["dmlbench"] / means[who] for who in args.against}
    last = next(row for row in reversed(rows) if row["who"] == "dmlbench")
    utilisation = last["flops_per_step"] / means["dmlbench"] / last["peak"]
    print(
        f"ResNet-{args.model_depth}, batch {args.batch}, ms per step: "
        + ", ".join(f"{who} {t * 1000:.0f}" for who, t in means.items())
        + "; dmlbench / "
        + ", / ".join(f"{who} {ratio:.3f}" for who, ratio in ratios.items())
        + f"; utilisation {utilisation:.1%} of {last['peak'] / 1e9:.0f} GFLOP/s "
        f"({last['peak_source']})"
    )
    result = {
        "model": f"ResNet-{args.model_depth}",
        "batch": args.batch,
        "device": args.device,
        "precision": args.precision,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "rounds": rows,
        "ms_per_step": {who: t * 1000 for who, t in means.items()},
        "ratio": ratios.get("plain"),
        "ratio_to_channels_last": ratios.get("plain-channels-last"),
        "ratio_to_jemalloc": ratios.get("plain-jemalloc"),
        "page_faults_per_step": last["page_faults_per_step"],
        "cpu_allocator": last["cpu_allocator"],
        "utilisation": utilisation,
    }
    write_summary(args.out, result)


if __name__ == "__main__":
    run_main(main)
