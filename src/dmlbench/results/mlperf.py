"""MLPerf Training's published result logs as stored runs: ``results --import-mlperf``.

A submission (``mlcommons/training_results_v0.7`` and later rounds) holds, per system and
benchmark, one log per run, ``<submitter>/results/<system>/<benchmark>/result_N.txt``:
launcher output with MLLOG lines among it (on some systems each line is prefixed with
its rank, ``0: :::MLLOG {...}``), and its system described in
``<submitter>/systems/<system>.json``. Each log becomes one run of the store, marked
external (its ``origin``: round, submitter, division, benchmark, system, the path in the
repository and the commit), with MLPerf's own scoring:

- time to train: ``run_start`` to ``run_stop``, whatever the status (MLPerf's clock);
- status: ``run_stop``'s; ``aborted`` (the epoch budget ran out first) is stored as
  ``target_not_reached``, and counts as infinitely slow in the olympic mean;
- epochs to converge (the last evaluation's ``epoch_num``), or, for the benchmarks that
  count samples (BERT), the samples trained: the ``train_samples`` logged at the end;
- the evaluation curve, and throughput: samples trained over the run's time with its
  evaluations (``eval_start``/``eval_stop``) taken out, where the log times them.

Only rank 0's lines are read. Files are read within a bound (:data:`MAX_LOG_BYTES`),
only regular ones, as JSON (nothing is unpickled); a log that lacks what the scoring
needs, or holds a value of the wrong kind, is refused in one line and nothing of it is
stored. The compact copies ``benchmarks/data/mlperf`` keeps (the lines used, nothing
else) carry their source in ``#`` header lines, which are read as the origin.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlbench.errors import StoreError
from dmlbench.files import read_bounded
from dmlbench.names import shorten
from dmlbench.results.records import Evaluation, RunSummary
from dmlbench.results.store import ResultsStore

MAX_LOG_BYTES = 64 << 20  # the largest v0.7 result file is 30 MB
MAX_SYSTEM_BYTES = 1 << 20  # a system description is 2 KB
MAX_LOGS = 10_000  # result files one import reads
MLLOG = ":::MLLOG "
RANK_PREFIX = re.compile(r"^\s*(\d+):\s*:::MLLOG ")
RESULT_NAME = re.compile(r"result_(\d+)\.txt")
ROUND_NAME = re.compile(r"training_results_(v\d+\.\d+)")

# The quality each benchmark must reach, per round (MLPerf Training rules, "Benchmarks"
# table of each round: https://github.com/mlcommons/training_policies).
TARGETS: dict[tuple[str, str], float] = {
    ("v0.7", "resnet"): 0.759,  # top-1 accuracy
    ("v0.7", "bert"): 0.712,  # masked-LM accuracy
}
# Benchmarks whose logs count progress in samples, not epochs: ``train_samples`` at the
# end is what was trained (BERT in v0.7; ResNet logs the dataset's size at the start).
COUNTS_SAMPLES = {"bert"}

# The MLLOG keys the scoring reads: the compact copies keep these lines and no other.
KEYS_USED = frozenset(
    {
        "submission_benchmark",
        "submission_org",
        "submission_division",
        "submission_status",
        "submission_platform",
        "seed",
        "global_batch_size",
        "opt_gradient_accumulation_steps",
        "train_samples",
        "eval_samples",
        "init_start",
        "init_stop",
        "run_start",
        "run_stop",
        "block_start",
        "block_stop",
        "eval_start",
        "eval_stop",
        "eval_accuracy",
    }
)
STATUSES = {"success": "success", "aborted": "target_not_reached"}


@dataclass(frozen=True)
class MlperfEval:
    epoch: float
    elapsed_s: float
    metric: float


@dataclass(frozen=True)
class MlperfRun:
    """One result log, scored as MLPerf scores it, with its system and origin."""

    run_id: str
    benchmark: str
    status: str  # dmlbench's: success, target_not_reached, failed
    mlperf_status: str
    origin: dict[str, Any]
    system: dict[str, Any]
    nodes: int
    devices_per_node: int
    accelerator: str
    global_batch: int
    gradient_accumulation: int
    seed: int
    time_to_train_s: float
    eval_s: float
    startup_s: float  # run_start to the first block or epoch
    init_s: float | None
    dataset_samples: int | None
    epochs: float | None
    samples: int | None
    throughput: float | None
    target: float | None
    evals: list[MlperfEval] = field(default_factory=list)

    @property
    def workers(self) -> int:
        return self.nodes * self.devices_per_node


def _events(text: str, where: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rank 0's MLLOG events (or the unprefixed ones) and the ``# key: value`` header
    lines of a compact copy."""
    events: list[dict[str, Any]] = []
    header: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# ") and ":" in line and not events:
            key, _, value = line[2:].partition(":")
            header[key.strip()] = value.strip()
            continue
        at = line.find(MLLOG)
        if at < 0:
            continue
        ranked = RANK_PREFIX.match(line)
        if ranked and ranked.group(1) != "0":
            continue
        try:
            event = json.loads(line[at + len(MLLOG) :])
        except (ValueError, RecursionError):
            continue  # a line torn by interleaved output: MLPerf's checker skips it too
        if isinstance(event, dict) and isinstance(event.get("key"), str):
            if not isinstance(event.get("metadata"), dict):
                event["metadata"] = {}
            events.append(event)
    if not events:
        raise StoreError(f"{where} holds no MLLOG line: is it an MLPerf result_N.txt?")
    return events, header


def _number(value: Any, what: str, where: Path, *, whole: bool = False) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise StoreError(f"{where}: {what} is {shorten(repr(value))}, not a number ≥ 0")
    if whole and value != int(value):
        raise StoreError(f"{where}: {what} is {value}, not a whole number")
    return float(value)


def _first(events: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    return next((e for e in events if e["key"] == key), None)


def _time(event: dict[str, Any], where: Path) -> float:
    return _number(event.get("time_ms"), f"{event['key']}'s time_ms", where) / 1000


def _locate(path: Path) -> tuple[Path, str, str, int]:
    """(the submission's folder, system, benchmark, run number) of a result file laid
    out as ``<submitter>/results/<system>/<benchmark>/result_N.txt``."""
    parts = path.parts
    number = RESULT_NAME.fullmatch(path.name)
    if number is None or len(parts) < 5 or parts[-4] != "results":
        raise StoreError(
            f"{path} is not laid out as MLPerf's <submitter>/results/<system>/<benchmark>/"
            "result_N.txt: give a result file, a benchmark's, a system's or a submission's "
            "folder of a training_results repository"
        )
    return path.parents[3], parts[-3], parts[-2], int(number.group(1))


def _system(root: Path, system: str) -> dict[str, Any]:
    where = root / "systems" / f"{system}.json"
    try:
        data = json.loads(read_bounded(where, MAX_SYSTEM_BYTES, "system description", StoreError))
    except ValueError:
        raise StoreError(f"the system description {where} is not JSON") from None
    if not isinstance(data, dict):
        raise StoreError(f"the system description {where} is not a JSON object")
    return data


def _count(system: dict[str, Any], key: str, where: str) -> int:
    value = system.get(key)
    text = str(value).strip() if isinstance(value, str | int) else ""
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise StoreError(f"{where}: {key} is {shorten(repr(value))}, not a count of 1 or more")
    return int(text)


def _commit(repository: Path) -> str | None:
    """The commit a git checkout's HEAD names, read from its files (no git is run)."""
    git = repository / ".git"
    try:
        head = read_bounded(git / "HEAD", 4096, "git HEAD", StoreError).decode().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            loose = git / ref
            if loose.is_file():
                return read_bounded(loose, 4096, "git ref", StoreError).decode().strip()
            packed = read_bounded(git / "packed-refs", 16 << 20, "git refs", StoreError)
            for line in packed.decode().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return sha
            return None
        return head if re.fullmatch(r"[0-9a-f]{40}", head) else None
    except (StoreError, UnicodeDecodeError):
        return None


def read_result(path: Path) -> MlperfRun:
    """One ``result_N.txt`` scored, with its system; one line when it cannot be."""
    path = path.absolute()
    root, system_name, benchmark_dir, number = _locate(path)
    raw = read_bounded(path, MAX_LOG_BYTES, "MLPerf result log", StoreError)
    events, header = _events(raw.decode("utf-8", errors="replace"), path)
    value = {e["key"]: e.get("value") for e in reversed(events)}  # the first of each key
    benchmark = value.get("submission_benchmark") or benchmark_dir
    if not isinstance(benchmark, str) or not re.fullmatch(r"[a-z0-9_]{1,40}", benchmark):
        raise StoreError(f"{path}: submission_benchmark is {shorten(repr(benchmark))}")
    start, stop = _first(events, "run_start"), _first(events, "run_stop")
    if start is None or stop is None:
        missing = "run_start" if start is None else "run_stop"
        raise StoreError(f"{path} has no {missing}: the run's log is incomplete; nothing stored")
    began, ended = _time(start, path), _time(stop, path)
    if ended < began:
        raise StoreError(f"{path}: run_stop comes before run_start")
    system = _system(root, system_name)
    where = f"systems/{system_name}.json"
    nodes = _count(system, "number_of_nodes", where)
    per_node = _count(system, "accelerators_per_node", where)
    global_batch = int(
        _number(value.get("global_batch_size"), "global_batch_size", path, whole=True)
    )
    if global_batch < 1:
        raise StoreError(f"{path}: global_batch_size is 0")
    accumulation = value.get("opt_gradient_accumulation_steps", 1)
    accumulation = int(_number(accumulation, "opt_gradient_accumulation_steps", path, whole=True))
    mlperf_status = stop["metadata"].get("status")
    status = STATUSES.get(mlperf_status, "failed") if isinstance(mlperf_status, str) else "failed"
    evals, eval_s = [], 0.0
    opened: float | None = None
    for event in events:
        key = event["key"]
        if key == "eval_accuracy":
            metric = _number(event.get("value"), "eval_accuracy", path)
            epoch = event["metadata"].get("epoch_num", math.nan)
            epoch = _number(epoch, "epoch_num", path) if epoch == epoch else math.nan
            evals.append(MlperfEval(epoch, _time(event, path) - began, metric))
        elif key == "eval_start":
            opened = _time(event, path)
        elif key == "eval_stop" and opened is not None:
            eval_s += max(0.0, _time(event, path) - opened)
            opened = None
    first_block = next((e for e in events if e["key"] in ("block_start", "epoch_start")), None)
    startup = max(0.0, _time(first_block, path) - began) if first_block else 0.0
    dataset = value.get("train_samples")
    counted = _number(dataset, "train_samples", path, whole=True) if dataset is not None else None
    epochs = evals[-1].epoch if evals and not math.isnan(evals[-1].epoch) else None
    if benchmark in COUNTS_SAMPLES:
        last = next((e for e in reversed(events) if e["key"] == "train_samples"), None)
        samples = int(_number(last.get("value"), "train_samples", path)) if last else None
        dataset_samples, epochs = None, None
    else:
        dataset_samples = int(counted) if counted else None
        samples = int(epochs * dataset_samples) if epochs and dataset_samples else None
    train_s = ended - began - eval_s
    throughput = samples / train_s if samples and train_s > 0 else None
    init = _first(events, "init_start")
    header = _checked_header(header)
    round_name = header.get("round") or _round(path)
    repository = header.get("repository") or (
        f"mlcommons/training_results_{round_name}" if round_name else None
    )
    relative = Path(*path.parts[-5:]).as_posix()
    submitter = value.get("submission_org") or path.parts[-5]
    division = value.get("submission_division") or system.get("division") or "closed"
    origin = {
        "source": "mlperf",
        "round": round_name,
        "submitter": str(submitter),
        "division": str(division),
        "benchmark": benchmark,
        "system": system_name,
        "platform": value.get("submission_platform"),
        "repository": repository,
        "path": header.get("path") or relative,
        "commit": header.get("commit") or _commit(path.parents[4]),
        "read_only": True,
    }
    run_id = "-".join(
        re.sub(r"[^a-z0-9._]+", "_", str(part).lower())
        for part in ("mlperf", round_name or "round", submitter, system_name, benchmark, number)
    )[:128]
    seed = value.get("seed", 0)
    return MlperfRun(
        run_id=run_id,
        benchmark=benchmark,
        status=status,
        mlperf_status=str(mlperf_status),
        origin=origin,
        system=system,
        nodes=nodes,
        devices_per_node=per_node,
        accelerator=str(system.get("accelerator_model_name") or "unknown"),
        global_batch=global_batch,
        gradient_accumulation=accumulation,
        seed=int(seed) if type(seed) is int and 0 <= seed < 2**63 else 0,
        time_to_train_s=ended - began,
        eval_s=eval_s,
        startup_s=startup,
        init_s=max(0.0, began - _time(init, path)) if init else None,
        dataset_samples=dataset_samples,
        epochs=epochs,
        samples=samples,
        throughput=throughput,
        target=TARGETS.get((round_name or "", benchmark)),
        evals=evals,
    )


HEADER_FORMS = {
    "round": re.compile(r"v\d+\.\d+"),
    "commit": re.compile(r"[0-9a-f]{40}"),
    "repository": re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}"),
    "path": re.compile(r"[A-Za-z0-9_./-]{1,1000}"),
}


def _checked_header(header: dict[str, str]) -> dict[str, str]:
    """A compact copy's header fields that have their form; the rest are dropped (they
    come from a file, and become the run's origin and its id)."""
    return {
        key: value
        for key, value in header.items()
        if key in HEADER_FORMS and HEADER_FORMS[key].fullmatch(value) and ".." not in value
    }


def _round(path: Path) -> str | None:
    for part in reversed(path.parts):
        found = ROUND_NAME.search(part)
        if found:
            return found.group(1)
    return None


def result_files(given: Path) -> list[Path]:
    """The result logs in ``given``: a result file itself, or every ``result_N.txt``
    under a benchmark's, a system's, a submission's or a repository's folder."""
    if not given.exists():
        raise StoreError(f"{given} does not exist: give an MLPerf result file or folder")
    if not given.is_dir():  # a file, or what read_result refuses in one line
        return [given]
    found = sorted(p for p in given.rglob("result_*.txt") if RESULT_NAME.fullmatch(p.name))
    found = [p for p in found if len(p.parts) >= 5 and p.parts[-4] == "results"]
    if not found:
        raise StoreError(f"{given} holds no MLPerf result log (results/<system>/<benchmark>/)")
    if len(found) > MAX_LOGS:
        raise StoreError(f"{given} holds {len(found):,} result logs; import at most {MAX_LOGS:,}")
    return found


def olympic_mean(values: Iterable[float]) -> float:
    """MLPerf's olympic mean: drop the single fastest and slowest, average the rest.

    With fewer than 3 values nothing can be dropped, so it is the plain mean. A run that
    did not converge counts as ``inf``: one such run is dropped as the slowest; two or
    more make the result ``inf`` (the point did not converge reliably). NaN (not
    measured) is left out.
    """
    ordered = sorted(float(v) for v in values if v is not None and v == v)
    if not ordered:
        return math.nan
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    return math.inf if any(math.isinf(v) for v in kept) else math.fsum(kept) / len(kept)


def olympic_score(runs: list[MlperfRun]) -> float:
    """MLPerf's score of one submission's runs: drop the fastest and the slowest, average
    the rest; a run that did not converge counts as infinitely slow."""
    return olympic_mean(r.time_to_train_s if r.status == "success" else math.inf for r in runs)


def as_record(run: MlperfRun) -> dict[str, Any]:
    """The store's fields of an external run (see ``ResultsStore.add_external``)."""
    local = run.global_batch // run.workers if run.global_batch >= run.workers else 1
    spec = {
        "task": f"mlperf/{run.benchmark}",
        "workers": run.workers,
        "nodes": run.nodes,
        "nproc_per_node": run.devices_per_node,
        "seed": run.seed,
        "exchange": "external",
        "recipe": {
            "local_batch": local,
            "target": run.target,
            "gradient_accumulation": run.gradient_accumulation,
        },
        # the submission, not the run: its runs are repeats of one experiment to compare
        "external": {
            k: run.origin[k] for k in ("source", "round", "submitter", "division", "system")
        },
    }
    environment = {
        "host": run.origin["system"],
        "cpu_model": run.system.get("host_processor_model_name"),
        "cores": None,
        "gpus": [run.accelerator] * run.devices_per_node,
        "torch": None,
        "git_revision": run.origin.get("commit"),
        "framework": run.system.get("framework"),
        "interconnect": run.system.get("accelerator_interconnect"),
        "networking": run.system.get("host_networking"),
        "platform": run.origin.get("platform") or run.origin["system"],
    }
    best = max((e.metric for e in run.evals), default=None)
    summary = {
        "finished": True,
        "status": run.status,
        "stop_reason": "target_reached" if run.status == "success" else "max_epochs",
        "world_size": run.workers,
        "nodes": run.nodes,
        "nproc_per_node": run.devices_per_node,
        "local_batch": local,
        "global_batch": run.global_batch,
        "target": run.target,
        "train_examples": run.dataset_samples,
        "elapsed_s": run.time_to_train_s,
        "eval_s": run.eval_s,
        "train_s": run.time_to_train_s - run.eval_s,
        "init_s": run.init_s,
        "time_to_accuracy_s": run.time_to_train_s if run.status == "success" else None,
        "best_metric": best,
        "epochs": run.epochs,
        "samples": run.samples,
        "throughput": run.throughput,
        # an update's time, as a run of this machine's reports it: "step ms" in compare
        "step_time_s": run.global_batch / run.throughput if run.throughput else None,
        "samples_per_s_per_worker": run.throughput / run.workers if run.throughput else None,
        "device": run.accelerator,
        "mlperf": {
            "status": run.mlperf_status,
            "time_to_train_s": run.time_to_train_s,
            "epochs_to_converge": run.epochs,
            "samples_to_converge": run.samples,
            "gradient_accumulation": run.gradient_accumulation,
            "startup_s": run.startup_s,
        },
    }
    return {"spec": spec, "environment": environment, "summary": RunSummary.model_validate(summary)}


def evaluations(run: MlperfRun) -> list[Evaluation]:
    """The evaluation curve as the store keeps it: the step and samples where the log
    says them (epochs × the dataset); 0 where it does not (BERT v0.7 logs neither)."""
    found = []
    per_epoch = math.ceil(run.dataset_samples / run.global_batch) if run.dataset_samples else 0
    for e in run.evals:
        known = per_epoch and not math.isnan(e.epoch)
        found.append(
            Evaluation(
                epoch=e.epoch,
                step=int(e.epoch * per_epoch) if known else 0,
                samples=int(e.epoch * (run.dataset_samples or 0)) if known else 0,
                elapsed_s=e.elapsed_s,
                compute_elapsed_s=e.elapsed_s,
                metric=e.metric,
                loss=math.nan,  # MLPerf logs no evaluation loss
            )
        )
    return found


def store_run(store: ResultsStore, run: MlperfRun) -> bool:
    """Store ``run``, whole or not at all; ``False`` when the store has it already."""
    fields = as_record(run)
    return store.add_external(run.run_id, **fields, evals=evaluations(run), origin=run.origin)
