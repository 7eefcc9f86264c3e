"""The profile table's EV Format and EV profile operations (mrc_ctl_modify/query_ev_fmt_profile,
mrc_ctl_modify/query_ev_profile): parts of transport.profiles.ProfileTable.

The objects are transport.ev_profiles'; an EV array's generation and edits
transport.ev_arrays'. Every modify is checked on a copy of the profile: a
refused call changes nothing.
"""

from __future__ import annotations

import dataclasses
import errno

from mrc_nic.contract.enums import EvFmtMode, EvMode, ProfileState
from mrc_nic.transport import ev_arrays
from mrc_nic.transport.ev_profiles import (
    BACKUP_MAX,
    DEFAULT_EV_PROFILE,
    DEFAULT_PROBE_GOOD,
    EV_MAX_COUNT_PROFILE,
    EV_MAX_FMT_PROFILES,
    EV_MAX_PROFILES,
    FIELD_MAX,
    PROBE_GOOD_MAX,
    SUPPORTED_FMT_MODES,
    UNPOPULATED,
    WIRE_EV_BITS,
    Ev,
    EvField,
    EvFmtField,
    EvFmtProfile,
    EvProfile,
    event_mask,
)
from mrc_nic.transport.profilebase import (
    ProfileError,
    check_room,
    check_step,
    einval,
    enum_value,
    known,
    uint,
)

EV_ATTRS = {
    "profile_state",
    "ev_mode",
    "ev_fmt_profile_id",
    "ev_count",
    "ev_min_active",
    "ev_event_mask",
    "fields",
    "ev_op",
    "backup",
    "probe_good",
}
# what an ONLINE EV profile does not take (EBUSY), and all profile 0 takes
EV_CONFIG = {"ev_mode", "ev_fmt_profile_id", "ev_count", "ev_min_active", "fields"}
DEFAULT_PROFILE_ATTRS = {"ev_event_mask", "ev_op", "probe_good"}


class EvFmtTable:
    """EV Format profiles. The table holds planes, fmt and ev."""

    planes: int
    fmt: dict[int, EvFmtProfile]
    ev: dict[int, EvProfile]

    def modify_ev_fmt(self, pid: int, attrs: dict) -> EvFmtProfile:
        """mrc_ctl_modify_ev_fmt_profile: attrs may hold profile_state,
        ev_fmt_mode, fmt_fields (MODIFY_FIELDS)."""
        uint("ev_fmt_profile_id", pid, 0, 2**32 - 1)
        known(attrs, {"profile_state", "ev_fmt_mode", "fmt_fields"}, "EV Format profile")
        p = self.fmt.get(pid)
        if p is None:
            check_room("EV Format profiles", len(self.fmt), EV_MAX_FMT_PROFILES)
            p = EvFmtProfile(pid)
        new = dataclasses.replace(p, fields=list(p.fields))
        if p.state == ProfileState.ONLINE and set(attrs) - {"profile_state"}:
            raise ProfileError(
                errno.EBUSY, f"EV Format profile {pid} is ONLINE: set it OFFLINE to change it"
            )
        if "ev_fmt_mode" in attrs:
            mode = enum_value(EvFmtMode, "ev_fmt_mode", attrs["ev_fmt_mode"])
            if not mode & SUPPORTED_FMT_MODES:
                raise einval(
                    f"ev_fmt_mode {mode.name} is not supported: this lab's fabric is IPv4 with "
                    "ECMP on the UDP source port; use UDP or STEV"
                )
            new.mode = mode
        if "fmt_fields" in attrs:
            new.fields = _fmt_fields(attrs["fmt_fields"])
        if "profile_state" in attrs:
            target = enum_value(ProfileState, "profile_state", attrs["profile_state"])
            self._fmt_transition(new, target)
        self.fmt[pid] = new
        if new.state == ProfileState.INIT and "profile_state" in attrs:
            del self.fmt[pid]  # back to INIT: the profile is gone
        return new

    def _fmt_transition(self, p: EvFmtProfile, target: ProfileState) -> None:
        check_step(f"EV Format profile {p.id}", p.state, target)
        if target == ProfileState.OFFLINE and p.state == ProfileState.INIT and p.mode is None:
            raise einval(f"EV Format profile {p.id}: INIT -> OFFLINE needs ev_fmt_mode")
        if target == ProfileState.ONLINE and not p.fields:
            raise einval(f"EV Format profile {p.id}: OFFLINE -> ONLINE needs fmt_fields")
        if target != ProfileState.ONLINE:
            users = [
                e.id
                for e in self.ev.values()
                if e.fmt_id == p.id and e.state == ProfileState.ONLINE
            ]
            if p.state == ProfileState.ONLINE and users:
                raise ProfileError(
                    errno.EBUSY,
                    f"EV Format profile {p.id} is used by ONLINE EV profile(s) {users}: set them "
                    "OFFLINE first",
                )
        p.state = target

    def query_ev_fmt(self, pid: int) -> EvFmtProfile:
        p = self.fmt.get(pid)
        if p is None:
            raise ProfileError(
                errno.ENOENT,
                f"no EV Format profile {pid} (create it with modify: profile_state OFFLINE)",
            )
        return p


def _fmt_fields(fields: object) -> list[EvFmtField]:
    if not isinstance(fields, list) or not 1 <= len(fields) <= FIELD_MAX:
        raise einval(f"fmt_fields must be a list of 1..{FIELD_MAX} widths")
    out = [EvFmtField.of(f) for f in fields]
    width = sum(f.width for f in out)
    if width > WIRE_EV_BITS:
        raise ProfileError(
            errno.E2BIG,
            f"fmt_fields total {width} bits; this NIC carries EVs of at most "
            f"{WIRE_EV_BITS} bits (the UDP source port): narrow the fields",
        )
    return out


class EvTable(EvFmtTable):
    """EV profiles (and their formats). The table holds planes, fmt, ev and ev_users."""

    ev_users: dict[int, set[int]]

    def ev_profile(self, pid: int) -> EvProfile:
        p = self.ev.get(pid)
        if p is None:
            have = ", ".join(str(i) for i in sorted(self.ev))
            raise ProfileError(
                errno.ENOENT,
                f"no EV profile {pid} (profiles: {have}); create one with `mrc-nic ev profile set`",
            )
        return p

    def online_ev_profile(self, pid: int) -> tuple[EvProfile, EvFmtProfile | None]:
        """The profile a QP takes at INIT, and its format: ONLINE, or EINVAL."""
        p = self.ev_profile(pid)
        if p.state != ProfileState.ONLINE:
            raise einval(
                f"EV profile {pid} is {p.state.name}: a QP takes an ONLINE profile (set "
                "profile_state ONLINE)"
            )
        return p, self.fmt.get(p.fmt_id) if p.fmt_id is not None else None

    def probe_good(self, pid: int | None) -> int:
        """Good probes an ASSUMED_BAD EV of a QP on EV profile `pid` needs."""
        p = self.ev.get(pid if pid is not None else DEFAULT_EV_PROFILE)
        return p.probe_good if p is not None else DEFAULT_PROBE_GOOD

    def modify_ev(self, pid: int, attrs: dict) -> EvProfile:
        """mrc_ctl_modify_ev_profile. attrs: profile_state, ev_mode,
        ev_fmt_profile_id, ev_count, ev_min_active, ev_event_mask, fields
        (EV_FIELDS_OP MODIFY_FIELDS), ev_op {op, entries} (REPLACE_EV,
        MODIFY_EV_STATE), backup (extension: replacement EVs, EXP).
        Checked on a copy: a refused call changes nothing."""
        uint("ev_profile_id", pid, 0, 2**32 - 1)
        known(attrs, EV_ATTRS, "EV profile")
        if "fields" in attrs and "ev_op" in attrs:
            raise einval("ev_op and fields (EV_FIELDS_OP) are exclusive: one per call")
        old = self.ev.get(pid)
        if old is None:
            check_room("EV profiles", len(self.ev), EV_MAX_PROFILES)
            old = EvProfile(pid)
        p = dataclasses.replace(
            old,
            fields=list(old.fields),
            evs=list(old.evs),
            backup=list(old.backup),
            denied=set(old.denied),
        )
        if pid == DEFAULT_EV_PROFILE and set(attrs) - DEFAULT_PROFILE_ATTRS:
            raise einval(
                "EV profile 0 is mrc-nic's AUTO profile: it only takes ev_event_mask, ev_op and "
                "probe_good; use another id"
            )
        if old.state == ProfileState.ONLINE and EV_CONFIG & set(attrs):
            raise ProfileError(
                errno.EBUSY,
                f"EV profile {pid} is ONLINE: set it OFFLINE to change "
                f"{', '.join(sorted(EV_CONFIG & set(attrs)))}",
            )
        self._configure(p, attrs)
        if "profile_state" in attrs:
            target = enum_value(ProfileState, "profile_state", attrs["profile_state"])
            self._ev_transition(p, old.state, target)
        if "ev_op" in attrs:
            ev_arrays.apply_ev_op(p, attrs["ev_op"], self.planes, self.fmt)
        if p.state == ProfileState.INIT and "profile_state" in attrs:
            self.ev.pop(pid, None)  # back to INIT: forgotten
            return p
        self.ev[pid] = p
        return p

    def _configure(self, p: EvProfile, attrs: dict) -> None:
        """The profile's attributes other than its state and ev_op, checked."""
        if "ev_mode" in attrs:
            p.mode = enum_value(EvMode, "ev_mode", attrs["ev_mode"])
        if "ev_fmt_profile_id" in attrs:
            p.fmt_id = attrs["ev_fmt_profile_id"]
            if p.fmt_id not in self.fmt:
                raise ProfileError(
                    errno.ENOENT,
                    f"no EV Format profile {p.fmt_id}: create it first (`mrc-nic ev profile fmt`)",
                )
        if "ev_count" in attrs:
            p.ev_count = uint("ev_count", attrs["ev_count"], 1, EV_MAX_COUNT_PROFILE)
        if "ev_min_active" in attrs:
            p.ev_min_active = uint("ev_min_active", attrs["ev_min_active"], 0, EV_MAX_COUNT_PROFILE)
        if "ev_event_mask" in attrs:
            p.ev_event_mask = event_mask(attrs["ev_event_mask"])
        if "probe_good" in attrs:  # for QPs that connect afterwards
            p.probe_good = uint("probe_good", attrs["probe_good"], 1, PROBE_GOOD_MAX)
        if "fields" in attrs:
            fields = attrs["fields"]
            if not isinstance(fields, list) or not 1 <= len(fields) <= FIELD_MAX:
                raise einval(f"fields must be a list of 1..{FIELD_MAX} field objects")
            p.fields = [EvField.of(f) for f in fields]
        if p.ev_min_active > p.ev_count and p.mode is not None:
            raise einval(f"ev_min_active {p.ev_min_active} is above ev_count {p.ev_count}")
        if "backup" in attrs:
            if not isinstance(attrs["backup"], list) or len(attrs["backup"]) > BACKUP_MAX:
                raise einval(f"backup must be a list of at most {BACKUP_MAX} EVs {{val, port}}")
            p.backup = [
                ev_arrays.check_ev(p, Ev.of(e), self.planes, self.fmt) for e in attrs["backup"]
            ]

    def _ev_transition(self, p: EvProfile, was: ProfileState, target: ProfileState) -> None:
        name = f"EV profile {p.id}"
        check_step(name, was, target)
        if was == ProfileState.ONLINE and target != ProfileState.ONLINE and self.ev_users.get(p.id):
            qps = ", ".join(f"{q:#x}" for q in sorted(self.ev_users[p.id]))
            raise ProfileError(errno.EBUSY, f"{name} is used by QP(s) {qps}: destroy them first")
        if target == ProfileState.OFFLINE and was == ProfileState.INIT:
            self._make_array(p)
        if target == ProfileState.ONLINE:
            missing = sum(e.unpopulated for e in p.evs)
            if p.mode == EvMode.EXP and missing:
                raise einval(
                    f"{name}: {missing} of its {p.ev_count} EVs are unpopulated: REPLACE_EV them "
                    "first"
                )
        if target == ProfileState.INIT:
            p.evs, p.backup, p.denied = [], [], set()
        p.state = target

    def _make_array(self, p: EvProfile) -> None:
        """INIT -> OFFLINE: the profile is complete; its EV array made (EXP: all
        unpopulated, GEN: generated)."""
        name = f"EV profile {p.id}"
        if p.mode is None or not p.ev_count:
            raise einval(f"{name}: INIT -> OFFLINE needs ev_mode and ev_count")
        if p.mode != EvMode.AUTO:
            if p.fmt_id is None:
                raise einval(f"{name}: INIT -> OFFLINE needs ev_fmt_profile_id ({p.mode.name})")
            fmt = self.fmt[p.fmt_id]
            if fmt.state != ProfileState.ONLINE:
                raise einval(
                    f"{name}: its EV Format profile {fmt.id} is {fmt.state.name}: set it "
                    "ONLINE first"
                )
            if not p.fields:
                raise einval(f"{name}: INIT -> OFFLINE needs fields (EV_FIELDS_OP MODIFY_FIELDS)")
            ev_arrays.check_fields(p, fmt)
        if p.mode == EvMode.EXP:
            p.evs = [UNPOPULATED] * p.ev_count
        elif p.mode == EvMode.GEN:
            ev_arrays.generate(p, self.fmt[p.fmt_id], self.planes)
