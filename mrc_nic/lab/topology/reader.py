"""Reading a topology file: every value checked, the file and key named in each error."""

from __future__ import annotations

import ipaddress
import math
from pathlib import Path

from mrc_nic.lab.topology.build import derive
from mrc_nic.lab.topology.model import QueueParams, Topology, TopologyError, design_rtt_ns
from mrc_nic.lab.topology.schema import (
    ACK_DELAY_US_DEFAULT,
    ACK_EVERY_DEFAULT,
    ACK_EVERY_MAX,
    FORWARDING_DEFAULT,
    FORWARDING_MODES,
    GROUP_NAME_RE,
    LAB_NAME_RE,
    MAX_HOSTS,
    MAX_PLANES,
    MAX_SWITCHES_PER_TIER,
    MAX_TBF_RATE_BPS,
    MTU_MAX,
    MTU_MIN,
    NIC_MEMORY_DEFAULT,
    NIC_MEMORY_DEFAULT_LAB,
    NIC_MEMORY_MAX,
    NIC_MEMORY_MIN,
    NIC_MEMORY_PAGE,
    QUEUE_BYTES_MAX,
    SCHEMA,
)
from mrc_nic.units import (
    Threshold,
    format_rate,
    parse_rate,
    parse_size,
    parse_threshold,
    parse_time_ns,
)


class _Reader:
    """Reads typed values out of the parsed TOML, naming file and key on error."""

    def __init__(self, path: Path, data: dict):
        self.path = path
        self.data = data

    def fail(self, key: str, why: str) -> TopologyError:
        return TopologyError(f"{self.path}: {key}: {why}")

    def check_keys(self) -> None:
        for section, body in self.data.items():
            if section not in SCHEMA:
                raise self.fail(section, f"unknown section; allowed: {', '.join(SCHEMA)}")
            if not isinstance(body, dict):
                raise self.fail(section, "must be a table ([section])")
            for key in body:
                if key not in SCHEMA[section]:
                    allowed = ", ".join(SCHEMA[section])
                    raise self.fail(
                        f"{section}.{key}", f"unknown key; allowed in [{section}]: {allowed}"
                    )

    def get(self, dotted: str, default: object = None) -> object:
        section, key = dotted.split(".")
        return self.data.get(section, {}).get(key, default)

    def integer(self, dotted: str, lo: int, hi: int, default: int | None = None) -> int:
        value = self.get(dotted, default)
        if value is None:
            raise self.fail(dotted, f"is required: {self._describe(dotted)}")
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise self.fail(dotted, f"must be an integer {lo}..{hi}, got {value!r}")
        return value

    def mtu(self, dotted: str) -> int:
        value = self.integer(dotted, 1, 65535, default=1500)
        if value < MTU_MIN:
            raise self.fail(
                dotted,
                f"must be {MTU_MIN}..{MTU_MAX}, got {value}: a data packet carries 1024 bytes "
                "of payload and 80 of IP, UDP and RDMA headers",
            )
        if value > MTU_MAX:
            raise self.fail(
                dotted,
                f"must be {MTU_MIN}..{MTU_MAX}, got {value}: veth takes the NIC's XDP program "
                f"only up to an MTU of {MTU_MAX} (one page per frame)",
            )
        return value

    def rate(self, dotted: str, default: object) -> int | None:
        try:
            bps = parse_rate(self.get(dotted, default))
        except ValueError as e:
            raise self.fail(dotted, str(e)) from None
        if bps is not None and not 10**5 <= bps <= MAX_TBF_RATE_BPS:
            raise self.fail(dotted, 'must be between 100kbit and 32gbit, or "none"')
        return bps

    def size(self, dotted: str, default: object, lo: int, hi: int) -> int:
        try:
            size = parse_size(self.get(dotted, default))
        except ValueError as e:
            raise self.fail(dotted, str(e)) from None
        if not lo <= size <= hi:
            raise self.fail(dotted, f"must be between {lo} and {hi} bytes, got {size}")
        return size

    def choice(self, dotted: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.get(dotted, default)
        if value not in allowed:
            raise self.fail(dotted, f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def boolean(self, dotted: str, default: bool) -> bool:
        value = self.get(dotted, default)
        if not isinstance(value, bool):
            raise self.fail(dotted, f"must be true or false, got {value!r}")
        return value

    def threshold(self, dotted: str, default: Threshold | None) -> Threshold | None:
        value = self.get(dotted)
        if value is None:
            return default
        try:
            return parse_threshold(value, allow_off=dotted == "queues.trim")
        except ValueError as e:
            raise self.fail(dotted, str(e)) from None

    def queues(self, design_rtt: int) -> QueueParams:
        """[queues]; base_rtt defaults to design_rtt (design_rtt_ns)."""
        d = QueueParams()
        base_rtt = self.get("queues.base_rtt")
        rtt_ns = design_rtt
        if base_rtt is not None:
            try:
                rtt_ns = parse_time_ns(base_rtt)
            except ValueError as e:
                raise self.fail("queues.base_rtt", str(e)) from None
            if not 1_000 <= rtt_ns <= 10**9:
                raise self.fail("queues.base_rtt", f"must be 1us..1s, got {base_rtt!r}")
        seed = self.get("queues.seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 1 << 63:
            raise self.fail("queues.seed", f"must be an integer 0..2^63-1, got {seed!r}")
        return QueueParams(
            base_rtt_ns=rtt_ns,
            ecn=self.boolean("queues.ecn", d.ecn),
            ecn_last_hop=self.boolean("queues.ecn_last_hop", d.ecn_last_hop),
            kmin=self.threshold("queues.kmin", d.kmin),
            kmax=self.threshold("queues.kmax", d.kmax),
            trim=self.threshold("queues.trim", d.trim),
            seed=seed,
        )

    def network(self, dotted: str, default: str) -> ipaddress.IPv4Network:
        value = self.get(dotted, default)
        try:
            net = ipaddress.IPv4Network(value)
        except (ValueError, TypeError):
            raise self.fail(
                dotted, f"must be an IPv4 network like {default!r}, got {value!r}"
            ) from None
        if net.prefixlen > 16:
            raise self.fail(
                dotted, f"must be a /16 or larger (one /24 per plane), got /{net.prefixlen}"
            )
        return net

    def _describe(self, dotted: str) -> str:
        section, key = dotted.split(".")
        return SCHEMA[section][key]


def _nic_memory(r, hosts: int) -> int:
    """[nic] memory: bytes of NIC memory per host, whole pages."""
    share = NIC_MEMORY_DEFAULT_LAB // hosts // NIC_MEMORY_PAGE * NIC_MEMORY_PAGE
    default = min(NIC_MEMORY_DEFAULT, share)
    size = r.size("nic.memory", default, NIC_MEMORY_MIN, NIC_MEMORY_MAX // hosts)
    if size % NIC_MEMORY_PAGE:
        raise r.fail("nic.memory", f"must be whole pages ({NIC_MEMORY_PAGE} bytes), got {size}")
    return size


def load(path: str | Path, lab: str | None = None) -> Topology:
    """Parse and validate a topology file; ``lab`` overrides [lab].name."""
    import tomllib  # here: a running lab's topology comes from its JSON record

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TopologyError(f"{path}: no such topology file (see netns/ for examples)") from None
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(f"{path}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TopologyError(
            f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}"
        ) from None
    return from_dict(path, data, lab)


def from_dict(path: Path, data: dict, lab: str | None = None) -> Topology:
    r = _Reader(path, data)
    r.check_keys()

    name = lab if lab is not None else r.get("lab.name", path.stem.replace("-", ""))
    if not isinstance(name, str) or not LAB_NAME_RE.fullmatch(name):
        raise r.fail("lab.name", f"must match [a-z0-9]{{1,12}} (no dash), got {name!r}")

    hosts = r.integer("fabric.hosts", 1, MAX_HOSTS)
    planes = r.integer("fabric.planes", 1, MAX_PLANES)
    tiers = r.integer("fabric.tiers", 1, 2, default=2)
    if tiers == 1:
        t0 = r.integer("fabric.t0_per_plane", 1, 1, default=1)
        if r.get("fabric.t1_per_plane") is not None:
            raise r.fail("fabric.t1_per_plane", "only allowed with tiers = 2")
        t1 = 0
    else:
        t0 = r.integer("fabric.t0_per_plane", 1, MAX_SWITCHES_PER_TIER, default=2)
        t1 = r.integer("fabric.t1_per_plane", 1, MAX_SWITCHES_PER_TIER, default=2)
        if t0 * t1 > 128:
            raise r.fail(
                "fabric",
                f"t0_per_plane x t1_per_plane = {t0 * t1}: at most 128 "
                "T0-T1 links per plane fit the fabric addressing",
            )
    per_t0 = r.integer("fabric.hosts_per_t0", 1, MAX_HOSTS, default=math.ceil(hosts / t0))
    if per_t0 * t0 < hosts:
        raise r.fail(
            "fabric.hosts_per_t0",
            f"{per_t0} hosts on each of {t0} T0s cannot hold "
            f"{hosts} hosts; raise it to {math.ceil(hosts / t0)}",
        )
    if per_t0 * (t0 - 1) >= hosts:
        if r.get("fabric.hosts_per_t0") is None:
            raise r.fail(
                "fabric.t0_per_plane",
                f"{hosts} hosts, {per_t0} per T0, leave T0 number {t0} empty; use fewer T0s",
            )
        raise r.fail(
            "fabric.hosts_per_t0",
            f"with {per_t0} hosts per T0, T0 number {t0} would have no host; lower hosts_per_t0",
        )

    rate = r.rate("links.rate", "1gbit")
    fabric_rate = r.rate("links.fabric_rate", format_rate(rate))
    mtu = r.mtu("links.mtu")
    slowest = min((x for x in (rate, fabric_rate) if x), default=None)
    topo = Topology(
        path=path,
        lab=name,
        hosts=hosts,
        planes=planes,
        tiers=tiers,
        t0_per_plane=t0,
        t1_per_plane=t1,
        hosts_per_t0=per_t0,
        rate_bps=rate,
        fabric_rate_bps=fabric_rate,
        mtu=mtu,
        buffer_bytes=r.size("links.buffer", "256KiB", 16 * 1024, 64 * 2**20),
        host_net=r.network("addressing.hosts", "198.18.0.0/16"),
        fabric_net=r.network("addressing.fabric", "198.19.0.0/16"),
        queues=r.queues(design_rtt_ns(slowest, mtu, tiers)),
        nic_memory_bytes=_nic_memory(r, hosts),
        ack_every=r.integer("nic.ack_every", 1, ACK_EVERY_MAX, ACK_EVERY_DEFAULT),
        ack_delay_us=r.integer("nic.ack_delay_us", 1, 1_000_000, ACK_DELAY_US_DEFAULT),
        forwarding=r.choice("fabric.forwarding", FORWARDING_MODES, FORWARDING_DEFAULT),
        tenant_group=_tenant_group(r),
        raw=data,
    )
    if topo.host_net.overlaps(topo.fabric_net):
        raise r.fail("addressing", f"hosts {topo.host_net} and fabric {topo.fabric_net} overlap")
    _check_queues(r, topo)
    _check_tenants(r)
    derive(topo)
    return topo


def with_forwarding(topo: Topology, forwarding: str, lab: str | None = None) -> Topology:
    """The same topology with [fabric] forwarding set (kept in its raw TOML,
    so the lab's state records it)."""
    data = {section: dict(body) for section, body in topo.raw.items()}
    data.setdefault("fabric", {})["forwarding"] = forwarding
    return from_dict(topo.path, data, lab)


def _tenant_group(r: _Reader) -> str | None:
    """[tenants] group: a group's name, or None (root only). Whether the group
    exists is the machine's business, asked when a lab comes up (lab.access)."""
    value = r.get("tenants.group")
    if value is None:
        return None
    if not isinstance(value, str) or not GROUP_NAME_RE.fullmatch(value):
        raise r.fail(
            "tenants.group",
            f"must be a group's name (lower-case letters, digits, _ and -, as groupadd "
            f'takes them; e.g. "mrc-nic"), got {value!r}; leave it out for root only',
        )
    return value


def _check_tenants(r: _Reader) -> None:
    """[tenants]: each share parses (the daemons read them from the lab's record)."""
    from mrc_nic.contract import shares  # pure; here to keep the import of topology light

    for key, value in r.data.get("tenants", {}).items():
        if key == "group":
            continue  # who, not how much: _tenant_group
        try:
            shares.parse(key, value)
        except ValueError as e:
            raise r.fail(f"tenants.{key}", str(e)) from None


def _check_queues(r: _Reader, topo: Topology) -> None:
    """Thresholds resolve per link rate: each must fit the BPF twin, and kmin <= kmax."""
    q = topo.queues
    for rate in sorted({x for x in (topo.rate_bps, topo.fabric_rate_bps) if x is not None}):
        bdp = q.bdp_bytes(rate)
        kmin, kmax = q.kmin.resolve(bdp), q.kmax.resolve(bdp)
        on = f"on {format_rate(rate)} links (BDP {bdp} bytes)"
        for key, value in (
            ("kmin", kmin),
            ("kmax", kmax),
            ("trim", q.trim and q.trim.resolve(bdp)),
        ):
            if value is not None and value > QUEUE_BYTES_MAX:
                raise r.fail(f"queues.{key}", f"{value} bytes {on}: at most {QUEUE_BYTES_MAX}")
        if kmin > kmax:
            raise r.fail("queues.kmin", f"{kmin} bytes is above kmax ({kmax} bytes) {on}")
