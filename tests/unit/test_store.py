"""The store writes only when asked: opening and reading a store leave its file as it
was; the first write (or `results --upgrade`) migrates it and marks abandoned runs."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from dmlbench.resolve import resolve_spec
from dmlbench.results import ResultsStore
from dmlbench.results.database import SCHEMA_VERSION
from dmlbench.results.environment import collect_environment
from dmlbench.results.store import ABANDONED, DB_FILE


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _abandoned_run(root: Path) -> str:
    """A store holding one run left ``running`` by a launcher that is gone."""
    store = ResultsStore(root)
    spec = resolve_spec("synthetic-mlp").to_json_dict()
    store.begin("gone", spec, {}, collect_environment(), run_dir=root / "runs" / "gone")
    store._locks.pop("gone").release()  # as a killed launcher's lock is released
    return "gone"


def _stored_status(root: Path, run_id: str) -> str:
    with sqlite3.connect(root / DB_FILE) as db:
        return db.execute("SELECT status FROM runs WHERE run_id=?", (run_id,)).fetchone()[0]


def test_reading_a_store_writes_nothing_and_shows_abandoned_runs_as_interrupted(
    tmp_path: Path,
) -> None:
    run_id = _abandoned_run(tmp_path)
    before = _digest(tmp_path / DB_FILE)
    reader = ResultsStore(tmp_path)
    (run,) = reader.runs()
    assert (run.status, run.error) == ("interrupted", ABANDONED)
    assert reader.sweep_status("none") == {} and reader.status_of(run_id) == "running"
    assert _digest(tmp_path / DB_FILE) == before and _stored_status(tmp_path, run_id) == "running"
    assert ResultsStore(tmp_path).prepare() == 1  # the explicit step (or the first write)
    assert _stored_status(tmp_path, run_id) == "interrupted"


def test_reading_where_there_is_no_store_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "nowhere"
    store = ResultsStore(root)
    assert store.runs() == [] and store.comm_runs() == [] and store.matching_ids("x") == []
    assert not root.exists()


def test_an_older_store_reads_as_it_is_and_is_migrated_by_the_first_write(
    tmp_path: Path,
) -> None:
    """A store from before the origin and training-accuracy columns (format 0)."""
    _abandoned_run(tmp_path)
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        db.execute("ALTER TABLE runs DROP COLUMN origin_json")
        db.execute("ALTER TABLE evals DROP COLUMN train_metric")
        db.execute("PRAGMA user_version=0")
    before = _digest(tmp_path / DB_FILE)
    (run,) = ResultsStore(tmp_path).runs()
    assert run.origin is None and run.status == "interrupted"
    assert _digest(tmp_path / DB_FILE) == before
    ResultsStore(tmp_path).prepare()
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert "origin_json" in {row[1] for row in db.execute("PRAGMA table_info(runs)")}
        assert "train_metric" in {row[1] for row in db.execute("PRAGMA table_info(evals)")}


def test_a_newer_dmlbench_store_is_read_but_not_written(tmp_path: Path) -> None:
    run_id = _abandoned_run(tmp_path)
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    store = ResultsStore(tmp_path)
    assert [r.run_id for r in store.runs()] == [run_id]
    store.prepare()
    assert store.read_only is not None and "newer dmlbench" in store.read_only
    assert _stored_status(tmp_path, run_id) == "running"  # not marked: nothing written


def test_an_emptied_database_file_reads_as_an_empty_store(tmp_path: Path) -> None:
    _abandoned_run(tmp_path)
    (tmp_path / DB_FILE).write_bytes(b"")
    assert ResultsStore(tmp_path).runs() == []
    assert (tmp_path / DB_FILE).read_bytes() == b""


def test_results_upgrade_says_what_it_did(tmp_path: Path, dmlbench) -> None:
    _abandoned_run(tmp_path)
    code, out, err = dmlbench("results", "--upgrade", "--store", str(tmp_path))
    assert code == 0, err
    assert f"store format {SCHEMA_VERSION}" in out and "1 abandoned run stored" in out
    code, out, _ = dmlbench("results", "--upgrade", "--store", str(tmp_path / "none"))
    assert code == 2 and not (tmp_path / "none").exists()


def test_verbose_shows_what_the_library_logs_and_quiet_does_not(tmp_path: Path, dmlbench) -> None:
    import logging

    _abandoned_run(tmp_path)
    code, _, err = dmlbench("results", "--upgrade", "--store", str(tmp_path / "none"))
    assert code == 2 and "dmlbench.results.store" not in err
    code, out, err = dmlbench("-v", "results", "--upgrade", "--store", str(tmp_path))
    err = " ".join(err.split())  # the log handler wraps at the terminal's width
    assert code == 0 and "dmlbench.results.store" in err and "ready to write" in err
    assert "ready to write" not in out  # logs go to stderr; what is printed for people stays
    logger = logging.getLogger("dmlbench")
    logger.handlers[:], logger.propagate = [logging.NullHandler()], True
    logger.setLevel(logging.NOTSET)


def test_a_filter_that_matches_no_run_names_the_nearest_the_store_has(
    tmp_path: Path, dmlbench
) -> None:
    """A sweep's name one letter short read "no stored runs in STORE for sweep '…'"
    and nothing more: the names a table prints are long and easy to mistype."""
    store = ResultsStore(tmp_path)
    spec = resolve_spec("synthetic-mlp").to_json_dict()
    sweep = {"name": "synthetic-mlp-workers", "key": "k", "scaling": "weak", "repeat": 0}
    store.begin("a", spec, {}, collect_environment(), sweep={**sweep, "point": {"workers": 1}})
    assert store.missed(None, None) == ""
    assert store.missed("synthetic-mlp-worker", None) == (
        " for sweep 'synthetic-mlp-worker' (did you mean 'synthetic-mlp-workers'?)"
    )
    assert store.missed(None, "zzz") == " for task 'zzz' (it has synthetic-mlp)"
    for command in ("results", "compare", "export", "report"):
        out = ["--out", str(tmp_path / command)] if command == "export" else []
        png = ["--png", str(tmp_path / "png")] if command == "report" else []
        code, _, err = dmlbench(
            command, "--store", str(tmp_path), "--sweep", "synthetic-mlp-w", *out, *png
        )
        assert code == 2 and "(did you mean 'synthetic-mlp-workers'?)" in err, err
    # and a refused export or report leaves no folder behind
    assert not (tmp_path / "export").exists() and not (tmp_path / "png").exists()
    # `results` lists a sweep's runs or a task's, as the others take them
    code, out, _ = dmlbench("results", "--store", str(tmp_path), "--sweep", sweep["name"], "--json")
    assert code == 0 and [run["run_id"] for run in json.loads(out)] == ["a"]
    code, _, err = dmlbench("results", "a", "--store", str(tmp_path), "--task", "synthetic-mlp")
    assert code == 2 and "give them or a run id" in err
    # a run of no sweep is under "single runs", as the tables head it
    store.begin("b", spec, {}, collect_environment())
    assert [run.run_id for run in store.runs(sweep="single runs")] == ["b"]
    assert "(did you mean 'single runs'?)" in store.missed("single run", None)
    # (still running, as this process holds it: compare said so in a traceback, a
    # KeyError from an empty table without columns)
    for how in ((), ("--best-by", "time_to_accuracy"), ("--by", "exchange"), ("--json",)):
        code, out, err = dmlbench(
            "compare", "--store", str(tmp_path), "--sweep", "single runs", *how
        )
        assert code == 0, err
        assert out.strip() == "[]" if how == ("--json",) else "1 run is still running" in out


def test_several_tasks_or_sweeps_are_listed_together_and_a_misspelt_one_is_said(
    tmp_path: Path, dmlbench
) -> None:
    """`--task imagenet-resnet50 --task mlperf/resnet` (one's own runs beside MLPerf's)
    kept only the last: typer takes a single option given twice as its last value."""
    store = ResultsStore(tmp_path)
    env = collect_environment()
    for run_id, task in (("a", "synthetic-mlp"), ("b", "digits-mlp"), ("c", "digits-mlp")):
        store.begin(run_id, resolve_spec(task).to_json_dict(), {}, env, sweep=None)
    both = ("--task", "synthetic-mlp", "--task", "digits-mlp")
    for given in (both, ("--task", "synthetic-mlp,digits-mlp")):
        code, out, err = dmlbench("results", "--store", str(tmp_path), *given, "--json")
        assert code == 0, err
        assert sorted(run["run_id"] for run in json.loads(out)) == ["a", "b", "c"]
    assert [r.run_id for r in store.runs(task=["digits-mlp"])] == ["b", "c"]
    assert [r.run_id for r in store.runs(sweep=["single runs", "x"], task="synthetic-mlp")] == ["a"]
    # a misspelt one beside a known one is refused, named with the nearest, not left out
    for command in ("results", "compare", "export", "report"):
        out = ["--out", str(tmp_path / command)] if command == "export" else []
        code, _, err = dmlbench(
            command, "--store", str(tmp_path), "--task", "digits-mlp,synthetic-mpl", *out
        )
        assert code == 2 and "task 'synthetic-mpl' (did you mean 'synthetic-mlp'?)" in err, err
        assert "digits-mlp'" not in err
    code, _, err = dmlbench("results", "--store", str(tmp_path), "--task", " , ")
    assert code == 2 and "--task: name one" in err
