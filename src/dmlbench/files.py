"""Reading the YAML and TOML files users give: one loader, one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlbench.errors import SpecError


def load_mapping_file(path: Path, what: str, holds: str) -> dict[str, Any]:
    """Read ``path`` (TOML by suffix, YAML otherwise) and require a mapping.

    ``what`` names the file in errors ("config file", "price table"); ``holds`` says
    what the mapping should contain.
    """
    import tomllib

    import yaml

    if not path.is_file():
        raise SpecError(f"{what} {path} does not exist")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(path.read_text())
        else:
            data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as error:
        raise SpecError(f"{what} {path} is not valid: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{what} {path} must hold a mapping of {holds}")
    return data
