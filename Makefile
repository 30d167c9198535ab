# Two commands do all set-up on a fresh machine:
#   make run    creates .venv, installs dmlbench, runs the built-in default benchmark
#   make test   creates .venv, installs dmlbench with dev tools, runs lint and types, the
#               unit lane, the integration lane and the docs build
#
# TORCH is what gets installed when the venv has no torch yet. The default is the CPU
# build of 2.13.0 (a local file on our machines); any torch 2.x works:
#   make test TORCH="torch==2.5.1"

VENV ?= .venv
PYTHON ?= python3
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: run test test-fast lint docs install jemalloc packages clean

# pip compiles what it installs on one core; compileall does it on all of them (half the
# install's time on 2 cores). -qq: like pip, it passes over the few files of the packages'
# own tests that are not valid on this Python.
$(BIN)/dmlbench: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q --no-compile "$(TORCH)"
	$(BIN)/pip install -q --no-compile -e '.[dev]'
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

install: $(BIN)/dmlbench

run: install jemalloc
	$(BIN)/dmlbench run digits-mlp --workers 2

# Debian packages dmlbench uses, each found missing by a check that prints its name:
#   libjemalloc2  workers run on jemalloc (cpu_allocator: jemalloc, the default); without
#                 it they run on glibc, tuned, and each run says so in one line
#   chromium      the report test opens the HTML report in headless Chromium
#   slurm-wlm munge   the Slurm tests start a real Slurm (slurmctld, slurmd, munged)
#   bible-kjv     the language-model tasks train on the King James Bible it exports
need_jemalloc = ldconfig -p 2>/dev/null | grep -q 'libjemalloc\.so' || echo libjemalloc2;
need_chromium = command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
  command -v google-chrome >/dev/null || echo chromium;
need_slurm = { command -v slurmd >/dev/null && command -v munged >/dev/null; } || echo slurm-wlm munge;
need_corpus = command -v bible >/dev/null || echo bible-kjv;

# $(call apt_install,CHECKS): the packages CHECKS name, in one apt-get call (one index
# update) as root on Debian; elsewhere one line says what to install (what needs them
# skips or falls back).
define apt_install
	@missing=$$( { $(1) } | tr '\n' ' ' | sed 's/ *$$//'); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
	  echo "missing Debian packages (what needs them skips): sudo apt-get install $$missing"; \
	fi
endef

jemalloc:
	$(call apt_install,$(need_jemalloc))

packages:
	$(call apt_install,$(need_jemalloc) $(need_chromium) $(need_slurm) $(need_corpus))

# Two lanes: the unit lane (in-process, under a minute) first; a failure stops there.
# Then the integration lane (real processes, clusters, Slurm, a browser). Each writes its
# tests' durations to test-durations/LANE.csv, slowest first. The integration lane runs
# on two xdist workers: its tests wait on processes, networks and daemons about a third
# of the time, which the other worker fills. Tests that act on the whole machine
# (namespaces, Slurm) run in one worker, one at a time (tests/conftest.py).
test: install packages lint test-fast
	$(BIN)/python -m pytest tests/integration -n 2 \
	  --durations-file=test-durations/integration.csv

# The docs as a site, into site/ (every page under docs/, nav in mkdocs.yml).
docs: install
	$(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict  # not --quiet: it hides the warnings strict fails on

# The unit lane alone, on two xdist workers (a third less time than one on 2 cores: its
# tests start pools, Dask clusters and subprocesses that wait on each other).
test-fast: install
	$(BIN)/python -m pytest tests/unit -n 2 --durations-file=test-durations/unit.csv

clean:
	rm -rf $(VENV) dmlbench-results .pytest_cache .mypy_cache .ruff_cache site test-durations
