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


def test_only_jemalloc_is_preloaded_and_returning_sets_glibc_and_mkl_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for setting in ("tuned", "default"):
        assert allocator.preload(setting) == ({}, None)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    env, absent = allocator.preload("returning")
    assert absent is None and env["MKL_DISABLE_FAST_MM"] == "1"
    assert env["GLIBC_TUNABLES"] == (
        "glibc.malloc.mmap_threshold=4096:glibc.malloc.trim_threshold=4096:glibc.malloc.top_pad=0"
    )
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")  # the user's, kept
    tunables = allocator.preload("returning")[0]["GLIBC_TUNABLES"]
    assert tunables.startswith("glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=4096")


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


# what both heap tests start from: the process's anonymous resident memory, and blocks
# of glibc's heap, each written so that its pages are resident
HEAP = """
import ctypes

def anon() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def blocks(count: int, size: int) -> list[int]:
    made = [libc.malloc(size) for _ in range(count)]
    for block in made:
        ctypes.memset(block, 1, size)
    return made
"""

FREED_HEAP = (
    HEAP
    + """
import torch
from dmlbench.train.measures import RunMeasures

heap = blocks(8192, 1000)  # 8 MiB of the heap, below mmap's threshold
for block in heap[:-1]:  # the last pins the heap's top: free() cannot trim it
    libc.free(block)
print(anon(), RunMeasures(torch.device("cpu")).resident_start, sep="|")
"""
)


def heap_figures(script: str, env: dict[str, str]) -> list[str]:
    """The last line of ``script``'s output in a fresh interpreter started in ``env``,
    split at ``|``, and the line before it."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    return [*lines[-2:-1], *lines[-1].split("|")]


def test_a_cpu_run_starts_its_memory_from_what_the_process_holds_not_what_it_freed() -> None:
    """What a process freed before the run and glibc still holds would be taken back by
    the run's first allocations without raising resident memory, so a start reading
    that counts it reads the run low by as much (ZeRO-1 and DDP read 1.3 MiB apart on
    the same model): the start is read after glibc gives its free pages back."""
    if not allocator.on_glibc():
        pytest.skip("glibc's heap on Linux only")
    glibc_only = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # no jemalloc
    freed, start = (int(part) for part in heap_figures(FREED_HEAP, glibc_only)[-2:])
    assert freed - start >= 6 * 2**20  # most of the 8 MiB freed is not counted


HOLED_HEAP = (
    HEAP
    + """
from dmlbench.train.allocator import release_free_heap, tune_allocator

# as the imports before a run do: large blocks freed between others still held
large = blocks(256, 65536)
for block in large[::2]:
    libc.free(block)
print(tune_allocator("returning"))
release_free_heap()  # as a run does before its start reading
before = anon()
step = blocks(128, 65536)  # a step's 8 MiB of tensors, then freed
for block in step:
    libc.free(block)
print(before, anon(), sep="|")
"""
)


def test_returning_gives_a_steps_freed_blocks_back_whatever_the_heap_held_before() -> None:
    """Set late, glibc's thresholds only decide how the heap grows: blocks freed before
    it, between blocks still held, stay as holes that serve the next large blocks, whose
    pages then stay resident when freed (a DDP worker's resident memory grew 1.1 MiB
    for 0.6 MiB of tensors). Started in ``returning``'s environment, a process maps every
    large block on its own from the first, and gives a step's 8 MiB back."""
    if not allocator.on_glibc():
        pytest.skip("glibc's tunables on Linux only")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES")}
    env.update(allocator.preload("returning")[0])
    said, before, after = heap_figures(HOLED_HEAP, env)
    assert said == allocator.RETURNING
    assert int(after) - int(before) < 2 * 2**20  # of the 8 MiB the step freed, almost nothing stays
