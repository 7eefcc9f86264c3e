"""CLOCK_MONOTONIC times in messages that cross machines.

A host process's times (a WRITE's completion, a step's deadline) are
CLOCK_MONOTONIC nanoseconds, which mean nothing on another machine. Between
machines they travel as wall-clock nanoseconds (a cluster's wall clocks are
synchronised; one box shares one): each end shifts the named fields by its
own wall-minus-monotonic offset on the way out and back on the way in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


def wall_minus_mono_ns() -> int:
    """What to add to a CLOCK_MONOTONIC time to make it wall-clock time, here."""
    return time.time_ns() - time.monotonic_ns()


def shift_clock(message: dict, keys: Sequence[str], by_ns: int) -> dict:
    """message with each integer field named in keys moved by by_ns."""
    if not any(k in message for k in keys):
        return message
    return {k: (v + by_ns if k in keys and isinstance(v, int) else v) for k, v in message.items()}


def mono_to_wall(message: dict, keys: Sequence[str]) -> dict:
    """This machine's CLOCK_MONOTONIC fields as wall-clock time (to send)."""
    return shift_clock(message, keys, wall_minus_mono_ns())


def wall_to_mono(message: dict, keys: Sequence[str]) -> dict:
    """Wall-clock fields received as this machine's CLOCK_MONOTONIC time."""
    return shift_clock(message, keys, -wall_minus_mono_ns())
