"""SQLite store of runs, their evaluations and their per-rank phase totals.

A run row is inserted as ``running`` before workers start and completed in one
transaction when they end, so a reader never sees half a run. A row left ``running``
by a launcher that was killed (its ``launcher.lock`` is free) reads as ``interrupted``,
and is stored so by the next write.

Opening the store writes nothing: reading commands read the database file read-only
(a store written by an older dmlbench reads through views that add its missing
columns; no store at all reads as empty). The first write, or ``dmlbench results
--upgrade``, creates the store, migrates it (:mod:`dmlbench.results.database`) and marks
abandoned runs (:meth:`ResultsStore.prepare`).

Every SQLite failure becomes a one-line :class:`~dmlbench.errors.StoreError`. On a
full disk what the store holds can still be read; a run that could not be stored is
imported from its folder later (:func:`dmlbench.results.recover.import_run_dir`).
"""

from __future__ import annotations

import difflib
import logging
import os
import socket
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from dmlbench.errors import AlreadyClaimed, StoreError
from dmlbench.names import first_few, shorten
from dmlbench.results import rows
from dmlbench.results.database import (
    SCHEMA,
    SETUP_LOCK,
    explain,
    migrate,
    older_columns_as_views,
    one_at_a_time,
)
from dmlbench.results.records import (
    FINISHED,
    SINGLE_RUNS,
    CommRun,
    Evaluation,
    RunRecord,
    RunSummary,
    matching_ids,
)
from dmlbench.results.rundir import OUTCOME_FILE, LauncherLock, launcher_holds, read_json
from dmlbench.system import pid_alive

LOG = logging.getLogger(__name__)
STORE_ENV = "DMLBENCH_STORE"
DB_FILE = "dmlbench.sqlite"


Names = str | Sequence[str] | None
"""A filter of runs: one sweep or task, several, or none (every run)."""


def _names(names: Names) -> list[str] | None:
    return None if names is None else [names] if isinstance(names, str) else list(names)


class Rerun(StrEnum):
    """Which of a sweep's points the store already has are run again."""

    never = "never"  # none
    failed = "failed"  # the failed and interrupted ones
    always = "always"  # every one


ABANDONED = (
    "the launching process ended without finishing the run; `dmlbench results --import "
    "RUN_FOLDER` keeps what its event log holds"
)


def _launcher_alive(row: Mapping[str, Any]) -> bool:
    """Whether the launcher of a ``running`` row still runs: it holds the run's lock.
    Rows from before locks existed fall back to the pid, on the host that stored it."""
    holds = launcher_holds(Path(row["run_dir"]))
    if holds is not None:
        return holds
    if row["host"] and row["host"] != socket.gethostname():
        return True  # another machine's launcher: we cannot tell, so we do not judge
    return pid_alive(row["launcher_pid"])


DEFAULT_STORE = "dmlbench-results"


def _abandoned(row: Mapping[str, Any]) -> bool:
    """A row left ``running`` by a launcher that is gone: it reads as interrupted, and
    the next write stores it so."""
    return bool(row["status"] == "running" and not _launcher_alive(row))


class StoredAs(NamedTuple):
    """A stored run's status, and whether its launcher or an import completed it."""

    status: str
    completed: bool


def _abandoned_error(row: Mapping[str, Any]) -> str | None:
    """The error a row reads with where its launcher died (as the next write stores it)."""
    return ABANDONED if _abandoned(row) else None


def default_store() -> Path:
    """The store a library caller gets: ``DMLBENCH_STORE``, or ./dmlbench-results."""
    return Path(os.environ.get(STORE_ENV, DEFAULT_STORE))


class ResultsStore:
    """The runs of one store folder. Constructing it reads and writes nothing; reads
    open the database read-only, writes :meth:`prepare` it first."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / DB_FILE
        self.read_only: str | None = None  # why writes are refused, once prepare found it
        self._prepared = False
        self._locks: dict[str, LauncherLock] = {}

    def prepare(self) -> int:
        """Make the store ready to write, once: create it, bring its tables to
        :data:`SCHEMA_VERSION`, mark the runs whose launcher died ``interrupted``
        (returns how many). Where that fails on an existing store (a full disk, a newer
        dmlbench's store), writes are refused with the reason and reads go on."""
        if self._prepared:
            return 0
        self._prepared = True
        marked = 0
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the results store {self.root}: {error}") from None
        try:
            with one_at_a_time(self.root / SETUP_LOCK), self._connect(write=True) as db:
                migrate(db, self.path)
            marked = self._mark_abandoned()
            LOG.info("store %s ready to write; %d abandoned runs marked", self.path, marked)
        except StoreError as error:
            if not self.path.is_file():
                raise
            self.read_only = str(error)  # e.g. a full disk: what is stored can still be read
            LOG.info("store %s is read-only: %s", self.path, error)
        return marked

    @contextmanager
    def _connect(self, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        try:
            if write and not self.read_only:
                db = sqlite3.connect(self.path, timeout=30)
                db.execute("PRAGMA journal_mode=WAL")
            elif not self.path.is_file():  # no store yet: it reads as empty
                db = sqlite3.connect(":memory:")
                db.executescript(SCHEMA)
            else:
                db = self._read_only_connection()
                older_columns_as_views(db)
        except sqlite3.Error as error:
            raise StoreError(f"results store {self.path}: {explain(error, self.root)}") from None
        db.row_factory = sqlite3.Row
        try:
            with db:  # one transaction: committed whole or rolled back
                yield db
        except sqlite3.Error as error:
            raise StoreError(f"results store {self.path}: {explain(error, self.root)}") from None
        finally:
            db.close()

    def _read_only_connection(self) -> sqlite3.Connection:
        """The database file, read-only. Where SQLite cannot make the write-ahead log's
        shared-memory file (a full disk), the file as it is, and writes are refused."""
        uri = self.path.resolve().as_uri()
        if not self.read_only:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True)
            try:
                db.execute("PRAGMA schema_version").fetchone()
                return db
            except sqlite3.Error as error:
                db.close()
                self.read_only = explain(error, self.root)
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True)

    def _writable(self) -> None:
        self.prepare()
        if self.read_only:
            raise StoreError(f"{self.read_only} (the store is open read-only)")

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def unlisted_run_dirs(self) -> list[Path]:
        """When the store holds no run at all (its database emptied, replaced or lost):
        the run folders under ``runs/`` it could hold, to import with ``results
        --import``. A node's share of a multi-node run recorded elsewhere is not one."""
        with self._connect() as db:
            if db.execute("SELECT 1 FROM runs UNION ALL SELECT 1 FROM comm_runs").fetchone():
                return []
        found = []
        for folder in sorted((self.root / "runs").glob("*/spec.json")):
            try:
                outcome = read_json(folder.parent / OUTCOME_FILE) or {}
            except StoreError:  # not ours to judge here: the import says what is wrong
                outcome = {}
            if not (isinstance(outcome, dict) and outcome.get("recorded") is False):
                found.append(folder.parent)
        return found

    def begin(
        self,
        run_id: str,
        spec: dict[str, Any],
        deviations: dict[str, Any],
        environment: dict[str, Any],
        sweep: dict[str, Any] | None = None,
        *,
        claim: Rerun | None = None,
        run_dir: Path | None = None,
    ) -> None:
        """Insert the run as ``running`` and hold its ``launcher.lock`` until :meth:`finish`.

        ``sweep`` tags a run of a sweep: its ``name``, ``scaling``, ``repeat``, ``key``
        (for resuming) and ``point`` (what varies). With ``claim``, the insert is refused
        (:class:`AlreadyClaimed`) when another live launcher runs the same sweep point,
        or when the store has it already as ``claim`` counts it (see
        :func:`dmlbench.sweep.pending`): two copies of one sweep share its points.
        """
        folder = run_dir or self.run_dir(run_id)
        row = rows.begun_run(run_id, spec, deviations, environment, sweep, folder)
        self._begin("runs", row, folder, claim)

    def _begin(self, table: str, row: rows.Row, run_dir: Path, claim: Rerun | None = None) -> None:
        """Hold the run's lock, then insert its row; the lock goes if the insert fails."""
        self._writable()
        run_id = row["run_id"]
        self.hold(run_id, run_dir)
        try:
            with self._connect(write=True) as db:
                if claim is not None and row.get("run_key"):
                    db.execute("BEGIN IMMEDIATE")  # nobody claims between check and insert
                    self._check_claim(db, row["sweep"], row["run_key"], claim)
                rows.insert(db, table, [row])
        except BaseException:
            self._release(run_id)
            raise

    def _release(self, run_id: str) -> None:
        lock = self._locks.pop(run_id, None)
        if lock is not None:
            lock.release()

    def hold(self, run_id: str, run_dir: Path) -> None:
        """Take the run's ``launcher.lock`` (released by ``finish``); refused in one line
        while another process holds it."""
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self._locks[run_id] = LauncherLock(run_dir)
        except BlockingIOError:
            raise StoreError(
                f"run {run_id} is still running: its launcher holds {run_dir}"
            ) from None
        except OSError as error:
            raise StoreError(f"cannot lock the run folder {run_dir}: {error}") from None

    def withdraw(self, run_id: str) -> None:
        """Remove a run this launcher began but another records (a node of a multi-node
        job that did not hold rank 0); its folder stays."""
        self._writable()
        with self._connect(write=True) as db:
            db.execute("DELETE FROM runs WHERE run_id=? AND status='running'", (run_id,))
        self._release(run_id)

    def status_of(self, run_id: str) -> str | None:
        """A training or communication run's stored status; None when it is not stored."""
        found = self.stored_as(run_id)
        return None if found is None else found.status

    def stored_as(self, run_id: str) -> StoredAs | None:
        """A training or communication run's stored status, and whether its launcher or
        an import completed it (not so one still running, or one whose launcher died: it
        reads as interrupted, and its folder's import completes it); None when it is not
        stored."""
        with self._connect() as db:
            for table in ("runs", "comm_runs"):
                row = db.execute(
                    f"SELECT status, finished_at FROM {table} WHERE run_id=?", (run_id,)
                )
                found = row.fetchone()
                if found is not None:
                    return StoredAs(str(found["status"]), found["finished_at"] is not None)
        return None

    def add_external(
        self,
        run_id: str,
        *,
        spec: dict[str, Any],
        environment: dict[str, Any],
        summary: RunSummary,
        evals: Sequence[Evaluation],
        origin: dict[str, Any],
        started: str | None = None,
    ) -> bool:
        """Store a finished run that ran elsewhere (a published MLPerf log) in one
        transaction, row and evaluations together, dated when it ``started`` (else now);
        ``False`` when the store has it already (it is never replaced: an external run is
        read-only)."""
        self._writable()
        row = rows.external_run(run_id, spec, environment, summary, origin, started)
        with self._connect(write=True) as db:
            db.execute("BEGIN IMMEDIATE")
            if db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone():
                return False
            rows.insert(db, "runs", [row])
            rows.insert(db, "evals", rows.evaluations(run_id, evals))
        return True

    def finish(
        self,
        run_id: str,
        *,
        status: str,
        summary: RunSummary,
        evals: Sequence[Evaluation],
        error: str | None = None,
    ) -> None:
        """Complete the run in one transaction and release its lock (also on failure)."""
        try:
            self._writable()
            with self._connect(write=True) as db:
                rows.update(db, "runs", run_id, rows.completed_run(status, summary, error))
                rows.insert(db, "evals", rows.evaluations(run_id, evals))
                rows.insert(db, "phases", rows.phase_totals(run_id, summary))
        finally:
            self._release(run_id)

    def _check_claim(self, db: sqlite3.Connection, sweep: str, key: str, rerun: Rerun) -> None:
        rows = db.execute(
            "SELECT run_id, status, run_dir, launcher_pid, host FROM runs "
            "WHERE sweep=? AND run_key=?",
            (sweep, key),
        ).fetchall()
        for row in rows:
            if row["status"] == "running" and _launcher_alive(row):
                raise AlreadyClaimed(f"run {row['run_id']} of this point is running elsewhere")
            if rerun == "never" or (rerun == "failed" and row["status"] in FINISHED):
                raise AlreadyClaimed(f"run {row['run_id']} has this point ({row['status']})")

    def _mark_abandoned(self) -> int:
        marked = 0
        with self._connect(write=True) as db:
            for table in ("runs", "comm_runs"):
                rows = db.execute(f"SELECT * FROM {table} WHERE status='running'").fetchall()
                for row in rows:
                    if _abandoned(row):
                        db.execute(
                            f"UPDATE {table} SET status='interrupted', error=? WHERE run_id=?",
                            (ABANDONED, row["run_id"]),
                        )
                        marked += 1
        return marked

    def begin_comm(
        self,
        run_id: str,
        spec: dict[str, Any],
        environment: dict[str, Any],
        *,
        run_dir: Path | None = None,
    ) -> None:
        """Insert a communication micro-benchmark as ``running`` and hold its lock."""
        folder = run_dir or self.run_dir(run_id)
        self._begin("comm_runs", rows.begun_comm(run_id, spec, environment, folder), folder)

    def finish_comm(
        self, run_id: str, *, status: str, results: list[dict[str, Any]], error: str | None
    ) -> None:
        """Complete the micro-benchmark with its measurements and release its lock."""
        try:
            self._writable()
            with self._connect(write=True) as db:
                row = {"status": status, "finished_at": rows.now_iso(), "error": error}
                rows.update(db, "comm_runs", run_id, row)
                rows.insert(db, "comm_results", rows.comm_results(run_id, results))
        finally:
            self._release(run_id)

    def comm_runs(self, run_id: str | None = None) -> list[CommRun]:
        """Communication micro-benchmarks, oldest first, each with its per-size results."""
        query = "SELECT * FROM comm_runs" + (" WHERE run_id=?" if run_id else "")
        with self._connect() as db:
            found = db.execute(query + " ORDER BY rowid", (run_id,) if run_id else ()).fetchall()
            return [rows.read_comm_run(db, row, _abandoned_error(row)) for row in found]

    def missed(self, sweep: Names, task: Names) -> str:
        """What a filter that matched no run asked for, with the nearest sweep or task
        the store has: `` for sweep 'x-worker' (did you mean 'x-workers'?)``, or the ones
        it has where none is near ("" without a filter)."""
        said = []
        with self._connect() as db:
            for column, values in (("sweep", sweep), ("task", task)):
                query = f"SELECT DISTINCT {column} FROM runs"
                names = sorted(str(row[0] or SINGLE_RUNS) for row in db.execute(query))
                shown = first_few(names, 8)
                for value in _names(values) or ():
                    close = difflib.get_close_matches(value[:200], names, n=1)
                    hint = f"did you mean '{close[0]}'?" if close else f"it has {shown or 'none'}"
                    said.append(f"{column} '{shorten(value)}' ({hint})")
        return f" for {' and '.join(said)}" if said else ""

    def matching_ids(self, fragment: str) -> list[str]:
        """``[fragment]`` where it is a training run's id, else every one that starts or
        ends with it."""
        with self._connect() as db:
            return matching_ids(fragment, [r[0] for r in db.execute("SELECT run_id FROM runs")])

    def sweep_status(self, sweep: str) -> dict[str, str]:
        """``{run_key: status}`` of a sweep's stored runs; a success anywhere wins."""
        rank = {"success": 3, "target_not_reached": 2}
        latest: dict[str, str] = {}
        with self._connect() as db:
            query = "SELECT * FROM runs WHERE sweep=? ORDER BY rowid"
            for row in db.execute(query, (sweep,)):
                key, status = row["run_key"], row["status"]
                if _abandoned(row):
                    status = "interrupted"
                if rank.get(status, 0) >= rank.get(latest.get(key, ""), 0):
                    latest[key] = status
        return latest

    def runs(
        self, run_id: str | None = None, *, sweep: Names = None, task: Names = None
    ) -> list[RunRecord]:
        """Every run (or one, or those of some sweeps or tasks), oldest first, with its
        evaluations and phase totals. The sweep ``single runs`` is the runs of none, as
        tables call them."""
        clauses, values = [], []
        for column, names in (("run_id", run_id), ("sweep", sweep), ("task", task)):
            if (listed := _names(names)) is None:
                continue
            clause = f"{column} IN ({', '.join('?' * len(listed))})"
            if column == "sweep" and SINGLE_RUNS in listed:
                clause = f"({clause} OR sweep IS NULL)"
            clauses.append(clause)
            values += listed
        clause = " AND ".join(clauses)
        query = "SELECT * FROM runs" + (f" WHERE {clause}" if clause else "") + " ORDER BY rowid"
        with self._connect() as db:
            found = db.execute(query, values).fetchall()
            return [rows.read_run(db, row, _abandoned_error(row)) for row in found]
