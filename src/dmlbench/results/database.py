"""The store's SQLite file: its tables and their format (``PRAGMA user_version``), the
migration a store from an older dmlbench gets on its first write, the temporary views
through which it is read as it is, and one writer at a time while a store is set up.
:class:`~dmlbench.results.store.ResultsStore` is built on it."""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dmlbench.errors import StoreError

LOG = logging.getLogger(__name__)

# Held (flock) while a process creates or upgrades the store's tables: two launchers
# that open a new store at once (a Slurm job array's tasks) would otherwise race to
# switch it to WAL, and the loser saw "database is locked" and opened it read-only.
SETUP_LOCK = "dmlbench.sqlite.setup-lock"

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    division TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    workers INTEGER NOT NULL,
    local_batch INTEGER NOT NULL,
    global_batch INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    exchange TEXT NOT NULL,
    target REAL,
    best_metric REAL,
    time_to_accuracy_s REAL,
    time_to_accuracy_compute_s REAL,
    epochs REAL,
    steps INTEGER,
    samples INTEGER,
    elapsed_s REAL,
    throughput REAL,
    error TEXT,
    host TEXT,
    cpu_model TEXT,
    cores INTEGER,
    gpus TEXT,
    torch_version TEXT,
    git_revision TEXT,
    spec_json TEXT NOT NULL,
    deviations_json TEXT NOT NULL,
    environment_json TEXT NOT NULL,
    summary_json TEXT,
    run_dir TEXT NOT NULL,
    launcher_pid INTEGER,
    sweep TEXT,
    scaling TEXT,
    repeat INTEGER,
    run_key TEXT,
    point_json TEXT,
    network TEXT,
    disturbed INTEGER,
    origin_json TEXT
);
CREATE TABLE IF NOT EXISTS evals (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    epoch REAL, step INTEGER, samples INTEGER,
    elapsed_s REAL, compute_elapsed_s REAL,
    metric REAL, loss REAL, train_metric REAL
);
CREATE TABLE IF NOT EXISTS phases (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    rank INTEGER, phase TEXT, seconds REAL, steady_seconds REAL
);
CREATE TABLE IF NOT EXISTS comm_runs (
    run_id TEXT PRIMARY KEY,
    op TEXT NOT NULL,
    backend TEXT NOT NULL,
    workers INTEGER NOT NULL,
    network TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    error TEXT,
    host TEXT,
    cpu_model TEXT,
    cores INTEGER,
    torch_version TEXT,
    git_revision TEXT,
    spec_json TEXT NOT NULL,
    environment_json TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    launcher_pid INTEGER
);
CREATE TABLE IF NOT EXISTS comm_results (
    run_id TEXT NOT NULL REFERENCES comm_runs(run_id),
    bytes INTEGER, repeats INTEGER, iterations INTEGER,
    latency_s REAL, latency_min_s REAL, latency_max_s REAL, latency_std_s REAL,
    algbw REAL, busbw REAL, scope TEXT
);
CREATE INDEX IF NOT EXISTS evals_run ON evals(run_id);
CREATE INDEX IF NOT EXISTS comm_results_run ON comm_results(run_id);
CREATE INDEX IF NOT EXISTS phases_run ON phases(run_id);
"""

# Columns added after a store format was first released: (name, SQL type). A store
# written by an older dmlbench gains them on open; its old rows read NULL.
ADDED_COLUMNS = [
    ("sweep", "TEXT"),
    ("scaling", "TEXT"),
    ("repeat", "INTEGER"),
    ("run_key", "TEXT"),
    ("point_json", "TEXT"),
    ("network", "TEXT"),
    ("disturbed", "INTEGER"),
    ("origin_json", "TEXT"),  # an external run's source (an MLPerf log); NULL: run here
]
# PRAGMA user_version of a store this dmlbench wrote. 0: a store from before versions
# (its missing columns are added by the migration); 1: ADDED_COLUMNS all present.
SCHEMA_VERSION = 1


def explain(error: sqlite3.Error, root: Path) -> str:
    """SQLite's words, plus what they mean when the filesystem is full."""
    text = str(error)
    try:
        full = os.statvfs(root).f_bavail == 0
    except OSError:
        full = False
    if full or "full" in text:
        return f"{text}; the filesystem holding {root} is full: free space there"
    return text


@contextmanager
def one_at_a_time(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the block (released if the process dies).
    Where the lock file cannot be made (a read-only store), nothing can race to write."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the store's tables to :data:`SCHEMA_VERSION` (in the caller's transaction);
    a store a newer dmlbench wrote is refused."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"results store {path}: written by a newer dmlbench (store format {version}, "
            f"this one writes {SCHEMA_VERSION}); upgrade dmlbench to add runs to it"
        )
    for table, name, sql_type in _missing_columns(db):
        LOG.info("store %s: adding column %s.%s", path, table, name)
        db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")
    db.executescript(SCHEMA)
    db.execute("CREATE INDEX IF NOT EXISTS runs_sweep ON runs(sweep, run_key)")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _missing_columns(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(table, column, type) that a store from before :data:`SCHEMA_VERSION` lacks."""
    added = {
        "runs": ADDED_COLUMNS,
        "comm_results": [("scope", "TEXT")],  # added with emulated clusters
        "evals": [("train_metric", "REAL")],  # added with training accuracy
    }
    missing = []
    for table, columns in added.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        missing += [(table, name, kind) for name, kind in columns if have and name not in have]
    return missing


def older_columns_as_views(db: sqlite3.Connection) -> None:
    """On a read-only connection to an older store: a temporary view per table that
    lacks columns, adding them as NULL, and an empty temporary table for each table it
    lacks (an emptied database file). Temporary objects shadow the file's tables and
    live in memory, so nothing is written."""
    have = {row[0] for row in db.execute("SELECT name FROM main.sqlite_master")}
    for statement in SCHEMA.split(";"):
        words = statement.split()
        if words[:5] == ["CREATE", "TABLE", "IF", "NOT", "EXISTS"] and words[5] not in have:
            db.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
    missing: dict[str, list[str]] = {}
    for table, name, _ in _missing_columns(db):
        missing.setdefault(table, []).append(name)
    for table, names in missing.items():
        nulls = ", ".join(f"NULL AS {name}" for name in names)
        db.execute(f"CREATE TEMP VIEW {table} AS SELECT *, {nulls} FROM main.{table}")
