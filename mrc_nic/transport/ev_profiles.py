"""EV Format profiles and EV profiles of one host's NIC (OCP mrc_ctl.h): the
objects and the OCP EV expansion. The table's operations on them are
transport.ev_tables (EvTable, a part of transport.profiles.ProfileTable),
EV arrays generated and edited (ev_op) in transport.ev_arrays.

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

from mrc_nic.contract.enums import EvFmtMode, EvMode, EvState, ProfileState
from mrc_nic.transport.profilebase import (
    einval,
    enum_value,
    uint,
)

WIRE_EV_BITS = 16  # the UDP source port: all of an EV this IPv4 fabric carries
WIRE_EV_MAX = (1 << WIRE_EV_BITS) - 1
AUTO_EV_BASE = 49152  # AUTO EVs: the dynamic port range (the EV replacer's fresh ones too)
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


def event_mask(value) -> int:
    if isinstance(value, list):
        mask = 0
        for v in value:
            mask |= enum_value(EvState, "ev_event_mask", v)
    else:
        mask = uint("ev_event_mask", value, 0, 2**32 - 1)
    if mask & ~EVENT_MASK_ALLOWED:
        raise einval("ev_event_mask takes GOOD and ASSUMED_BAD only")
    return int(mask)
