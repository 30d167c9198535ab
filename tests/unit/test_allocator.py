"""Which C allocator the launcher preloads into its workers, and what it says where it
cannot (issue 57). The workers' side, faults and all, is in the integration lane
(``test_hardware.py``, ``test_training.py``)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmlbench.errors import SpecError
from dmlbench.train import allocator


def test_only_jemalloc_is_preloaded_and_returning_tells_mkl_to_keep_nothing() -> None:
    for setting in ("tuned", "default"):
        assert allocator.preload(setting) == ({}, None)
    assert allocator.preload("returning") == ({"MKL_DISABLE_FAST_MM": "1"}, None)


def test_jemalloc_is_preloaded_with_settings_that_keep_freed_memory() -> None:
    if allocator.find_jemalloc() is None:
        pytest.skip("jemalloc is not installed here (make test installs libjemalloc2)")
    env, absent = allocator.preload("jemalloc")
    assert absent is None
    assert "jemalloc" in env["LD_PRELOAD"] and env["MALLOC_CONF"] == allocator.JEMALLOC_CONF
    assert "dirty_decay_ms:-1" in env["MALLOC_CONF"] and "muzzy_decay_ms:-1" in env["MALLOC_CONF"]


def test_a_machine_without_jemalloc_is_told_in_one_line_and_runs_on_tuned_glibc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(allocator.JEMALLOC_ENV, raising=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)  # as on that machine
    env, absent = allocator.preload("jemalloc")
    assert env == {} and absent is not None and "\n" not in absent
    assert "apt-get install libjemalloc2" in absent and "cpu_allocator=tuned" in absent


def test_a_named_library_that_is_no_jemalloc_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(allocator.JEMALLOC_ENV, str(tmp_path / "missing.so"))
    with pytest.raises(SpecError, match="is not a file") as missing:
        allocator.preload("jemalloc")
    impostor = tmp_path / "libnot.so"
    impostor.write_text("not a shared library")
    monkeypatch.setenv(allocator.JEMALLOC_ENV, str(impostor))
    with pytest.raises(SpecError, match="does not preload as jemalloc") as wrong:
        allocator.preload("jemalloc")
    spaced = tmp_path / "my libs" / "libjemalloc.so.2"
    spaced.parent.mkdir()
    spaced.write_text("a path LD_PRELOAD would split")
    monkeypatch.setenv(allocator.JEMALLOC_ENV, str(spaced))
    with pytest.raises(SpecError, match="spaces or colons") as split:
        allocator.preload("jemalloc")
    assert "\n" not in str(missing.value) + str(wrong.value) + str(split.value)


FREED_HEAP = """
import ctypes, sys, torch
from dmlbench.train.measures import RunMeasures

def anon() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(1000) for _ in range(8192)]  # 8 MiB of the heap, below mmap's threshold
for block in blocks:
    ctypes.memset(block, 1, 1000)
for block in blocks[:-1]:  # the last pins the heap's top: free() cannot trim it
    libc.free(block)
print(anon(), RunMeasures(torch.device("cpu")).resident_start, sep="|")
"""


def test_a_cpu_run_starts_its_memory_from_what_the_process_holds_not_what_it_freed() -> None:
    """What a process freed before the run and glibc still holds would be taken back by
    the run's first allocations without raising resident memory, so a start reading
    that counts it reads the run low by as much (ZeRO-1 and DDP read 1.3 MiB apart on
    the same model): the start is read after glibc gives its free pages back."""
    if not allocator.on_glibc():
        pytest.skip("glibc's heap on Linux only")
    glibc_only = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # no jemalloc
    done = subprocess.run(
        [sys.executable, "-c", FREED_HEAP],
        capture_output=True,
        text=True,
        timeout=120,
        env=glibc_only,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    freed, start = (int(part) for part in done.stdout.strip().splitlines()[-1].split("|"))
    assert freed - start >= 6 * 2**20  # most of the 8 MiB freed is not counted
