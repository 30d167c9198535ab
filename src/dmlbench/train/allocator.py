"""The C allocator a worker runs on: which one, and how it treats the memory a step frees.

A training step allocates the same large blocks every step (a ResNet-50's activations
at batch 32: about 2.3 GB, the largest 100 MB). An allocator that hands freed blocks
back to the kernel makes the next step fault them in again page by page: glibc does so
for every block above its mmap threshold, at most 32 MiB, so a ResNet-50 step faulted
589,579 pages even with :data:`TUNED`'s thresholds at their maximum.

- ``jemalloc`` (the default): jemalloc, preloaded into the workers by the launcher
  (``LD_PRELOAD``, so it serves the process from its first allocation), told to keep
  what it frees (:data:`JEMALLOC_CONF`). Intel's PyTorch CPU guides recommend it.
  Where the library is not found, the launcher says so in one line and the workers
  run on ``tuned`` glibc.
- ``tuned``: glibc, its mmap and trim thresholds fixed high (:func:`tune_allocator`).
- ``returning``: glibc maps every block of 4 KiB or more on its own and returns it
  when freed, from the process's start (``GLIBC_TUNABLES``), and MKL keeps no buffers
  of its own between calls (``MKL_DISABLE_FAST_MM``), so resident memory follows the
  live tensors (slower; for measuring memory).
- ``default``: the C library's own behaviour.

The launcher's side (:func:`preload`) is torch-free; the worker's side
(:func:`tune_allocator`) says what is in effect, which the run records.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

from dmlbench.errors import SpecError

# jemalloc's settings (its MALLOC_CONF): keep freed pages for reuse (no decay to the
# kernel, neither dirty nor muzzy), and give every large block an arena of its own so
# that blocks of any size are kept alike. No background thread: nothing is purged, and a
# thread would not survive the fork server's fork.
JEMALLOC_CONF = "oversize_threshold:1,dirty_decay_ms:-1,muzzy_decay_ms:-1,metadata_thp:auto"
JEMALLOC_ENV = "DMLBENCH_JEMALLOC"  # a library path, where it is not the system's
JEMALLOC_INSTALL = "Debian/Ubuntu: apt-get install libjemalloc2"

# glibc's mallopt parameters (malloc.h) and the values a tuned allocator sets: blocks up
# to glibc's largest mmap threshold come from the heap, and up to 1 GiB freed at its top
# stays there instead of going back to the kernel
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's maximum on 64-bit machines
TRIM_THRESHOLD = 2**30
TUNED = "tuned (glibc keeps freed memory: mmap threshold 32 MiB, trim threshold 1 GiB)"
# returning: every block of a page or more is mapped on its own and unmapped when freed,
# and the heap's free top goes back too. At glibc's default 128 KiB the heap kept the
# smaller blocks a step frees: on digits-mlp (a 37.5 KiB model) up to 0.5 MiB resident
# that no tensor held (benchmarks/memory_tasks.py --widths)
RETURN_THRESHOLD = 4096
RETURNING = "returning (glibc gives back every block of 4 KiB or more when freed)"
# ... and from the process's start, as glibc's tunables, read when a process starts (the
# fork server's start, which its workers inherit). Set later (mallopt), a threshold only
# decides how the heap grows: glibc first serves a block from the heap's free holes, and
# the imports before it leave the heap about 100 MB of them, so a step's tensors landed
# there and their pages stayed resident when freed. On digits-mlp with a hidden layer of
# 512, a DDP worker's malloc'd bytes grew 605 KiB over the linear model's (its tensors:
# 581 KiB predicted), its resident memory 1.1 MiB. No top pad: glibc would otherwise
# grow the heap 128 KiB at a time and keep that much free at its top for the next block.
RETURNING_TUNABLES = ":".join(
    f"glibc.malloc.{name}={value}"
    for name, value in (
        ("mmap_threshold", RETURN_THRESHOLD),
        ("trim_threshold", RETURN_THRESHOLD),
        ("top_pad", 0),
    )
)
# MKL's own memory manager keeps the buffers its routines (a Linear's GEMM) allocate, for
# the next call, whatever glibc's thresholds: 60-100 KiB on digits-mlp's two layers
# (nothing on its linear model). Read where MKL first allocates, so it is in the workers'
# environment from their start.
MKL_KEEPS_NOTHING = {"MKL_DISABLE_FAST_MM": "1"}


def find_jemalloc() -> str | None:
    """jemalloc's shared library: ``DMLBENCH_JEMALLOC`` (a path), else the system's;
    ``None`` where it is not found. Refused in one line (SpecError) where the named
    one does not preload."""
    named = os.environ.get(JEMALLOC_ENV, "").strip()
    if named:
        path = Path(named)
        if not path.is_file():
            raise SpecError(f"{JEMALLOC_ENV}={named!r} is not a file: name jemalloc's library")
        if any(c.isspace() or c == ":" for c in str(path.resolve())):  # LD_PRELOAD's separators
            raise SpecError(
                f"{JEMALLOC_ENV}={named!r}: LD_PRELOAD cannot hold a path with spaces or "
                "colons; link the library from a plain path"
            )
        if not _preloads(str(path.resolve())):
            raise SpecError(f"{JEMALLOC_ENV}={named!r} does not preload as jemalloc")
        return str(path.resolve())
    found = ctypes.util.find_library("jemalloc")  # the linker's cache: a name it finds
    return found if found and _preloads(found) else None


@functools.cache
def _preloads(library: str) -> bool:
    """Whether a process started with ``library`` preloaded runs on jemalloc: asked of a
    bare Python (30 ms), since jemalloc cannot be loaded into a running process that
    holds thread-local storage, as torch does."""
    probe = "import ctypes, sys; sys.exit(0 if hasattr(ctypes.CDLL(None), 'mallctl') else 1)"
    env = {**os.environ, "LD_PRELOAD": library}
    try:
        done = subprocess.run(
            [sys.executable, "-S", "-c", probe], env=env, capture_output=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def preload(setting: str) -> tuple[dict[str, str], str | None]:
    """The environment the workers start in for ``setting`` (jemalloc's library and its
    settings; for ``returning``, glibc's thresholds as tunables, after any the user set,
    and MKL told to keep no buffers; else nothing), and a line for the user where
    jemalloc is wanted but absent."""
    if setting == "returning":
        earlier = os.environ.get("GLIBC_TUNABLES", "").strip(":")
        tunables = f"{earlier}:{RETURNING_TUNABLES}" if earlier else RETURNING_TUNABLES
        return {"GLIBC_TUNABLES": tunables, **MKL_KEEPS_NOTHING}, None
    if setting != "jemalloc":
        return {}, None
    if platform.system() != "Linux":
        return (
            {},
            "cpu_allocator=jemalloc is preloaded on Linux only: the workers use the C "
            "library's allocator",
        )
    library = find_jemalloc()
    if library is None:
        return {}, (
            f"jemalloc not found ({JEMALLOC_INSTALL}, or set {JEMALLOC_ENV}): the workers "
            "use glibc with its thresholds tuned (cpu_allocator=tuned)"
        )
    earlier = os.environ.get("LD_PRELOAD", "").strip()
    return {
        "LD_PRELOAD": f"{library} {earlier}".strip(),
        "MALLOC_CONF": JEMALLOC_CONF,
    }, None


def jemalloc_version() -> str | None:
    """jemalloc's version where it serves this process's allocations, else ``None``."""
    try:
        mallctl = ctypes.CDLL(None).mallctl
    except AttributeError:
        return None
    version, size = ctypes.c_char_p(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_char_p))
    if mallctl(b"version", ctypes.byref(version), ctypes.byref(size), None, 0) != 0:
        return "unknown version"
    return (version.value or b"").decode(errors="replace").split("-")[0]


@functools.cache
def on_glibc() -> bool:
    """Whether this is Linux with glibc, whose ``mallopt`` and ``malloc_trim`` the
    settings below call (``platform.libc_ver`` reads the interpreter's file: once)."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def tune_allocator(setting: str) -> str:
    """Apply the run's ``cpu_allocator`` setting to this process; returns what is in
    effect. ``jemalloc`` is in effect where the launcher preloaded it; without it, the
    process falls back to ``tuned``. ``tuned`` on glibc fixes its mmap and trim
    thresholds high, so a step's freed tensors are reused by the next step instead of
    being returned to the kernel and faulted in again, whatever the process did before;
    the settings last for the process. ``returning`` fixes them low instead, as the
    launcher's tunables did from the process's start (:func:`preload`; only they keep
    blocks out of the heap's earlier holes): every block of a page or more goes back to
    the kernel when freed, so resident memory follows the live tensors. Elsewhere, and
    for ``default``, the C library's own behaviour stays."""
    version = jemalloc_version()
    if version is not None:  # it serves every malloc: glibc's thresholds would do nothing
        kept = (
            "keeps freed memory"
            if os.environ.get("MALLOC_CONF") == JEMALLOC_CONF
            else (f"MALLOC_CONF={os.environ.get('MALLOC_CONF', '')!r}")
        )
        return f"jemalloc {version} ({kept})"
    fallback = ""
    if setting == "jemalloc":
        setting, fallback = "tuned", " in place of jemalloc, which was not preloaded"
    if setting not in ("tuned", "returning"):
        return "default"
    if not on_glibc():
        return "default (the C library is not glibc)"
    libc = ctypes.CDLL(None)
    low = setting == "returning"
    answers = [
        libc.mallopt(M_MMAP_THRESHOLD, RETURN_THRESHOLD if low else MMAP_THRESHOLD),
        libc.mallopt(M_TRIM_THRESHOLD, RETURN_THRESHOLD if low else TRIM_THRESHOLD),
        *([libc.mallopt(M_TOP_PAD, 0)] if low else []),
    ]
    if set(answers) != {1}:
        return "default (glibc refused the thresholds)"
    return RETURNING if low else TUNED + fallback


def release_free_heap() -> bool:
    """Give the kernel every whole page glibc holds free (``malloc_trim(0)``), so that
    the process's resident memory read next is what it uses, not what it happened to
    free before; True where it did. The imports a run makes before its start reading
    leave the heap in different shapes: DDP's left about 1.3 MiB free that the model's
    first allocations took back, ZeRO's almost none, so a DDP worker read 1.3 MiB less
    than a ZeRO-1 worker building the same model (BENCHMARKS.md, "Memory predicted on
    every task's default configuration"). A no-op under jemalloc, off glibc, and where
    the call fails."""
    if jemalloc_version() is not None or not on_glibc():
        return False
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True
