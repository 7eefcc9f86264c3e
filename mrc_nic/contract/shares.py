"""Shares: how much of a host's NIC one application session may hold.

Without them one program that allocates until refused holds all of a
host's NIC memory, QPs, CQs and PDs, and every other program (mrc-nic's own
`write` among them) is refused. Each session gets a share of each resource:
a fraction of the host's capacity or a number (bytes for memory). The lab
sets the defaults in its topology file's [tenants] section; a program may
ask for other shares when it opens its session (`mrc-nic exec --share`,
MRC_NIC_SHARE_<NAME>, or `verbs.Context(shares=...)`). A share is a guard
against a runaway program, not a wall against a hostile one: that wall is
who may open the lab's NICs at all (docs/api.md, "Running without root").

A share is written as a fraction (0.5, "50%") or an absolute amount (64;
"8MiB" for memory). The same parser serves the topology file, the
environment and the daemon.
"""

from __future__ import annotations

import dataclasses
import re

RESOURCES = ("memory", "qps", "cqs", "pds")
DEFAULT_FRACTION = 0.5  # half of each: room for another session and for mrc-nic's tools
# What every tenant (a user that is not root) together may hold of a host's
# resources, however many tenants there are: the rest is root's tools'.
TENANTS_FRACTION = 0.75
ENV_PREFIX = "MRC_NIC_SHARE_"  # MRC_NIC_SHARE_MEMORY=25%, MRC_NIC_SHARE_QPS=8, ...
WHAT = {
    "memory": "bytes of NIC memory",
    "qps": "QPs",
    "cqs": "CQs",
    "pds": "protection domains",
}
_SIZE = re.compile(r"(\d+)\s*(b|kib|mib|gib|kb|mb|gb|k|m|g)?", re.I)
_UNITS = {
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
}


@dataclasses.dataclass(frozen=True)
class Share:
    """A fraction of the host's capacity, or an absolute amount."""

    fraction: float | None = None
    amount: int | None = None

    def limit(self, capacity: int) -> int:
        """The share on a host of `capacity`: at least 1, at most the whole."""
        if self.amount is not None:
            return max(1, min(self.amount, capacity))
        return max(1, min(capacity, int(capacity * (self.fraction or 0))))

    def __str__(self) -> str:
        if self.amount is not None:
            return str(self.amount)
        return f"{(self.fraction or 0) * 100:g}%"


DEFAULT = Share(fraction=DEFAULT_FRACTION)


def parse(name: str, value: object) -> Share:
    """A share of resource `name` from a topology value, an env var or a request.
    ValueError (one line: what is wrong, what is allowed) on bad input."""
    if name not in RESOURCES:
        raise ValueError(f"unknown share {name!r}; shares: {', '.join(RESOURCES)}")
    allowed = 'a fraction of the host\'s (0.5 or "50%") or ' + (
        'a size ("8MiB")' if name == "memory" else "a count (64)"
    )
    if isinstance(value, bool):
        raise ValueError(f"share {name} must be {allowed}, not {value!r}")
    if isinstance(value, float):
        if not 0 < value <= 1:
            raise ValueError(f"share {name} as a fraction must be in (0, 1], not {value}")
        return Share(fraction=value)
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"share {name} must be at least 1, not {value}")
        return Share(amount=value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            try:
                return parse(name, float(text[:-1]) / 100)
            except ValueError:
                raise ValueError(f"share {name} must be {allowed}, not {value!r}") from None
        if re.fullmatch(r"0?\.\d+|1\.0*|1", text):
            return parse(name, float(text))
        m = _SIZE.fullmatch(text)
        if m and (name == "memory" or m.group(2) is None):
            return parse(name, int(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])
    raise ValueError(f"share {name} must be {allowed}, not {value!r}")


def parse_all(values: dict, where: str) -> dict[str, Share]:
    """Shares by resource from a mapping (the [tenants] table, a request's
    shares); ValueError names `where` and the key."""
    out = {}
    for key, value in values.items():
        try:
            out[key] = parse(key, value)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    return out


def from_env(environ: dict[str, str]) -> dict[str, str]:
    """The shares a program asks for through MRC_NIC_SHARE_<NAME> (as written)."""
    out = {}
    for name in RESOURCES:
        value = environ.get(ENV_PREFIX + name.upper())
        if value:
            out[name] = value
    return out


@dataclasses.dataclass
class Limits:
    """One session's limits on one host, and where each came from."""

    limits: dict[str, int]
    shares: dict[str, Share]
    capacity: dict[str, int]

    def check(
        self, name: str, held: int, more: int, host: str, who: str = "this session"
    ) -> str | None:
        """Why `more` of resource `name` on top of `held` is over the share, or None.
        who: whose share it is (a session's, or a user's: all its sessions')."""
        limit = self.limits[name]
        if held + more <= limit:
            return None
        if held + more > self.capacity[name]:  # no share can help: the NIC is too small
            raise_it = (
                "raise [nic] memory in the lab's topology file"
                if name == "memory"
                else "release some, or use fewer"
            )
            return (
                f"{host}'s NIC has {self.capacity[name]} {WHAT[name]} in all and {who} "
                f"holds {held}, so {more} more do not fit even in the whole NIC: "
                f"{raise_it}"
            )
        return (
            f"{who}'s share of {host}'s NIC is {limit} {WHAT[name]} "
            f"({self.shares[name]} of {self.capacity[name]}) and it holds {held}, "
            f"so {more} more do not fit: release some, or raise the share "
            f"(mrc-nic exec --share {name}=..., {ENV_PREFIX}{name.upper()}, "
            f"or [tenants] {name} in the lab's topology file)"
        )


def limits(capacity: dict[str, int], lab: dict[str, Share], asked: dict[str, Share]) -> Limits:
    """A session's limits: what it asked for, else the lab's share, else half."""
    chosen = {name: asked.get(name) or lab.get(name) or DEFAULT for name in RESOURCES}
    return Limits(
        limits={name: chosen[name].limit(capacity[name]) for name in RESOURCES},
        shares=chosen,
        capacity=dict(capacity),
    )
