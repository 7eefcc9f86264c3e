"""An EV profile's array of EVs: generated (GEN), checked, edited (ev_op).

The EV table (transport.ev_tables) calls these on a copy of the profile
being modified: a refused call changes nothing. `fmts` is the table's EV
Format profiles, `planes` the lab's (an EV's port is 1..planes).
"""

from __future__ import annotations

import errno
import random

from mrc_nic.contract.enums import EvMode, EvState, ProfileState
from mrc_nic.transport.ev_profiles import (
    BACKUP_MAX,
    EV_MAX_COUNT_PROFILE,
    UNPOPULATED,
    WIRE_EV_MAX,
    Ev,
    EvField,
    EvFmtProfile,
    EvProfile,
    expand,
    field_values,
)
from mrc_nic.transport.profilebase import ProfileError, einval, enum_value


def generate(p: EvProfile, fmt: EvFmtProfile, planes: int) -> None:
    """GEN: ev_count distinct EVs drawn from the fields' ranges (seeded
    by the profile id), ports in turn; the rest of the space is the backup set."""
    space = 1
    for f in p.fields:
        space *= len(field_values(f))
    rng = random.Random(f"mrc-nic ev profile {p.id}")
    take = min(space, p.ev_count + BACKUP_MAX)
    picks = rng.sample(range(space), take) if space > take else list(range(space))
    if space <= take:
        rng.shuffle(picks)
    chosen: list[Ev] = []
    seen: set[int] = set()
    for k in picks:
        val = value_of(p.fields, k)
        wire = expand(val, p.fields, fmt.fields)
        if wire == 0 or wire > WIRE_EV_MAX or wire in seen:
            continue
        seen.add(wire)
        chosen.append(Ev(val, 0))
    if len(chosen) < p.ev_count:
        raise ProfileError(
            errno.E2BIG,
            f"EV profile {p.id}: its fields generate {len(chosen)} distinct EVs, fewer than "
            f"ev_count {p.ev_count}: widen min_val..max_val or lower ev_count",
        )
    ports = [Ev(e.val, i % planes + 1) for i, e in enumerate(chosen)]
    p.evs, p.backup = ports[: p.ev_count], ports[p.ev_count :]


def value_of(fields: list[EvField], k: int) -> int:
    """The k-th combination of the fields' ranges, as an EV value."""
    val, shift = 0, 0
    for f in reversed(fields):
        r = field_values(f)
        k, i = divmod(k, len(r))
        if f.bits:
            val |= r[i] << shift
            shift += f.bits
    return val


def check_fields(p: EvProfile, fmt: EvFmtProfile) -> None:
    if len(p.fields) > len(fmt.fields):
        raise einval(f"EV profile {p.id}: {len(p.fields)} fields, its format has {len(fmt.fields)}")
    for i, (f, ff) in enumerate(zip(p.fields, fmt.fields, strict=False)):
        if f.width > ff.width:
            raise einval(
                f"EV profile {p.id}: field {i} is {f.width} bits, its format field {ff.width}"
            )


def check_ev(p: EvProfile, e: Ev, planes: int, fmts: dict[int, EvFmtProfile]) -> Ev:
    if e.unpopulated:
        return e
    if not 1 <= e.port <= planes:
        raise einval(f"EV port {e.port} does not exist: ports are 1..{planes} (one per plane)")
    if p.mode in (EvMode.EXP, EvMode.GEN) and p.fmt_id is not None:
        wire = expand(e.val, p.fields, fmts[p.fmt_id].fields)
        if not 1 <= wire <= WIRE_EV_MAX:
            raise einval(
                f"EV {e.val:#x} expands to {wire:#x}: a UDP source port must be 1..{WIRE_EV_MAX}"
            )
    elif p.mode == EvMode.AUTO and not 1 <= e.val <= WIRE_EV_MAX:
        raise einval(f"EV {e.val} is no UDP source port (1..{WIRE_EV_MAX})")
    return e


def apply_ev_op(p: EvProfile, op: dict, planes: int, fmts: dict[int, EvFmtProfile]) -> None:
    """ev_op {op, entries}: REPLACE_EV or MODIFY_EV_STATE on profile p."""
    if not isinstance(op, dict) or "op" not in op:
        raise einval("ev_op is an object {op, entries}: op REPLACE_EV or MODIFY_EV_STATE")
    kind = str(op["op"]).upper()
    entries = op.get("entries", [])
    if not isinstance(entries, list) or not entries or len(entries) > EV_MAX_COUNT_PROFILE:
        raise einval(f"ev_op entries must be a list of 1..{EV_MAX_COUNT_PROFILE} objects")
    if kind == "REPLACE_EV":
        replace_evs(p, entries, planes, fmts)
    elif kind == "MODIFY_EV_STATE":
        modify_ev_states(p, entries)
    else:
        raise einval(f"ev_op {kind!r}: modify takes REPLACE_EV or MODIFY_EV_STATE (queries: query)")


def replace_evs(p: EvProfile, entries: list, planes: int, fmts: dict[int, EvFmtProfile]) -> None:
    if p.mode != EvMode.EXP:
        raise einval(
            f"REPLACE_EV is for EXP profiles; EV profile {p.id} is "
            f"{p.mode.name if p.mode else 'unconfigured'}"
        )
    if p.state == ProfileState.INIT:
        raise einval(
            f"EV profile {p.id} is INIT: set it OFFLINE (mode, format, count, fields) first"
        )
    for ent in entries:
        cur = Ev.of(ent.get("ev", UNPOPULATED.as_dict()))
        new = check_ev(p, Ev.of(ent["ev_new"]), planes, fmts)
        if new.unpopulated:
            raise einval("ev_new must be an EV {val, port}, not unpopulated")
        fmt = fmts[p.fmt_id]
        if any(e == new for e in p.evs) or any(
            p.wire(e.val, fmt) == p.wire(new.val, fmt) and not e.unpopulated for e in p.evs
        ):
            raise einval(
                f"EV {new.val:#x} is in the array already: mrc-nic holds each EV once per QP"
            )
        all_copies = bool(ent.get("flags", 0) & 1)
        hits = [i for i, e in enumerate(p.evs) if e == cur]
        if not hits:
            raise ProfileError(errno.ENOENT, f"EV {cur.as_dict()} is not in EV profile {p.id}")
        for i in hits if all_copies else hits[:1]:
            p.evs[i] = new


def modify_ev_states(p: EvProfile, entries: list) -> None:
    for ent in entries:
        e = Ev.of(ent["ev"])
        state = enum_value(EvState, "state", ent.get("state"))
        if state not in (EvState.DENIED, EvState.GOOD):
            raise einval("MODIFY_EV_STATE sets DENIED or GOOD (ASSUMED_BAD is the NIC's)")
        if not any(x.val == e.val for x in p.evs) and p.mode != EvMode.AUTO:
            raise ProfileError(errno.ENOENT, f"EV {e.val:#x} is not in EV profile {p.id}")
        if state == EvState.DENIED:
            p.denied.add(e.val)
        else:
            p.denied.discard(e.val)
