"""Drawing `stats --watch` frames: live on a terminal, as plain text otherwise.

On a terminal, rich.live.Live redraws in place once per snapshot (auto
refresh off), frames sized one line short of the terminal so that nothing
scrolls, and keys 1-5 switch the view and q quits while we wait for the
next snapshot. Piped, every frame is printed in full, one after the other.
"""

from __future__ import annotations

import contextlib
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.live import Live

from mrc_nic.kernel.fdwait import readable
from mrc_nic.observe.sparkline import History
from mrc_nic.observe.watch import VIEWS, render

KEYS = dict(zip("12345", VIEWS, strict=True))  # 1 plane, 2 path, 3 ev, 4 qp, 5 link


class KeyReader:
    """Single keys from a terminal (cbreak mode) while waiting for the next frame."""

    def __init__(self) -> None:
        self.view: str | None = None
        self.quit = False
        self._saved = None

    def __enter__(self) -> KeyReader:
        with contextlib.suppress(termios.error, OSError):
            self._saved = termios.tcgetattr(sys.stdin.fileno())
            tty.setcbreak(sys.stdin.fileno())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, taking keys meanwhile; a view key or q ends the wait."""
        deadline = time.monotonic() + seconds
        while not self.quit and (left := deadline - time.monotonic()) > 0:
            if not readable([sys.stdin], left):
                return
            key = sys.stdin.read(1)
            if key in ("q", "Q", ""):
                self.quit = True
            elif key in KEYS:
                self.view = KEYS[key]
                return


def run(
    frames: Callable[[Callable[[float], None]], Iterator[dict]],
    view: str,
    console: Console,
    *,
    on_view: Callable[[str], None] = lambda view: None,
) -> None:
    """Draw every snapshot of frames(sleep): live on a terminal, else as text.

    frames gets the sleep to wait with between snapshots, so that keys are
    read while waiting. on_view(view) is told when a key changes the view.
    """
    history = History()
    if not console.is_terminal:
        for snap in frames(time.sleep):
            history.add(snap)
            console.print(render(snap, history, view, console.width, None))
            console.print()
        return
    keys_on = sys.stdin.isatty()
    with (
        KeyReader() if keys_on else contextlib.nullcontext() as keys,
        Live(console=console, auto_refresh=False, screen=False, transient=False) as live,
    ):
        for snap in frames(keys.sleep if keys else time.sleep):
            if keys and keys.view and keys.view != view:
                view = keys.view
                on_view(view)
            history.add(snap)
            # One line to spare: Live's cursor sits below the frame.
            frame = render(snap, history, view, console.width, console.height - 1, keys=keys_on)
            live.update(frame, refresh=True)
            if keys and keys.quit:
                break
