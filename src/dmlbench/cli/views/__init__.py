"""The terminal views of the `dmlbench` commands (rich tables, progress bars)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table


def figures_table(title: str, caption: str | None = None, **options: Any) -> Table:
    """A table of figures as every command prints them: a rule under the header and one
    space between columns, so that ten columns of numbers fit 80 (``dmlbench … > file``
    renders 80). Where a row still would not fit, rich narrows the columns that may
    wrap first: give text columns ``overflow="fold"`` and figures ``no_wrap``."""
    return Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=0,  # the box draws one space between columns
        show_edge=False,
        **options,
    )
