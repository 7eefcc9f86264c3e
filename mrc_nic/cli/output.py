"""Terminal output: one place that decides colours, tables, JSON and errors.

Colour is on when the stream is a terminal (NO_COLOR and TERM=dumb turn it
off), as rich decides it. JSON goes straight to stdout with
stable key order, for programs.

rich costs about 30 ms to import and more to render, which the one-line
answers of short commands (fail, heal, errors) must not pay: success(),
error() and table() write their lines themselves, coloured when the stream
is a terminal, and rich is imported on the first use of info() or
`console` (the live views).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

GREEN, BOLD_RED, RESET = "\x1b[32m", "\x1b[1;31m", "\x1b[0m"


@functools.cache
def _consoles() -> tuple[Console, Console]:
    from rich.console import Console

    # Piped output is for logs and tests: wide enough that no name is cut.
    pipe_width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200
    return Console(highlight=False, width=pipe_width), Console(stderr=True, highlight=False)


def __getattr__(name: str) -> Any:
    # output.console and output.err_console, made on first use (PEP 562).
    if name == "console":
        return _consoles()[0]
    if name == "err_console":
        return _consoles()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _colour(stream: Any) -> bool:
    """Colour as rich decides it, in short: a terminal, unless NO_COLOR or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", None) and stream.isatty())


def _line(stream: Any, text: str, style: str) -> None:
    stream.write(f"{style}{text}{RESET}\n" if _colour(stream) else f"{text}\n")
    stream.flush()


def error(message: str) -> None:
    # The message is plain text (paths, "[fabric]"): written as it is, never markup.
    prefix = f"{BOLD_RED}error:{RESET}" if _colour(sys.stderr) else "error:"
    sys.stderr.write(f"{prefix} {message}\n")
    sys.stderr.flush()


def success(message: str) -> None:
    """A line of plain text (never markup), green on a terminal."""
    _line(sys.stdout, message, GREEN)


def warn(message: str) -> None:
    """A warning line on stderr (plain text), bold on a terminal."""
    prefix = f"{BOLD_RED}warning:{RESET}" if _colour(sys.stderr) else "warning:"
    sys.stderr.write(f"{prefix} {message}\n")
    sys.stderr.flush()


def plain(message: str) -> None:
    """A line of plain text (never markup)."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def info(message: str) -> None:
    """A line that may hold rich markup ("[bold]lab[/]")."""
    _consoles()[0].print(message, soft_wrap=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


class Styled(str):
    """A table cell shown in a colour on a terminal: output.styled("down", "red")."""

    style: str


def styled(text: str, style: str) -> Styled:
    cell = Styled(text)
    cell.style = style
    return cell


_STYLES = {"green": "\x1b[32m", "red": "\x1b[31m", "bold": "\x1b[1m"}


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """Columns aligned with spaces under a bold header, the title above.

    Written here, not with rich: rich's tables cost about 40 ms for the 32
    rows of `status`, a third of what a short command may take. Cells are
    plain text (never markup); styled() colours one on a terminal.
    """
    # A leading '#' marks a numeric column: right-aligned, the '#' not shown.
    heads = [c.lstrip("#") for c in columns]
    right = [c.startswith("#") for c in columns]
    cells = [["" if v is None else v if isinstance(v, str) else str(v) for v in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(heads)]
    colour = _colour(sys.stdout)

    def line(values: list[str], row_style: str | None = None) -> str:
        parts = []
        for value, width, rjust in zip(values, widths, right, strict=True):
            text = value.rjust(width) if rjust else value.ljust(width)
            style = row_style or getattr(value, "style", None)
            parts.append(f"{_STYLES[style]}{text}{RESET}" if colour and style else text)
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out.append(line(heads, "bold"))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in cells)
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


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


def fidelity_advice(fid: dict | None, topo=None) -> None:
    """When the CPU bound a run, the one line on what to change (stderr)."""
    from mrc_nic.lab import doctor_store
    from mrc_nic.observe import fidelity

    tip = fidelity.advice(fid, topo, doctor_store.load())
    if tip:
        warn(tip)
