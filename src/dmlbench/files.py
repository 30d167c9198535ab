"""Reading the YAML and TOML files users give: one loader, bounded, one-line errors.

A spec or sweep file may come from anyone, so reading one is bounded: at most
``MAX_FILE_BYTES`` of text, ``MAX_DEPTH`` levels of nesting, and ``MAX_VALUES`` values
once YAML's anchors and aliases are expanded (a 544-byte "billion laughs" file expands
to 10⁹ values and would tie up validation for minutes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlbench.errors import SpecError

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
