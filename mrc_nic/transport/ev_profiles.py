"""EV Format profiles and EV profiles of one host's NIC (OCP mrc_ctl.h): the
objects, the OCP EV expansion, and the table's operations on them (EvTable,
a part of transport.profiles.ProfileTable).

EV values. An EV profile's EVs are integers: the EV's bits, most significant
first, are pulled field by field through each field's mask (OCP expansion,
examples/ev_expansion), so a generated profile with fields 8/4/4 (masks
0xff/0xf/0xf) has 16-bit EVs whose high byte is field 0. Expansion
concatenates the fields at the EV Format's widths into the wire EV. On this
lab's IPv4 fabric the wire EV is the UDP source port (16 bits): an EV Format
wider than 16 bits, and SRv6 formats, are refused (E2BIG / EINVAL), and a
wire EV of 0 is refused (UDP source port 0 is no port).

Modes:
- AUTO: mrc-nic chooses (today's run of UDP source ports from 49152, planes
  interleaved); ev_count per QP. Profile 0 is AUTO and ONLINE from the start.
- EXP: an explicit array, populated with REPLACE_EV from MRC_CTL_EV_UNPOPULATED
  (val 0, port 0) before ONLINE.
- GEN: the NIC generates ev_count EVs from the fields' [min_val, max_val]
  ranges (a seeded draw, so different profiles spray differently).

Replacement EVs (mrc-nic extension; the OCP API leaves the choice to the NIC):
each profile has a backup set. GEN: the generated values not in the array;
EXP: `backup` entries the controller gives; AUTO: fresh ports from a counter.
The EV replacer (mrc_nic.transport.evreplace) draws from it, on the same port.

The reverse EV set (ACKs and probes, issue 19) has its place here:
EvProfile.reverse, None until that work fills it.
"""

from __future__ import annotations

import dataclasses
import errno
import random

from mrc_nic.contract.enums import EvFmtMode, EvMode, EvState, ProfileState
from mrc_nic.transport.profilebase import (
    ProfileError,
    check_room,
    check_step,
    einval,
    enum_value,
    known,
    uint,
)

WIRE_EV_BITS = 16  # the UDP source port: all of an EV this IPv4 fabric carries
WIRE_EV_MAX = (1 << WIRE_EV_BITS) - 1
AUTO_EV_BASE = 49152  # AUTO EVs: the dynamic port range (= transfer.EV_BASE)
EV_MAX_COUNT_PROFILE = 256  # NIC_MAX_QP_EVS: EVs one QP holds
EV_MAX_PROFILES = 64
EV_MAX_FMT_PROFILES = 16
FIELD_MAX = 8  # fields per EV (Format) profile
BACKUP_MAX = 4096  # backup EVs kept per profile
DEFAULT_EV_PROFILE = 0  # AUTO, ONLINE from the start
SUPPORTED_FMT_MODES = EvFmtMode.STEV | EvFmtMode.UDP
EVENT_MASK_ALLOWED = EvState.GOOD | EvState.ASSUMED_BAD


# ---- EV fields and expansion -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EvFmtField:
    """struct mrc_ctl_ev_fmt_field."""

    width: int

    @classmethod
    def of(cls, value) -> EvFmtField:
        width = value.get("width") if isinstance(value, dict) else value
        return cls(uint("fmt field width", width, 1, 32))


@dataclasses.dataclass(frozen=True)
class EvField:
    """struct mrc_ctl_ev_field: width, init_val, min_val, max_val, mask."""

    width: int
    init_val: int = 0
    min_val: int = 0
    max_val: int = 0
    mask: int = 0

    @classmethod
    def of(cls, value) -> EvField:
        if not isinstance(value, dict):
            raise einval(
                f"an EV field is an object (width, init_val, min_val, max_val, mask), not {value!r}"
            )
        unknown = set(value) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise einval(
                f"no EV field attribute {sorted(unknown)[0]!r} (width, init_val, min_val, "
                "max_val, mask)"
            )
        f = cls(**value)
        f.check()
        return f

    @property
    def bits(self) -> int:
        """EV bits this field takes (bits set in its mask)."""
        return bin(self.mask).count("1")

    def check(self) -> None:
        """The restrictions of struct mrc_ctl_ev_profile_attr's comment."""
        uint("field width", self.width, 1, 32)
        top = (1 << self.width) - 1
        for name in ("init_val", "min_val", "max_val", "mask"):
            uint(f"field {name}", getattr(self, name), 0, 2**32 - 1)
        if self.init_val > top:
            raise einval(f"field init_val {self.init_val:#x} is wider than its {self.width} bits")
        if self.mask & ~top:
            raise einval(f"field mask {self.mask:#x} has bits outside its {self.width} bits")
        if self.max_val > (1 << self.bits) - 1:
            raise einval(f"field max_val {self.max_val} is wider than its mask's {self.bits} bits")
        if self.bits and self.min_val > self.max_val:
            raise einval(f"field min_val {self.min_val} is above max_val {self.max_val}")

    def overlay(self, ev_bits: int) -> int:
        """init_val with the mask's bits replaced by ev_bits, lowest mask bit
        taking the lowest EV bit (apply_mask_to_value)."""
        result, k = self.init_val, 0
        for i in range(self.width):
            if self.mask >> i & 1:
                result = (result & ~(1 << i)) | ((ev_bits >> k & 1) << i)
                k += 1
        return result


def ev_bits(fields: list[EvField]) -> int:
    """Bits of an EV value under these fields."""
    return sum(f.bits for f in fields)


def expand(value: int, fields: list[EvField], fmt: list[EvFmtField]) -> int:
    """The wire EV of an EV value (OCP expansion): for each field, its
    mask's bits are the next bits of the value, most significant first,
    overlaid on init_val; the fields are concatenated at the EV Format's
    widths (a format field wider than its EV field is zero-filled on top)."""
    total = ev_bits(fields)
    if value >> total:
        raise einval(f"EV {value:#x} has bits set beyond the profile's {total} EV bits")
    out, used = 0, 0
    for f, ff in zip(fields, fmt, strict=False):
        n = f.bits
        chunk = (value >> (total - used - n)) & ((1 << n) - 1) if n else 0
        used += n
        out = (out << ff.width) | f.overlay(chunk)
    for ff in fmt[len(fields) :]:
        out <<= ff.width  # format fields without an EV field: zeros
    return out


def field_values(f: EvField) -> range:
    """What a generated field takes: min_val..max_val (one value if it has no mask bits)."""
    return range(f.min_val, f.max_val + 1) if f.bits else range(1)


# ---- EV Format profiles --------------------------------------------------------------------
@dataclasses.dataclass
class EvFmtProfile:
    """struct mrc_ctl_ev_fmt_profile_attr."""

    id: int
    state: ProfileState = ProfileState.INIT
    mode: EvFmtMode | None = None
    fields: list[EvFmtField] = dataclasses.field(default_factory=list)

    @property
    def width(self) -> int:
        return sum(f.width for f in self.fields)

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "state": self.state.name,
            "ev_fmt_mode": self.mode.name if self.mode else None,
            "fmt_fields": [f.width for f in self.fields],
            "width": self.width,
        }


# ---- EV profiles ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Ev:
    """struct mrc_ctl_ev: the EV value and its port (1-based; 0 with val 0: unpopulated)."""

    val: int
    port: int

    @classmethod
    def of(cls, value) -> Ev:
        if isinstance(value, Ev):
            return value
        if not isinstance(value, dict) or set(value) - {"val", "port"} or "val" not in value:
            raise einval(f"an EV is an object {{val, port}}, not {value!r}")
        return cls(
            uint("ev val", value["val"], 0, 2**32 - 1),
            uint("ev port", value.get("port", 0), 0, 255),
        )

    @property
    def unpopulated(self) -> bool:
        return self.val == 0 and self.port == 0

    def as_dict(self) -> dict:
        return {"val": self.val, "port": self.port}


UNPOPULATED = Ev(0, 0)  # MRC_CTL_EV_UNPOPULATED
# Good PROBE_REPLYs an ASSUMED_BAD EV needs before it is GOOD again (mrc-nic
# extension attribute `probe_good` of an EV profile; the NIC counts them,
# nic_sq.probe_good). MRC says probes bring an EV back but publishes no count:
# 3 keeps one lucky reply over a flapping path from restoring it.
DEFAULT_PROBE_GOOD = 3
PROBE_GOOD_MAX = 1000


@dataclasses.dataclass
class EvProfile:
    """struct mrc_ctl_ev_profile_attr, and what the NIC keeps for it."""

    id: int
    state: ProfileState = ProfileState.INIT
    mode: EvMode | None = None
    fmt_id: int | None = None
    ev_count: int = 0
    ev_min_active: int = 0
    ev_event_mask: int = 0
    fields: list[EvField] = dataclasses.field(default_factory=list)
    evs: list[Ev] = dataclasses.field(default_factory=list)  # EXP and GEN: the EV array
    backup: list[Ev] = dataclasses.field(default_factory=list)  # replacements (extension)
    denied: set[int] = dataclasses.field(default_factory=set)  # EV values DENIED by the controller
    probe_good: int = DEFAULT_PROBE_GOOD  # good probes that bring an ASSUMED_BAD EV back
    # The reverse EV set, for ACKs and probes (issue 19 builds it): None today,
    # the answers go back on the data packet's EV.
    reverse: list[Ev] | None = None

    def as_dict(self, fmt: EvFmtProfile | None = None, *, evs: bool = False) -> dict:
        d = {
            "id": self.id,
            "state": self.state.name,
            "ev_mode": self.mode.name if self.mode else None,
            "ev_fmt_profile_id": self.fmt_id,
            "ev_count": self.ev_count,
            "ev_min_active": self.ev_min_active,
            "ev_event_mask": [s.name for s in EvState if s & self.ev_event_mask],
            "fields": [dataclasses.asdict(f) for f in self.fields],
            "populated": sum(not e.unpopulated for e in self.evs),
            "backup": len(self.backup),
            "denied": sorted(self.denied),
            "probe_good": self.probe_good,
            "reverse": None if self.reverse is None else [e.as_dict() for e in self.reverse],
        }
        if evs:
            d["evs"] = [
                dict(e.as_dict(), wire=self.wire(e.val, fmt)) if not e.unpopulated else e.as_dict()
                for e in self.evs
            ]
        return d

    def wire(self, val: int, fmt: EvFmtProfile | None) -> int:
        """The UDP source port of an EV value."""
        if self.mode == EvMode.AUTO or fmt is None:
            return val
        return expand(val, self.fields, fmt.fields)

    def qp_evs(
        self, fmt: EvFmtProfile | None, planes: int, ev_count: int | None = None
    ) -> dict[int, int]:
        """{wire EV: plane} for a QP on this profile, in array order. AUTO:
        ev_count EVs (the profile's, or the QP's own for profile 0)."""
        if self.mode == EvMode.AUTO:
            n = ev_count or self.ev_count
            return {AUTO_EV_BASE + i: i % planes for i in range(n)}
        out: dict[int, int] = {}
        for e in self.evs:
            out[self.wire(e.val, fmt)] = e.port - 1
        return out

    def denied_wire(self, fmt: EvFmtProfile | None) -> set[int]:
        return {self.wire(v, fmt) for v in self.denied}

    def next_backup(self, fmt: EvFmtProfile | None, plane: int, taken: set[int]) -> int | None:
        """A replacement wire EV on `plane` from the backup set (taken off
        it), None when the set has none: the replacer then uses its own."""
        for i, e in enumerate(self.backup):
            if e.port - 1 == plane:
                w = self.wire(e.val, fmt)
                if w not in taken:
                    del self.backup[i]
                    return w
        return None


class EvTable:
    """ProfileTable's EV Format and EV profile operations (mrc_ctl_modify/query_ev_fmt_profile,
    mrc_ctl_modify/query_ev_profile). The table holds planes, fmt, ev and ev_users."""

    planes: int
    fmt: dict[int, EvFmtProfile]
    ev: dict[int, EvProfile]
    ev_users: dict[int, set[int]]

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
            fields = attrs["fmt_fields"]
            if not isinstance(fields, list) or not 1 <= len(fields) <= FIELD_MAX:
                raise einval(f"fmt_fields must be a list of 1..{FIELD_MAX} widths")
            new.fields = [EvFmtField.of(f) for f in fields]
            if new.width > WIRE_EV_BITS:
                raise ProfileError(
                    errno.E2BIG,
                    f"fmt_fields total {new.width} bits; this NIC carries EVs of at most "
                    f"{WIRE_EV_BITS} bits (the UDP source port): narrow the fields",
                )
        if "profile_state" in attrs:
            target = enum_value(ProfileState, "profile_state", attrs["profile_state"])
            self._fmt_transition(new, target)
        self.fmt[pid] = new
        if new.state == ProfileState.INIT and "profile_state" in attrs:
            del self.fmt[pid]  # back to INIT: the profile is gone
            return new
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

    # ---- EV profiles ---------------------------------------------------------------------
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

    def modify_ev(self, pid: int, attrs: dict) -> EvProfile:
        """mrc_ctl_modify_ev_profile. attrs: profile_state, ev_mode,
        ev_fmt_profile_id, ev_count, ev_min_active, ev_event_mask, fields
        (EV_FIELDS_OP MODIFY_FIELDS), ev_op {op, entries} (REPLACE_EV,
        MODIFY_EV_STATE), backup (extension: replacement EVs, EXP).
        Checked on a copy: a refused call changes nothing."""
        uint("ev_profile_id", pid, 0, 2**32 - 1)
        names = {
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
        known(attrs, names, "EV profile")
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
        if pid == DEFAULT_EV_PROFILE and set(attrs) - {"ev_event_mask", "ev_op", "probe_good"}:
            raise einval(
                "EV profile 0 is mrc-nic's AUTO profile: it only takes ev_event_mask, ev_op and "
                "probe_good; use another id"
            )
        online = old.state == ProfileState.ONLINE
        config = {"ev_mode", "ev_fmt_profile_id", "ev_count", "ev_min_active", "fields"}
        if online and config & set(attrs):
            raise ProfileError(
                errno.EBUSY,
                f"EV profile {pid} is ONLINE: set it OFFLINE to change "
                f"{', '.join(sorted(config & set(attrs)))}",
            )
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
            p.ev_event_mask = _event_mask(attrs["ev_event_mask"])
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
            p.backup = [self._check_ev(p, Ev.of(e)) for e in attrs["backup"]]
        if "profile_state" in attrs:
            target = enum_value(ProfileState, "profile_state", attrs["profile_state"])
            self._ev_transition(p, old.state, target)
        if "ev_op" in attrs:
            self._ev_op(p, attrs["ev_op"])
        if p.state == ProfileState.INIT and "profile_state" in attrs:
            self.ev.pop(pid, None)  # back to INIT: forgotten
            return p
        self.ev[pid] = p
        return p

    def _ev_transition(self, p: EvProfile, was: ProfileState, target: ProfileState) -> None:
        name = f"EV profile {p.id}"
        check_step(name, was, target)
        if was == ProfileState.ONLINE and target != ProfileState.ONLINE and self.ev_users.get(p.id):
            qps = ", ".join(f"{q:#x}" for q in sorted(self.ev_users[p.id]))
            raise ProfileError(errno.EBUSY, f"{name} is used by QP(s) {qps}: destroy them first")
        if target == ProfileState.OFFLINE and was == ProfileState.INIT:
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
                    raise einval(
                        f"{name}: INIT -> OFFLINE needs fields (EV_FIELDS_OP MODIFY_FIELDS)"
                    )
                self._check_fields(p, fmt)
            if p.mode == EvMode.EXP:
                p.evs = [UNPOPULATED] * p.ev_count
            elif p.mode == EvMode.GEN:
                self._generate(p)
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

    def _check_fields(self, p: EvProfile, fmt: EvFmtProfile) -> None:
        if len(p.fields) > len(fmt.fields):
            raise einval(
                f"EV profile {p.id}: {len(p.fields)} fields, its format has {len(fmt.fields)}"
            )
        for i, (f, ff) in enumerate(zip(p.fields, fmt.fields, strict=False)):
            if f.width > ff.width:
                raise einval(
                    f"EV profile {p.id}: field {i} is {f.width} bits, its format field {ff.width}"
                )

    def _generate(self, p: EvProfile) -> None:
        """GEN: ev_count distinct EVs drawn from the fields' ranges (seeded
        by the profile id), ports in turn; the rest of the space is the backup set."""
        fmt = self.fmt[p.fmt_id]
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
            val = self._value_of(p.fields, k)
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
        ports = [Ev(e.val, i % self.planes + 1) for i, e in enumerate(chosen)]
        p.evs, p.backup = ports[: p.ev_count], ports[p.ev_count :]

    @staticmethod
    def _value_of(fields: list[EvField], k: int) -> int:
        """The k-th combination of the fields' ranges, as an EV value."""
        val, shift = 0, 0
        for f in reversed(fields):
            r = field_values(f)
            k, i = divmod(k, len(r))
            if f.bits:
                val |= r[i] << shift
                shift += f.bits
        return val

    def _check_ev(self, p: EvProfile, e: Ev) -> Ev:
        if e.unpopulated:
            return e
        if not 1 <= e.port <= self.planes:
            raise einval(
                f"EV port {e.port} does not exist: ports are 1..{self.planes} (one per plane)"
            )
        if p.mode in (EvMode.EXP, EvMode.GEN) and p.fmt_id is not None:
            wire = expand(e.val, p.fields, self.fmt[p.fmt_id].fields)
            if not 1 <= wire <= WIRE_EV_MAX:
                raise einval(
                    f"EV {e.val:#x} expands to {wire:#x}: a UDP source port must be "
                    f"1..{WIRE_EV_MAX}"
                )
        elif p.mode == EvMode.AUTO and not 1 <= e.val <= WIRE_EV_MAX:
            raise einval(f"EV {e.val} is no UDP source port (1..{WIRE_EV_MAX})")
        return e

    def _ev_op(self, p: EvProfile, op: dict) -> None:
        if not isinstance(op, dict) or "op" not in op:
            raise einval("ev_op is an object {op, entries}: op REPLACE_EV or MODIFY_EV_STATE")
        kind = str(op["op"]).upper()
        entries = op.get("entries", [])
        if not isinstance(entries, list) or not entries or len(entries) > EV_MAX_COUNT_PROFILE:
            raise einval(f"ev_op entries must be a list of 1..{EV_MAX_COUNT_PROFILE} objects")
        if kind == "REPLACE_EV":
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
                cur, new = (
                    Ev.of(ent.get("ev", UNPOPULATED.as_dict())),
                    self._check_ev(p, Ev.of(ent["ev_new"])),
                )
                if new.unpopulated:
                    raise einval("ev_new must be an EV {val, port}, not unpopulated")
                if any(e == new for e in p.evs) or any(
                    p.wire(e.val, self.fmt[p.fmt_id]) == p.wire(new.val, self.fmt[p.fmt_id])
                    and not e.unpopulated
                    for e in p.evs
                ):
                    raise einval(
                        f"EV {new.val:#x} is in the array already: mrc-nic holds each EV once per "
                        "QP"
                    )
                all_copies = bool(ent.get("flags", 0) & 1)
                hits = [i for i, e in enumerate(p.evs) if e == cur]
                if not hits:
                    raise ProfileError(
                        errno.ENOENT, f"EV {cur.as_dict()} is not in EV profile {p.id}"
                    )
                for i in hits if all_copies else hits[:1]:
                    p.evs[i] = new
        elif kind == "MODIFY_EV_STATE":
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
        else:
            raise einval(
                f"ev_op {kind!r}: modify takes REPLACE_EV or MODIFY_EV_STATE (queries: query)"
            )

    def probe_good(self, pid: int | None) -> int:
        """Good probes an ASSUMED_BAD EV of a QP on EV profile `pid` needs."""
        p = self.ev.get(pid if pid is not None else DEFAULT_EV_PROFILE)
        return p.probe_good if p is not None else DEFAULT_PROBE_GOOD


def _event_mask(value) -> int:
    if isinstance(value, list):
        mask = 0
        for v in value:
            mask |= enum_value(EvState, "ev_event_mask", v)
    else:
        mask = uint("ev_event_mask", value, 0, 2**32 - 1)
    if mask & ~EVENT_MASK_ALLOWED:
        raise einval("ev_event_mask takes GOOD and ASSUMED_BAD only")
    return int(mask)
