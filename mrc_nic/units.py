"""Units: sizes, rates, durations and queue thresholds, read from text and written back.

One module for every place that reads a quantity a person typed: topology
files (mrc_nic.lab.topology), the CLI's options, rdma_write's transfer sizes
and the examples' arguments. It imports nothing of mrc_nic, so the shortest
command can use it.

Sizes take SI units (kb = 1000 bytes) and binary ones (kib = 1024), any case
("2TiB", "2tib"). The one-letter forms mean what the context counts in:
queue thresholds decimal ("20k" = 20000 bytes, as tc does), transfer sizes
binary ("1G" = 1 GiB, as perftest does).
"""

from __future__ import annotations

import re
from typing import NamedTuple

RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
QUEUE_SIZE_UNITS = {**SIZE_UNITS, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
TRANSFER_SIZE_UNITS = {**SIZE_UNITS, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
TIME_UNITS_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}
DURATION_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}
TRANSFER_MAX = 2**40  # one transfer (a write, an example's buffer): at most 1 TiB
# Thresholds and buffers the BPF queue twin can hold (switch_port.h SP_Q_BYTES_MAX).
QUEUE_BYTES_MAX = 1 << 30


def parse_rate(value: object) -> int | None:
    """'1gbit' -> 10**9 bits/s; 'none', 0 -> None (no cap)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value or None
    if not isinstance(value, str):
        raise ValueError('must be a string such as "1gbit"')
    text = value.strip().lower()
    if text in ("none", "unlimited", "0"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text)
    if not m or m.group(2) not in RATE_UNITS:
        units = ", ".join(RATE_UNITS)
        raise ValueError(f'cannot read {value!r}: use a number and a unit ({units}) or "none"')
    return round(float(m.group(1)) * RATE_UNITS[m.group(2)])


def format_rate(bps: int | None) -> str:
    """10**9 -> '1gbit' (the largest unit that divides it); None -> 'none'."""
    if bps is None:
        return "none"
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bps % RATE_UNITS[unit] == 0:
            return f"{bps // RATE_UNITS[unit]}{unit}"
    return f"{bps}bit"


def parse_size(value: object, units: dict[str, int] = SIZE_UNITS) -> int:
    """'256KiB' -> 262144 bytes, '1.5MiB' -> 1572864; a bare number is bytes.
    units: lower-case unit -> bytes (SIZE_UNITS by default). A fraction
    must come to a whole number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ValueError('must be a size such as "256KiB"')
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", value.strip())
    unit = (m.group(2) or "b").lower() if m else ""
    if not m or unit not in units:
        raise ValueError(f"cannot read {value!r}: use a number and a unit ({', '.join(units)})")
    if "." not in m.group(1):
        return int(m.group(1)) * units[unit]
    from fractions import Fraction  # only for fractions: a short command reads whole sizes

    size = Fraction(m.group(1)) * units[unit]  # exact: 1.1 GiB is not rounded through a float
    if size.denominator != 1:
        raise ValueError(f"{value!r} is {float(size):g} bytes: a size is a whole number of bytes")
    return int(size)


def parse_transfer_size(text: str, low: int = 1, high: int = TRANSFER_MAX) -> int:
    """'1G', '64MiB', '1.5G', '4096' -> bytes (one letter: binary), low..high."""
    value = parse_size(text, TRANSFER_SIZE_UNITS)
    if value < low:
        raise ValueError(f"size must be at least {low} byte{'s' * (low != 1)}, not {text!r}")
    if value > high:
        raise ValueError(
            f"{text!r} is {format_size(value)}, over the limit of {format_size(high)} per transfer"
        )
    return value


def format_size(nbytes: int) -> str:
    """1099511627776 -> '1 TiB'; what no binary unit near its size divides,
    in bytes: 10**12 -> '1,000,000,000,000 bytes'."""
    for unit, div in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= div:
            return f"{nbytes // div} {unit}" if nbytes % div == 0 else f"{nbytes:,} bytes"
    return f"{nbytes} bytes"


def parse_time_ns(value: object) -> int:
    """'100us', '0.1ms', '50000ns' -> nanoseconds (a unit is required)."""
    text = value.strip().lower() if isinstance(value, str) else ""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ns|us|ms|s)", text)
    if not m:
        raise ValueError(f"cannot read {value!r}: use a number and a unit (ns, us, ms, s)")
    return round(float(m.group(1)) * TIME_UNITS_NS[m.group(2)])


def parse_duration(text: str) -> float:
    """'2s', '500ms', '100us', '1.5', '1m' -> seconds (a bare number is seconds)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m)?\s*", text)
    if not m:
        raise ValueError(f"cannot read duration {text!r}: use e.g. 2s, 500ms, 1m")
    return float(m.group(1)) * DURATION_UNITS_S[m.group(2)]


class Threshold(NamedTuple):
    """A queue threshold: a fraction of a port's BDP, or a number of bytes."""

    bdp: float | None = None
    nbytes: int | None = None

    def resolve(self, bdp_bytes: int) -> int:
        """Bytes at a port whose BDP is bdp_bytes."""
        if self.nbytes is not None:
            return self.nbytes
        return round((self.bdp or 0.0) * bdp_bytes)

    def __str__(self) -> str:
        return f"{self.bdp:g}bdp" if self.nbytes is None else f"{self.nbytes}B"


_THRESHOLD_HELP = (
    'use a fraction of the BDP (0.2, "0.2bdp") or a size with a unit ("20KB", "20k"; '
    f"units: {', '.join(QUEUE_SIZE_UNITS)})"
)


def _threshold_bytes(value: object, text: str) -> Threshold:
    try:
        nbytes = parse_size(text, QUEUE_SIZE_UNITS)
    except ValueError:
        raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}") from None
    if nbytes > QUEUE_BYTES_MAX:
        raise ValueError(
            f"{value!r} is over the limit of {format_size(QUEUE_BYTES_MAX)} "
            "(the most a switch queue's BPF twin holds)"
        )
    return Threshold(nbytes=nbytes)


def parse_threshold(value: object, *, allow_off: bool = False) -> Threshold | None:
    """0.2 or "0.2bdp" -> a fraction of the BDP; "20KB", "20k", "20000" -> bytes;
    "off" (allow_off) -> None."""
    if isinstance(value, bool):
        raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}")
    if isinstance(value, int | float):
        fraction = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if allow_off and text in ("off", "none"):
            return None
        if not text.endswith("bdp"):
            return _threshold_bytes(value, text)
        try:
            fraction = float(text.removesuffix("bdp"))
        except ValueError:
            raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}") from None
    else:
        raise ValueError(f"cannot read {value!r}: {_THRESHOLD_HELP}")
    if not 0.0 <= fraction <= 1000.0:  # NaN fails too
        raise ValueError(
            f"a fraction of the BDP must be 0..1000, got {value!r} "
            '(a size needs a unit: "20KB", "20000b")'
        )
    return Threshold(bdp=fraction)
