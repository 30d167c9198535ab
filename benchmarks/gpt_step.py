"""The small GPT's training step: dmlbench against a plain PyTorch loop, side by side.

    python benchmarks/gpt_step.py                    # 3 rounds, kjv-gpt's model and batch
    python benchmarks/gpt_step.py --rounds 5 --steps 20

Each round runs, in rotating order, one fresh process per contender:

- ``plain``: a loop written here with no dmlbench import at all: its own GPT-2-style
  decoder of kjv-gpt's size (vocabulary 4,096, 128 tokens, width 128, 4 blocks, 4
  heads, tied head, causal ``scaled_dot_product_attention``), AdamW (β 0.9, 0.95, weight
  decay 0.1, foreach), gradient clipping at norm 1, one random batch of 16 sequences
  made once; forward, next-token cross-entropy, backward, clip, step. ``torch`` threads
  as many as dmlbench gives its worker; timed with ``perf_counter`` after warm-up steps.
- ``plain-jemalloc``: the same loop with jemalloc preloaded and told to keep what it
  frees (``expert.py``; issue 57).
- ``dmlbench``: ``kjv-gpt`` with ``synthetic_data=true`` (one random batch of token
  ids, no evaluation) through ``run_benchmark``, its defaults on; the step time is the
  steady phases' sum over the steady steps.

Reported: mean ms per step of each and the ratios dmlbench / plain and / plain-jemalloc
(goal ≤ 1.0 each), tokens/s,
and the model FLOPs utilisation: torchtitan's count (6 × parameters + attention, per
token) × tokens/s against the GEMM probe's peak. Results go to
``benchmarks/results/gpt_step.json``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from expert import jemalloc_env, plain_result
from summary import run_main, write_summary

HERE = Path(__file__).parent

PLAIN = r"""
import ctypes, json, math, sys, time
import torch
from torch import nn
import torch.nn.functional as F

VOCAB, CONTEXT, WIDTH, DEPTH, HEADS = 4096, 128, 128, 4, 4

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(w, dim=2)
        q, k, v = (z.view(b, t, HEADS, w // HEADS).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, w))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.ln = nn.LayerNorm(WIDTH)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.wte.weight.t()

def main():
    threads, batch, warmup, steps = (int(a) for a in sys.argv[1:5])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Model()
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.95), foreach=True,
    )
    ids = torch.randint(0, VOCAB, (batch, CONTEXT + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    on_jemalloc = hasattr(ctypes.CDLL(None), "mallctl")  # preloaded: its symbols are global
    print(json.dumps({"step_s": sum(times) / len(times), "jemalloc": on_jemalloc}))

if __name__ == "__main__":
    run_main(main)
"""

DMLBENCH = r"""
import json, sys
from pathlib import Path

def main():
    from dmlbench.launch import run_benchmark
    from dmlbench.resolve import resolve_spec
    from dmlbench.results import ResultsStore

    store_dir, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    overrides = [
        "synthetic_data=true", f"max_steps={warmup + steps}", f"warmup_steps_excluded={warmup}",
    ]
    spec = resolve_spec("kjv-gpt", workers=1, overrides=overrides)
    store = ResultsStore(Path(store_dir))
    outcome = run_benchmark(spec, store, echo=False)
    row = store.runs(outcome.run_id)[0]
    summary = row.summary
    steady = summary.phases_steady[0]
    step_s = sum(v for k, v in steady.items() if k != "eval") / summary.steady_steps
    print(json.dumps({
        "status": outcome.status, "step_s": step_s, "batch": row.local_batch,
        "flops_per_step": summary.flops_per_step, "peak": summary.peak_flops_per_s,
        "peak_source": summary.peak_source, "threads": summary.threads_per_worker,
        "disturbed": row.disturbed, "cpu_allocator": summary.cpu_allocator,
        "page_faults_per_step": max(summary.page_faults_per_step or [0]),
    }))

if __name__ == "__main__":
    run_main(main)
"""

CONTENDERS = ["dmlbench", "plain", "plain-jemalloc"]


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env
    )
    return plain_result(done.stdout, env)


def main() -> None:
    from dmlbench.models.gpt import GPT
    from dmlbench.tasks.language import CONTEXT, VOCAB, kjv_recipe

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gpt_step.json")
    args = parser.parse_args()
    rows: list[dict] = []
    threads, batch, jemalloc = None, kjv_recipe().local_batch, jemalloc_env()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            turn = r % len(CONTENDERS)
            for who in CONTENDERS[turn:] + CONTENDERS[:turn]:  # rotating order
                if who == "dmlbench":
                    got = _run(
                        DMLBENCH, str(Path(tmp) / "store"), str(args.warmup), str(args.steps)
                    )
                    threads = got["threads"]
                else:
                    count = threads or torch.get_num_threads()
                    plain = (str(count), str(batch), str(args.warmup), str(args.steps))
                    env = jemalloc if who == "plain-jemalloc" else None
                    got = _run(PLAIN, *plain, env=env)
                rows.append({"round": r, "who": who, **got})
                print(f"round {r} {who:10s} {got['step_s'] * 1000:8.1f} ms per step", flush=True)
    means = {
        who: statistics.mean(row["step_s"] for row in rows if row["who"] == who)
        for who in CONTENDERS
    }
    ratio = means["dmlbench"] / means["plain"]
    ratio_je = means["dmlbench"] / means["plain-jemalloc"]
    last = next(row for row in reversed(rows) if row["who"] == "dmlbench")
    model = GPT(VOCAB, CONTEXT, **kjv_recipe().model.options)
    tokens_per_step = batch * CONTEXT
    tokens_per_s = tokens_per_step / means["dmlbench"]
    mfu = model.flops_per_token() * tokens_per_s / last["peak"]
    counted = last["flops_per_step"] / means["dmlbench"] / last["peak"]
    print(
        f"kjv-gpt's model, {batch} × {CONTEXT} tokens, ms per step: "
        + ", ".join(f"{who} {t * 1000:.1f}" for who, t in means.items())
        + f"; dmlbench / plain {ratio:.3f}, / plain-jemalloc {ratio_je:.3f}; "
        f"{tokens_per_s:,.0f} tokens/s; MFU "
        f"{mfu:.1%} (torchtitan's count), {counted:.1%} (torch's flop counter) of "
        f"{last['peak'] / 1e9:.0f} GFLOP/s ({last['peak_source']})"
    )
    result = {
        "model": "GPT, vocabulary 4096, 128 tokens, width 128, 4 blocks, 4 heads",
        "batch": batch,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "rounds": rows,
        "ms_per_step": {who: t * 1000 for who, t in means.items()},
        "ratio": ratio,
        "ratio_to_jemalloc": ratio_je,
        "page_faults_per_step": last["page_faults_per_step"],
        "cpu_allocator": last["cpu_allocator"],
        "tokens_per_s": tokens_per_s,
        "mfu_torchtitan": mfu,
        "utilisation_flop_counter": counted,
    }
    write_summary(args.out, result)


if __name__ == "__main__":
    run_main(main)
