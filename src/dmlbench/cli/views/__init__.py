"""The terminal views of the `dmlbench` commands (rich tables, progress bars)."""
