"""The files users give and the files dmlbench writes for them: bounded, one-line errors.

Reading: a spec or sweep file may come from anyone, so reading one is bounded: at most
``MAX_FILE_BYTES`` of text, ``MAX_DEPTH`` levels of nesting, and ``MAX_VALUES`` values
once YAML's anchors and aliases are expanded (a 544-byte "billion laughs" file expands
to 10⁹ values and would tie up validation for minutes).

Any other file from outside (a run folder being imported, a corpus, a token cache's
metadata, a hardware profile) is read through :func:`read_bounded`: only a regular file
(a symbolic link is followed to one), opened without blocking, so a named pipe or a
device (``spec.json -> /dev/zero``) is refused in one line instead of hanging or
filling memory, and never more than the caller's bound.

Writing (reports, exports, figures, job files): :func:`write_file` writes a whole new
file beside the target and renames it into place, so a reader sees the old file or the
new one. The rename replaces whatever has that name, so it is done only over a regular
file or a free name: a device (``report --out /dev/full`` as root), a pipe, a socket, a
folder or a symbolic link (one planted in an export folder would be written through or
replaced) is refused in one line and left as it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dmlbench.errors import DmlbenchError, SpecError
from dmlbench.names import shorten

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

    try:
        text = read_bounded(path, MAX_FILE_BYTES, what, SpecError).decode()
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
        expanded_size(data)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SpecError(f"{what} {path} is not valid: {_parse_error(error)}") from None
    except RecursionError:
        raise SpecError(f"{what} {path} is nested too deeply") from None
    except ValueError as error:
        raise SpecError(f"{what} {path} is refused: {error}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{what} {path} must hold a mapping of {holds}")
    return data


def _parse_error(error: Exception) -> str:
    """What was wrong with a file, without echoing its content: a YAML error's problem and
    position, a TOML error's message (its position), a decode error's byte offset. A
    file given by mistake (``--hardware /etc/shadow``) must not be printed back."""
    import yaml

    if isinstance(error, yaml.MarkedYAMLError):
        where = error.problem_mark
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        return f"{error.problem or error.context or 'malformed YAML'}{at}"
    if isinstance(error, UnicodeDecodeError):
        return f"it is not UTF-8 text (byte {error.start:,})"
    return shorten(str(error).splitlines()[0])


class InputError(DmlbenchError):
    """A file from outside is not a regular file, or is larger than its reader's bound."""


def read_bounded(
    path: Path,
    limit: int,
    what: str = "file",
    error: type[DmlbenchError] = InputError,
) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (a symbolic link
    is followed). Anything else is refused in one line (``error``, naming ``what`` and
    the path) without blocking or reading it: a missing file, a folder, a named pipe
    (opened non-blocking, so its writer is never waited for), a device (``/dev/zero``
    would fill memory), a file over ``limit`` or one that grows past it while read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as failure:
        raise error(f"cannot read the {what} {path}: {failure.strerror}") from None
    try:
        found = os.fstat(fd)
        kind = _not_regular(found.st_mode)
        if kind:
            raise error(f"the {what} {path} is {kind}, not a regular file: give a file's path")
        if found.st_size > limit:
            raise error(f"the {what} {path} is {found.st_size:,} bytes; at most {limit:,} are read")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(limit + 1)
    except OSError as failure:
        raise error(f"cannot read the {what} {path}: {failure.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"the {what} {path} grew past {limit:,} bytes while it was read")
    return data


def check_input_file(
    path: Path, limit: int, what: str = "file", error: type[DmlbenchError] = InputError
) -> int:
    """The size of ``path`` if it is a regular file (a link followed) of at most ``limit``
    bytes, for readers that stream or map it themselves; one line otherwise."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as failure:
        raise error(f"cannot read the {what} {path}: {failure.strerror}") from None
    kind = _not_regular(found.st_mode)
    if kind:
        raise error(f"the {what} {path} is {kind}, not a regular file: give a file's path")
    if found.st_size > limit:
        raise error(f"the {what} {path} is {found.st_size:,} bytes; at most {limit:,} are read")
    return found.st_size


@contextlib.contextmanager
def locked(path: Path, what: str = "data folder") -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (made if missing) while the block runs: one
    process at a time prepares a shared folder (unpacks archives, tokenises a corpus);
    the others wait, then find it made. The kernel drops the lock when its holder dies,
    however it dies."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise DmlbenchError(f"cannot lock the {what} ({path}): {error.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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


def check_output_folder(path: Path, what: str = "output folder", *, make: bool = True) -> Path:
    """``path`` if it is a folder or a free name (made here unless ``make`` is false);
    otherwise one line."""
    if path.exists() and not path.is_dir():
        raise DmlbenchError(f"the {what} {path} is not a folder: give a folder's path")
    if not make:
        return path
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


def write_figure(figure: Any, path: Path, what: str = "figure", dpi: int = 200) -> Path:
    """A matplotlib figure as a PNG at exactly ``path``, through :func:`write_file`:
    matplotlib's own ``savefig(path)`` would write through a symbolic link, open a
    device, and add ``.png`` to a name without a suffix (``--png /dev/full`` made
    ``/dev/full.png``). Refused before drawing when the path is not writable."""
    import io

    check_output_file(path, what)
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=dpi)
    return write_file(path, image.getvalue(), what)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
