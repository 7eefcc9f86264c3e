"""A bounded stream of snapshots at a fixed interval, each with rates.

Snapshots are taken on a fixed grid (start + k x interval), not interval
after the previous one ended, so reading time does not stretch the period;
a reader that falls behind skips ahead instead of bursting to catch up.
The stream ends after `count` snapshots or once the next one would be past
`duration` seconds, whichever comes first; with neither it runs until the
caller stops iterating (Ctrl-C).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from mrc_nic.observe.rates import add_rates

MIN_INTERVAL = 0.01
EARLY = 0.001  # a sleep that ends this much before its time was cut short


def check_bounds(interval: float, count: int | None, duration: float | None) -> None:
    """ValueError with a one-line reason when the bounds make no sense."""
    if not interval >= MIN_INTERVAL:
        raise ValueError(f"--interval must be at least {MIN_INTERVAL}s, got {interval}")
    if count is not None and count < 1:
        raise ValueError(f"--count must be at least 1, got {count}")
    if duration is not None and not duration >= 0:
        raise ValueError(f"--duration must not be negative, got {duration}")


def snapshots(
    take: Callable[[], dict],
    interval: float,
    *,
    count: int | None = None,
    duration: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict]:
    """take() every interval seconds; each result after the first gets rates
    from the one before (rates.add_rates)."""
    check_bounds(interval, count, duration)
    start = next_at = clock()
    prev = None
    taken = 0
    while True:
        snap = take()
        if prev is not None:
            add_rates(prev, snap)
        yield snap
        prev, taken = snap, taken + 1
        if count is not None and taken >= count:
            return
        next_at += interval
        if duration is not None and next_at - start > duration + 1e-9:
            return
        now = clock()
        if next_at > now:
            sleep(next_at - now)
            now = clock()
            if now < next_at - EARLY:  # woken early (a key in --watch): a new grid from here
                next_at = now
        else:
            next_at = now  # behind: the next one now, then back on a grid from here
