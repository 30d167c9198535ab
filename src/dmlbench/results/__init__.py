"""Event logs, environment capture and the SQLite results store."""

from dmlbench.results.events import EVENTS_FILE, EventLog, read_events
from dmlbench.results.store import ResultsStore, default_store

__all__ = ["EVENTS_FILE", "EventLog", "ResultsStore", "default_store", "read_events"]
