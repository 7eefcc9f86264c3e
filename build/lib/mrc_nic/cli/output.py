"""Terminal output: one place that decides colours, tables, JSON and errors.

Colour and widths come from rich, which turns colour off when stdout is not
a TTY; tables then degrade to plain text. JSON goes straight to stdout with
stable key order, for programs.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Piped output is for logs and tests: wide enough that no name is cut.
_PIPE_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200
console = Console(highlight=False, width=_PIPE_WIDTH)
err_console = Console(stderr=True, highlight=False)


def error(message: str) -> None:
    # The message is plain text (paths, "[fabric]"): never read it as markup.
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)


def info(message: str) -> None:
    console.print(message, soft_wrap=True)


def success(message: str) -> None:
    console.print(f"[green]{message}[/]", soft_wrap=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def table(title: str | None, columns: list[str], rows: list[list[Any]], **kwargs: Any) -> None:
    t = Table(title=title, title_justify="left", header_style="bold", **kwargs)
    for col in columns:
        # A leading '#' marks a numeric column: right-aligned, the '#' not shown.
        justify = "right" if col.startswith("#") else "left"
        t.add_column(col.lstrip("#"), justify=justify, no_wrap=True)
    for row in rows:
        t.add_row(*[("" if v is None else str(v)) for v in row])
    console.print(t)


def human_count(n: int) -> str:
    for unit, div in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def human_bytes(n: int) -> str:
    for unit, div in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n}B"


DROP_FIELDS = ("drop_blackhole", "drop_loss", "drop_buffer")


def counter_cells(first: dict, second: dict) -> list[str]:
    """Table cells for two directions of BPF port counters: pkts and bytes of
    each, then their drops of every reason together."""
    drops = sum(c[f] for c in (first, second) for f in DROP_FIELDS)
    return [
        human_count(first["pkts"]),
        human_bytes(first["bytes"]),
        human_count(second["pkts"]),
        human_bytes(second["bytes"]),
        human_count(drops),
    ]
