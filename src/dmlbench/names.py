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
- :func:`duration_seconds`: a time given as seconds, with a unit (``8h``) or H:MM:SS.
"""

from __future__ import annotations

import math
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


# a duration's units, in seconds: `90s`, `30min`, `1.5h`, `2d`, `8 hours`
DURATION_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
}


def duration_seconds(text: str) -> float:
    """Seconds from ``3600``, ``90s``, ``30min``, ``1.5h``, ``2d``, or ``2:00:00`` (H:MM:SS,
    or MM:SS): a deadline is said in hours, and was refused as not a number. A
    ValueError says why not (a typer ``parser=`` turns it into the option's error)."""
    words = text.strip().lower()
    found = re.fullmatch(r"((?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([a-df-z][a-z]*)?", words)
    if found and (found[2] or "s") in DURATION_UNITS:
        seconds = float(found[1]) * DURATION_UNITS[found[2] or "s"]
    elif re.fullmatch(r"\d+(:\d{1,2}){1,2}", words) and all(
        int(part) < 60 for part in words.split(":")[1:]
    ):
        seconds = float(sum(int(part) * 60**i for i, part in enumerate(words.split(":")[::-1])))
    else:
        raise ValueError(
            f"{shorten(text)!r} is no duration: give seconds (3600), a number with a unit "
            "(90s, 30min, 1.5h, 2d) or H:MM:SS"
        )
    if not math.isfinite(seconds):
        raise ValueError(f"{shorten(text)!r} is no finite duration")
    return seconds
