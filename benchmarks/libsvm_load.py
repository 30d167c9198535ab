"""Load time and memory of the LIBSVM reader on epsilon-shaped data.

    python benchmarks/libsvm_load.py --rows 10000            # 10,000 × 2,000 dense rows

The real epsilon cannot be downloaded here, so this writes rows of the same shape and
number format (2,000 dense features per row, ~7 significant digits, labels ±1), then
times the first load (parse + convert to the float32 cache) and the second (memory map),
each in a fresh process so peak memory (max RSS) is that load's alone. It prints the
parse rate and the time the 400,000-row training file would take at that rate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from summary import run_main

EPSILON_TRAIN_ROWS = 400_000


def write_rows(path: Path, rows: int, features: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    index = np.arange(1, features + 1)
    with path.open("w") as out:
        for start in range(0, rows, 1000):
            block = rng.normal(0, features**-0.5, (min(1000, rows - start), features))
            labels = np.where(rng.random(len(block)) < 0.5, -1, 1)
            for label, row in zip(labels, block, strict=True):
                pairs = " ".join(f"{i}:{v:.7g}" for i, v in zip(index, row, strict=True))
                out.write(f"{label} {pairs}\n")


CHILD = """
import json, resource, sys, time
from pathlib import Path
from dmlbench.data.libsvm import load_libsvm
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # after imports
start = time.perf_counter()
x, y = load_libsvm(Path(sys.argv[1]), int(sys.argv[2]))
checksum = float(x[:: max(1, len(x) // 100)].sum())  # touch the data
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": elapsed, "peak_rss_bytes": peak, "baseline": baseline,
                  "rows": len(x)}))
"""


def timed_load(path: Path, features: int, cache: Path) -> dict:
    env = {"DMLBENCH_CACHE": str(cache), "PATH": "", "HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(features)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=2000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    path = work / "epsilon_like"
    started = time.perf_counter()
    write_rows(path, args.rows, args.features)
    size = path.stat().st_size
    print(
        f"# wrote {args.rows:,} × {args.features:,} rows, {size / 1e6:,.0f} MB of text "
        f"in {time.perf_counter() - started:.0f} s"
    )
    print(f"# command: python benchmarks/libsvm_load.py {' '.join(sys.argv[1:])}".rstrip())
    first = timed_load(path, args.features, work / "cache")
    second = timed_load(path, args.features, work / "cache")
    dense = args.rows * args.features * 4
    rate = size / first["seconds"]
    print("| load | seconds | peak RSS | of which after imports | rows |")
    print("|---|---|---|---|---|")
    for name, result in (("first (parse + cache)", first), ("second (memory map)", second)):
        extra = result["peak_rss_bytes"] - result["baseline"]
        print(
            f"| {name} | {result['seconds']:.2f} | {result['peak_rss_bytes'] / 1e6:,.0f} MB "
            f"| {extra / 1e6:,.0f} MB | {result['rows']:,} |"
        )
    print(f"# parse rate {rate / 1e6:.0f} MB/s of text; dense float32 array {dense / 1e6:,.0f} MB")
    full_text = size / args.rows * EPSILON_TRAIN_ROWS
    minutes = full_text / rate / 60
    print(
        f"# at this rate epsilon's 400,000-row training file ({full_text / 1e9:.1f} GB of "
        f"text) parses in about {minutes:.0f} min, once; later loads memory-map it"
    )


if __name__ == "__main__":
    run_main(main)
