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
  evaluations (``eval_start``/``eval_stop``) taken out where the log times them apart
  from training (not the part of one that training ran beside).

An evaluation that logs several qualities at once keeps the one :data:`QUALITY_KEYS`
names (Mask R-CNN's box AP); the system's devices are read by
:mod:`dmlbench.results.mlperf_system`, its clock (when it began, how long it evaluated
while nothing trained) by :mod:`dmlbench.results.mlperf_clock`, and
:mod:`dmlbench.results.mlperf_record` makes the store's record of a run.

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
from dmlbench.qualities import IMPORTED
from dmlbench.results.mlperf_clock import evaluation_alone_s, started_at
from dmlbench.results.mlperf_system import Devices, read_system, system_devices

MAX_LOG_BYTES = 64 << 20  # the largest v0.7 result file is 30 MB
MAX_LOGS = 10_000  # result files one import reads
MLLOG = ":::MLLOG "
RANK_PREFIX = re.compile(r"^\s*(\d+):\s*:::MLLOG ")
RESULT_NAME = re.compile(r"result_(\d+)\.txt")
ROUND_NAME = re.compile(r"training_results_(v\d+\.\d+)")

# The quality each benchmark must reach, per round (MLPerf Training rules, "Benchmarks"
# table of each round: https://github.com/mlcommons/training_policies), in the logs'
# terms (a BLEU of 24.0 is logged 0.24). Minigo's (a win rate) is not: it is not read.
TARGETS: dict[tuple[str, str], float] = {
    ("v0.7", "resnet"): 0.759,  # top-1 accuracy
    ("v0.7", "bert"): 0.712,  # masked-LM accuracy
    ("v0.7", "ssd"): 0.23,  # mAP
    ("v0.7", "maskrcnn"): 0.377,  # box AP (and 0.339 mask AP; the curve keeps the box's)
    ("v0.7", "gnmt"): 0.24,  # SacreBLEU
    ("v0.7", "transformer"): 0.25,  # BLEU
    ("v0.7", "dlrm"): 0.8025,  # AUC
}
# Benchmarks whose logs count progress in samples, not epochs: ``train_samples`` at the
# end is what was trained (BERT in v0.7; ResNet logs the dataset's size at the start).
COUNTS_SAMPLES = {"bert"}
# Benchmarks the rules evaluate at a fixed share of an epoch, and that share: a log's
# epoch_num does not say the epochs trained (NVIDIA's DLRM logs 1 + them, 1.05 at the
# first evaluation; Google's the evaluation's number, 1, 2, ...), so the n-th evaluation
# is read as n × the share. DLRM: every 0.05 epochs (MLPerf Training v0.7 rules; as the
# logs' runs were set: Google's steps_between_evals=6400 at a batch of 32,768 is 0.0500
# of the 4,195,197,692 training samples, NVIDIA's first evaluation logs 1.0499552).
EVALUATED_EVERY = {"dlrm": 0.05}
# Benchmarks whose evaluations log several qualities at once, and the one their curve
# keeps: Mask R-CNN's box and mask AP (its target is both; the box AP is named first).
QUALITY_KEYS = {"maskrcnn": "BBOX"}

# The gradient accumulation a run logs: v0.7's key, and the one mlperf-logging's closed
# rules require from v1.0 on (its training_1.0.0/closed_common.yaml); the first found.
ACCUMULATION_KEYS = ("gradient_accumulation_steps", "opt_gradient_accumulation_steps")
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
        *ACCUMULATION_KEYS,
        "train_samples",
        "eval_samples",
        "init_start",
        "init_stop",
        "run_start",
        "run_stop",
        "block_start",
        "block_stop",
        "epoch_start",
        "epoch_stop",
        "eval_start",
        "eval_stop",
        "eval_accuracy",
    }
)
STATUSES = {"success": "success", "aborted": "target_not_reached"}


class LogRefused(StoreError):
    """A result log that cannot be scored. ``why`` says so without the log's path, so
    that an import says it once for the logs it shares."""

    def __init__(self, log: Path, why: str) -> None:
        super().__init__(f"{log}: {why}")
        self.why = why


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
    devices: Devices  # nodes, devices a node, and their model
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
    started_at: str | None = None  # ISO 8601, UTC: when the run began, where the log says

    @property
    def workers(self) -> int:
        return self.devices.nodes * self.devices.per_node


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
        raise LogRefused(where, "holds no MLLOG line: is it an MLPerf result_N.txt?")
    return events, header


def _number(value: Any, what: str, where: Path, *, whole: bool = False) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise LogRefused(where, f"{what} is {shorten(repr(value))}, not a number ≥ 0")
    if whole and value != int(value):
        raise LogRefused(where, f"{what} is {value}, not a whole number")
    return float(value)


def _quality(value: Any, benchmark: str, where: Path) -> float:
    """An evaluation's quality: the number logged, or the one :data:`QUALITY_KEYS`
    names among several."""
    if isinstance(value, dict):
        key = QUALITY_KEYS.get(benchmark)
        if key not in value:
            names = shorten(", ".join(map(str, value)))
            raise LogRefused(where, f"eval_accuracy holds {names}: which one is {benchmark}'s?")
        value = value[key]
    return _number(value, "eval_accuracy", where)


def _stated(value: dict[str, Any], key: str) -> Any:
    """``value[key]``, or None where the log kept the reference code's stand-in for it
    (``SUBMISSION_PLATFORM_PLACEHOLDER``)."""
    found = value.get(key)
    return None if isinstance(found, str) and "PLACEHOLDER" in found else found


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
        raise LogRefused(path, f"submission_benchmark is {shorten(repr(benchmark))}")
    start, stop = _first(events, "run_start"), _first(events, "run_stop")
    if start is None or stop is None:
        missing = "run_start" if start is None else "run_stop"
        raise LogRefused(path, f"has no {missing}: the run's log is incomplete; nothing stored")
    began, ended = _time(start, path), _time(stop, path)
    if ended < began:
        raise LogRefused(path, "run_stop comes before run_start")
    try:
        system = read_system(root, system_name)
        devices = system_devices(system, f"systems/{system_name}.json")
    except StoreError as error:
        raise LogRefused(path, str(error)) from None
    if value.get("global_batch_size") is None:
        raise LogRefused(
            path,
            "logs no global_batch_size, by which dmlbench scores a run"
            + (" (minigo learns from self-play and logs none)" if benchmark == "minigo" else ""),
        )
    global_batch = int(
        _number(value.get("global_batch_size"), "global_batch_size", path, whole=True)
    )
    if global_batch < 1:
        raise LogRefused(path, "global_batch_size is 0")
    key = next((k for k in ACCUMULATION_KEYS if value.get(k) is not None), ACCUMULATION_KEYS[0])
    accumulation = int(_number(value.get(key, 1), key, path, whole=True))
    accumulation = max(accumulation, 1)  # Google's TPU logs say 0 for none
    mlperf_status = stop["metadata"].get("status")
    status = STATUSES.get(mlperf_status, "failed") if isinstance(mlperf_status, str) else "failed"
    evals: list[MlperfEval] = []
    for event in (e for e in events if e["key"] == "eval_accuracy"):
        metric = _quality(event.get("value"), benchmark, path)
        epoch = event["metadata"].get("epoch_num", math.nan)
        epoch = _number(epoch, "epoch_num", path) if epoch == epoch else math.nan
        if benchmark in EVALUATED_EVERY:
            epoch = (len(evals) + 1) * EVALUATED_EVERY[benchmark]
        evals.append(MlperfEval(epoch, _time(event, path) - began, metric))
    eval_s = evaluation_alone_s(events, lambda event: _time(event, path))
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
    # the system description names the submitter as MLPerf's table does: a log may keep
    # the organisation whose code it ran (Dell EMC's say NVIDIA), or another spelling
    submitter = system.get("submitter") or _stated(value, "submission_org") or path.parts[-5]
    division = _stated(value, "submission_division") or system.get("division") or "closed"
    origin = {
        "source": IMPORTED,
        "round": round_name,
        "submitter": str(submitter),
        "division": str(division),
        "benchmark": benchmark,
        "system": system_name,
        "platform": _stated(value, "submission_platform"),
        "repository": repository,
        "path": header.get("path") or relative,
        "commit": header.get("commit") or _commit(path.parents[4]),
        "read_only": True,
    }
    run_id = "-".join(
        re.sub(r"[^a-z0-9._]+", "_", str(part).lower())
        for part in (IMPORTED, round_name or "round", submitter, system_name, benchmark, number)
    )[:128]
    seed = value.get("seed", 0)
    return MlperfRun(
        run_id=run_id,
        benchmark=benchmark,
        status=status,
        mlperf_status=str(mlperf_status),
        origin=origin,
        system=system,
        devices=devices,
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
        started_at=started_at(events),
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


@dataclass
class Reading:
    """The runs read from the paths given, and what was set aside: the logs each reason
    refused, by folder, and the files that could not be read at all."""

    runs: list[MlperfRun] = field(default_factory=list)
    refused: dict[tuple[Path, str], list[Path]] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)  # each error names its file

    def skipped(self) -> list[str]:
        """What was set aside, a line each: a reason once for the logs of a folder it
        refused."""
        lines = []
        for (folder, why), logs in self.refused.items():
            what = logs[0] if len(logs) == 1 else f"{len(logs)} logs in {folder}"
            lines.append(f"skipped {what}: {why}")
        return lines + [f"skipped: {said}" for said in self.unread]


def read_results(given: Iterable[Path]) -> Reading:
    """Every result log under the paths given (:func:`result_files`). A log that cannot
    be scored (a benchmark dmlbench cannot score, such as minigo, or a damaged file) is
    set aside with its reason; a path that is one log raises its error instead."""
    reading = Reading()
    for path in given:
        files = result_files(path)
        for file in files:
            try:
                reading.runs.append(read_result(file))
            except StoreError as error:
                if len(files) == 1:
                    raise
                if isinstance(error, LogRefused):
                    reading.refused.setdefault((file.parent, error.why), []).append(file)
                else:
                    reading.unread.append(str(error))
    return reading


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
