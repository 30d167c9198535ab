"""dmlbench's MLPerf scoring held against mlperf-logging's own result summarizer.

For every system and benchmark of a submission's results folder, the olympic mean (in
minutes) that mlperf-logging's summarizer computes from the full logs (its compliance
checker included), beside dmlbench's from the compact copies the repository keeps:

    python benchmarks/mlperf_score_check.py CHECKOUT/NVIDIA/results [--json OUT]

CHECKOUT is a ``training_results_v0.7`` checkout (the full logs are not kept here).
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

from mlperf_logging.result_summarizer import result_summarizer
from summary import run_main, write_summary

from dmlbench.results.mlperf import olympic_score, read_result, result_files

KEPT = Path(__file__).parent / "data" / "mlperf" / "training_results_v0.7"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a submission's results/ folder")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for system in sorted(p for p in args.results.iterdir() if p.is_dir()):
        for folder in sorted(p for p in system.iterdir() if p.is_dir()):
            kept = KEPT / folder.relative_to(args.results.parents[1])
            if not kept.is_dir():
                continue
            with contextlib.redirect_stdout(io.StringIO()):  # its checker's chatter
                scored = result_summarizer._compute_strong_score_standalone(
                    folder.name, system.name, False, str(folder), "training", "0.7.0"
                )
            theirs = scored[0] if isinstance(scored, tuple) else scored
            mine = olympic_score([read_result(p) for p in result_files(kept)]) / 60
            rows.append(
                {
                    "system": system.name,
                    "benchmark": folder.name,
                    "mlperf_logging": theirs,
                    "dmlbench": mine,
                }
            )
            print(f"{system.name:32} {folder.name:7} {theirs:10.4f} {mine:10.4f}")
    worst = max(abs(r["dmlbench"] - r["mlperf_logging"]) for r in rows)
    print(f"{len(rows)} submissions; largest difference {worst * 60:.3f} s")
    if args.json:
        write_summary(args.json, {"rows": rows})


if __name__ == "__main__":
    run_main(main)
