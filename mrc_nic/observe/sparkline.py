"""Sparklines of each plane's delivered rate over the last 30 s (`stats --watch`).

History keeps the rates of the recent snapshots; sparkline() draws values as
unicode blocks, one character each; Spark is a table cell that draws as
many characters as its column turns out to be wide, so a bigger terminal
gets a finer line.
"""

from __future__ import annotations

from collections import deque

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

SPARK_SECONDS = 30.0
BLOCKS = "▁▂▃▄▅▆▇█"


class History:
    """Each plane's delivered bit rate over the last `seconds`, for sparklines."""

    def __init__(self, seconds: float = SPARK_SECONDS) -> None:
        self.seconds = seconds
        self._points: deque[tuple[float, dict[int, float]]] = deque()

    def add(self, snap: dict) -> None:
        rates = {}
        for p in snap["planes"]:
            bps = ((p["rates"] or {}).get("delivered") or {}).get("bits_per_s")
            if bps is not None:
                rates[p["plane"]] = bps
        if not rates:
            return
        now = snap["monotonic_ns"] / 1e9
        self._points.append((now, rates))
        while self._points and self._points[0][0] < now - self.seconds:
            self._points.popleft()

    def series(self, plane: int, now: float, columns: int) -> list[float | None]:
        """`columns` buckets over the last `seconds` up to now, oldest first: the
        mean rate in each. A sample's rate held since the sample before it, so a
        bucket between two samples takes the later one's; None before the first."""
        sums = [0.0] * columns
        counts = [0] * columns
        start = now - self.seconds
        for t, rates in self._points:
            if plane in rates and t >= start:
                i = min(int((t - start) / self.seconds * columns), columns - 1)
                sums[i] += rates[plane]
                counts[i] += 1
        out = [s / n if n else None for s, n in zip(sums, counts, strict=True)]
        later = None
        first = next((i for i, v in enumerate(out) if v is not None), columns)
        for i in range(columns - 1, first, -1):
            if out[i] is None:
                out[i] = later
            else:
                later = out[i]
        return out

    def top(self) -> float:
        return max((v for _, rates in self._points for v in rates.values()), default=0.0)


def sparkline(values: list[float | None], top: float) -> str:
    """One character per value: blank for no sample; the lowest block for
    zero (a dead plane's line drops to a floor, it does not vanish); else a
    block of height value/top, at least the second lowest so a trickle
    stands apart from zero."""
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif v <= 0 or top <= 0:
            out.append(BLOCKS[0])
        else:
            rise = len(BLOCKS) - 1
            out.append(BLOCKS[1 + min(int(v / top * rise), rise - 1)])
    return "".join(out)


class Spark:
    """A plane's sparkline, as wide as its table cell turns out (8 to 60 columns)."""

    MIN, MAX = 8, 2 * int(SPARK_SECONDS)

    def __init__(self, history: History, plane: int, now: float, top: float) -> None:
        self.history, self.plane, self.now, self.top = history, plane, now, top

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.MIN, min(self.MAX, options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, min(self.MAX, options.max_width))
        yield Text(sparkline(self.history.series(self.plane, self.now, width), self.top), "cyan")
