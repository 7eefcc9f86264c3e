"""Machine-wide CPU use from /proc/stat, for benchmarks.

XDP and tc programs run in softirq context, not in any process, so the busy
time of the whole machine is what measures the cost of the fast path.
"""

from __future__ import annotations

import os


def sample() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs (busy = neither idle nor iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    total = sum(fields[:8])  # guest time is already counted in user
    return total - fields[3] - fields[4], total


def busy_cores(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Average busy CPUs between two samples (0 .. number of CPUs)."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return round(busy / total * (os.cpu_count() or 1), 2) if total > 0 else None
