"""Values from users that reach a file name, a job script or a message, kept as data.

- :func:`path_component`: an id that becomes a folder or file name (``--rdzv-id``, the
  run id of a multi-node job) is one path component of a safe alphabet, so it cannot
  put a run folder outside the store (``--rdzv-id ../../x``).
- :func:`file_stem`: a free-form name (a sweep's ``name:``, which may come from a
  hostile file) mapped to a safe file name, for the files dmlbench names after it.
- :func:`one_line`: a value that goes into one line of a generated file (an
  ``#SBATCH`` directive) holds no line break or other control character.
- :func:`shorten`: what an error message echoes of a value, cut to a readable length.
- :func:`comma_list`: the items of a comma-separated option (``--network 10gbit, wan``).
- :func:`first_few`: the first of many names a message lists (``a, b, c, …``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dmlbench.errors import DmlbenchError

MAX_ID = 128
# a letter or digit first: never "", "." or ".."; no "/" anywhere
SAFE_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID - 1}}}")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ECHO_LIMIT = 120


def path_component(value: str, what: str) -> str:
    """``value`` if it is a safe single path component; otherwise one line saying so."""
    if not SAFE_ID.fullmatch(value):
        raise DmlbenchError(
            f"{what} {shorten(value)!r} becomes a folder name: use letters, "
            f"digits, '.', '_' and '-', starting with a letter or digit, "
            f"at most {MAX_ID} characters"
        )
    return value


def file_stem(name: str, fallback: str = "dmlbench") -> str:
    """``name`` as a safe file name stem: other characters become '-'."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:MAX_ID]
    return stem or fallback


def one_line(value: str, what: str) -> str:
    """``value`` if it holds no line break or other control character."""
    if CONTROL.search(value):
        raise DmlbenchError(
            f"{what} {shorten(value)!r} holds a line break or another "
            "control character; give it on one line"
        )
    return value


def comma_list(text: str) -> list[str]:
    """``"a, b,,c"`` → ``["a", "b", "c"]``: each item stripped, empty ones dropped."""
    return [item for part in text.split(",") if (item := part.strip())]


def first_few(items: Sequence[str], most: int = 3) -> str:
    """``a, b, c, …``: the first ``most`` items, and an ellipsis where there are more."""
    return ", ".join(items[:most]) + (", …" if len(items) > most else "")


def shorten(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"
