"""What an expert adds to a plain PyTorch loop on a CPU: jemalloc, preloaded and told to
keep what it frees, as Intel's PyTorch CPU guides recommend (issue 57's contender).

The step benchmarks (``imagenet_step.py``, ``gpt_step.py``, ``single_node.py``) run
their plain loop once more in this environment, as ``plain-jemalloc``. The settings are
the issue's, measured there: dmlbench's own (``dmlbench.train.allocator``) differ in
having no background thread, which its fork server could not pass on to its workers.
"""

from __future__ import annotations

import json
import os
import sys

MALLOC_CONF = (
    "oversize_threshold:1,background_thread:true,metadata_thp:auto,"
    "dirty_decay_ms:-1,muzzy_decay_ms:-1"
)


def jemalloc_env() -> dict[str, str]:
    """This process's environment with jemalloc preloaded; exits in one line without it."""
    from dmlbench.train.allocator import JEMALLOC_INSTALL, find_jemalloc

    library = find_jemalloc()
    if library is None:
        sys.exit(f"the plain-jemalloc contender needs jemalloc: {JEMALLOC_INSTALL}")
    return {**os.environ, "LD_PRELOAD": library, "MALLOC_CONF": MALLOC_CONF}


def last_json(text: str) -> dict:
    """A contender's result: the last line it printed, as JSON."""
    return json.loads(text.strip().splitlines()[-1])


def plain_result(text: str, env: dict[str, str] | None) -> dict:
    """A plain loop's result, once it shows the loop ran on the allocator asked for: its
    ``jemalloc`` (whether jemalloc served it, read there from its global ``mallctl``)
    against whether ``env`` preloaded it."""
    got = last_json(text)
    served = got.pop("jemalloc", None)
    if served is not None and served != (env is not None):
        sys.exit(f"the plain loop ran on jemalloc: {served}, not as asked")
    return got
