"""Compact copies of MLPerf Training result logs: the MLLOG lines dmlbench's scoring
reads (``dmlbench.results.mlperf.KEYS_USED``, rank 0's only), each file headed by where
it comes from. Whole logs are 0.1 to 30 MB of launcher output; the copies are a few KB.

    python benchmarks/mlperf_compact.py CHECKOUT COMMIT [SYSTEM ...]

CHECKOUT is a ``training_results_vX.Y`` folder (a clone, or ``git archive`` of one);
COMMIT the commit it was taken at. Writes ``benchmarks/data/mlperf/<repository>/...``
in the repository's own layout, so ``dmlbench results --import-mlperf`` reads the copies
as it reads the originals.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from dmlbench.results.mlperf import KEYS_USED, MLLOG, RANK_PREFIX, ROUND_NAME, result_files

OUT = Path(__file__).parent / "data" / "mlperf"
SINGLE = {"init_start", "init_stop", "run_start", "run_stop", "seed", "global_batch_size"}


def compact(result: Path, checkout: Path, commit: str) -> str:
    relative = result.relative_to(checkout).as_posix()
    found = ROUND_NAME.search(checkout.name)
    assert found, f"{checkout.name}: not a training_results_vX.Y folder"
    lines = [
        "# dmlbench compact copy: the MLLOG lines dmlbench reads, nothing else",
        f"# repository: mlcommons/{checkout.name}",
        f"# round: {found.group(1)}",
        f"# commit: {commit}",
        f"# path: {relative}",
        f"# source: https://github.com/mlcommons/{checkout.name}/blob/{commit}/{relative}",
    ]
    seen: set[str] = set()
    for line in result.read_text(errors="replace").splitlines():
        at = line.find(MLLOG)
        ranked = RANK_PREFIX.match(line)
        if at < 0 or (ranked and ranked.group(1) != "0"):
            continue
        try:
            key = json.loads(line[at + len(MLLOG) :])["key"]
        except (ValueError, KeyError, TypeError):
            continue
        if key not in KEYS_USED or (key in SINGLE and key in seen):
            continue
        seen.add(key)
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def main(checkout: Path, commit: str, systems: list[str]) -> None:
    assert re.fullmatch(r"[0-9a-f]{40}", commit), "COMMIT: 40 hex digits"
    for result in result_files(checkout):
        system = result.parts[-3]
        if systems and system not in systems:
            continue
        target = OUT / checkout.name / result.relative_to(checkout)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(compact(result, checkout, commit))
        description = result.parents[3] / "systems" / f"{system}.json"
        copy = OUT / checkout.name / description.relative_to(checkout)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(description.read_text())
    print(f"wrote {OUT / checkout.name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).absolute(), sys.argv[2], sys.argv[3:])
