"""What every kind of OCP controller profile shares (transport.profiles): the
refusal, the checks of attribute values, and the lifecycle's steps."""

from __future__ import annotations

import enum
import errno

from mrc_nic.contract.enums import ProfileState
from mrc_nic.contract.framing import RequestError


class ProfileError(RequestError):
    """A refused controller operation: errno and one line saying what to do."""


def einval(message: str) -> ProfileError:
    return ProfileError(errno.EINVAL, message)


def uint(name: str, value, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise einval(f"{name} must be an integer {lo}..{hi}, not {value!r}")
    return value


def enum_value(kind: type[enum.Enum], name: str, value):
    """An enum member from its name ('GEN', case-free) or value."""
    try:
        if isinstance(value, str):
            return kind[value.upper()]
        return kind(value)
    except (KeyError, ValueError):
        names = ", ".join(m.name for m in kind if m.name)
        raise einval(f"{name} must be one of {names}, not {value!r}") from None


def check_step(name: str, was: ProfileState, target: ProfileState) -> None:
    allowed = {
        ProfileState.INIT: {ProfileState.OFFLINE, ProfileState.INIT},
        ProfileState.OFFLINE: {ProfileState.ONLINE, ProfileState.INIT, ProfileState.OFFLINE},
        ProfileState.ONLINE: {ProfileState.OFFLINE, ProfileState.ONLINE},
    }[was]
    if target not in allowed:
        raise einval(
            f"{name}: {was.name} -> {target.name} is not a step (INIT -> OFFLINE -> ONLINE -> "
            "OFFLINE -> INIT)"
        )


def known(attrs: dict, names: set[str], what: str) -> None:
    if not isinstance(attrs, dict):
        raise einval(f"{what} attributes are an object")
    unknown = sorted(set(attrs) - names)
    if unknown:
        raise einval(f"no {what} attribute {unknown[0]!r} (attributes: {', '.join(sorted(names))})")


def check_room(what: str, have: int, limit: int) -> None:
    """A new profile where `have` of at most `limit` exist: ENOSPC when full."""
    if have >= limit:
        raise ProfileError(errno.ENOSPC, f"at most {limit} {what}: set one to INIT to delete it")
