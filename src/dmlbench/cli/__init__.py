"""The `dmlbench` command line."""
