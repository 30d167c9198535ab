"""The integration lane's own fixtures."""

from __future__ import annotations

import dataclasses
import fcntl
import os
from pathlib import Path

import pytest
import torch

from dmlbench.results.rundir import write_json
from dmlbench.train.hardware import CACHE_FILE, cache_key, probe_peak


@pytest.fixture(scope="session")
def machine_peaks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The peak-FLOP/s cache every run of this lane starts from: probed once for the
    whole session, for each thread count a worker takes on this machine, and kept even
    where other processes disturbed the probe.

    dmlbench probes again after a disturbed probe (a peak measured beside other work is
    not the machine's). Beside the other xdist worker nearly every probe is disturbed,
    so every run's launcher probed anew: about 5 s of CPU a run, a third of the lane's
    CPU. The runs only need a figure here; the probes themselves are tested in
    test_hardware.py, in caches of their own. Under xdist the first worker probes while
    the other waits on the lock, so the probe has the machine to itself."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if hasattr(request.config, "workerinput") else base
    path = shared / CACHE_FILE
    with (shared / f"{CACHE_FILE}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            cpu, cores = torch.device("cpu"), os.cpu_count() or 1
            peaks = {}
            for threads in sorted({1, max(1, cores // 2), cores}):  # 1 to all workers
                peak, _ = probe_peak(cpu, threads, torch.float32)
                peaks[cache_key(cpu, torch.float32, threads)] = dataclasses.asdict(peak)
            write_json(path, peaks)
    return path
