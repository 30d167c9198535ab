"""Which C allocator the launcher preloads into its workers, and what it says where it
cannot (issue 57). The workers' side, faults and all, is in the integration lane
(``test_hardware.py``, ``test_training.py``)."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest

from dmlbench.errors import SpecError
from dmlbench.train import allocator


def test_only_jemalloc_is_preloaded() -> None:
    for setting in ("tuned", "returning", "default"):
        assert allocator.preload(setting) == ({}, None)


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
