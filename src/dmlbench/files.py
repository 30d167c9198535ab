"""The files users give and the files dmlbench writes for them: bounded, one-line errors.

Reading: a spec or sweep file may come from anyone, so reading one is bounded: at most
``MAX_FILE_BYTES`` of text, ``MAX_DEPTH`` levels of nesting, and ``MAX_VALUES`` values
once YAML's anchors and aliases are expanded (a 544-byte "billion laughs" file expands
to 10⁹ values and would tie up validation for minutes).

Writing (reports, exports, figures, job files): :func:`write_file` writes a whole new
file beside the target and renames it into place, so a reader sees the old file or the
new one. The rename replaces whatever has that name, so it is done only over a regular
file or a free name: a device (``report --out /dev/full`` as root), a pipe, a socket, a
folder or a symbolic link (one planted in an export folder would be written through or
replaced) is refused in one line and left as it is.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from dmlbench.errors import DmlbenchError, SpecError

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000


def expanded_size(data: Any, limit: int = MAX_VALUES, depth_limit: int = MAX_DEPTH) -> int:
    """How many values ``data`` holds with every shared (aliased) part counted each time
    it appears, computed without expanding anything. Raises ``ValueError`` past ``limit``
    values or ``depth_limit`` levels, or for a structure that contains itself."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(node: Any, depth: int) -> int:
        if not isinstance(node, dict | list):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise ValueError("it refers to itself through an alias")
        if depth > depth_limit:
            raise ValueError(f"it is nested more than {depth_limit} levels deep")
        visiting.add(key)
        items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1
        for item in items:
            total += size(item, depth + 1)
            if total > limit:
                raise ValueError(f"it expands to more than {limit:,} values (YAML aliases?)")
        visiting.discard(key)
        sizes[key] = total
        return total

    return size(data, 0)


def load_mapping_file(path: Path, what: str, holds: str) -> dict[str, Any]:
    """Read ``path`` (TOML by suffix, YAML otherwise) and require a mapping.

    ``what`` names the file in errors ("config file", "price table"); ``holds`` says
    what the mapping should contain.
    """
    import tomllib

    import yaml

    if not path.is_file():
        raise SpecError(f"{what} {path} does not exist")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SpecError(
            f"{what} {path} is {path.stat().st_size:,} bytes; at most {MAX_FILE_BYTES:,}"
        )
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
        expanded_size(data)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SpecError(f"{what} {path} is not valid: {str(error).splitlines()[0]}") from None
    except RecursionError:
        raise SpecError(f"{what} {path} is nested too deeply") from None
    except ValueError as error:
        raise SpecError(f"{what} {path} is refused: {error}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{what} {path} must hold a mapping of {holds}")
    return data


def check_output_file(path: Path, what: str = "output file") -> Path:
    """``path`` if dmlbench may (re)place a file there: a regular file or a free name in a
    folder (made if missing); otherwise one line that says why and what to do."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    except OSError as error:
        raise DmlbenchError(f"cannot write the {what} {path}: {error.strerror}") from None
    if found is not None:
        kind = _not_regular(found.st_mode)
        if kind:
            raise DmlbenchError(
                f"the {what} {path} is {kind}; dmlbench writes only over "
                "regular files: give a new file's path"
            )
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise DmlbenchError(f"cannot write the {what} {path}: {parent} is not a folder")
    return path


def check_output_folder(path: Path, what: str = "output folder") -> Path:
    """``path`` if it is a folder or a free name (made here); otherwise one line."""
    if path.exists() and not path.is_dir():
        raise DmlbenchError(f"the {what} {path} is not a folder: give a folder's path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DmlbenchError(f"cannot make the {what} {path}: {error.strerror}") from None
    return path


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is, when it is not a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def write_file(
    path: Path, data: str | bytes, what: str = "output file", *, make_folder: bool = True
) -> Path:
    """Write ``data`` to ``path`` atomically (a new file renamed into place), only over a
    regular file or a free name (see the module's docstring); one line on failure.
    ``make_folder``: create the folder it goes in when missing (else refused)."""
    check_output_file(path, what)
    payload = data.encode() if isinstance(data, str) else data
    temporary: str | None = None
    try:
        if make_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
        with os.fdopen(handle, "wb") as out:
            out.write(payload)
        check_output_file(path, what)  # again: something may have taken the name since
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
        temporary = None
    except OSError as error:
        raise DmlbenchError(f"cannot write the {what} {path}: {error.strerror}") from None
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return path


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
