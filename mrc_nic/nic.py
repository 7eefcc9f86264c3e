"""The NIC XDP program: loader (bcc) and map client (raw bpf syscalls, mmap).

bpf/nic_xdp.c runs at XDP on every host port of a lab (docs/fastpath.md). It
is compiled once per lab (NicProgram.load) and the same program fd is attached
to every port (NicProgram.attach); all of its state is in lab-wide maps keyed
by QPN, region id and host id, pinned under ``pin_dir(lab)`` with names that
start with ``nic_`` so that short-lived processes can set QPs up, read their
receive state and counters and reach memory regions with NicMaps, which needs
neither bcc nor a compile.

The ctypes structures below mirror the structs of bpf/nic_maps.h; a test
compares them field by field with the layout bcc compiles, and checks the
constants against the header.

Memory regions are slices of one BPF_F_MMAPABLE array (nic_mr) of
MR_ELEM_SIZE-byte elements: NicMaps maps it into the process (mmap of the map
fd), so reading and writing region bytes is plain memory access.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import errno
import ipaddress
import mmap
import os
import select
from pathlib import Path
from typing import Any

from mrc_nic import bpfsys, pins, wire
from mrc_nic.pins import MapsMissing, pin_dir  # noqa: F401 (re-exported)

__all__ = [
    "Counter",
    "Event",
    "EventReader",
    "NicMaps",
    "NicProgram",
    "QpState",
    "RegionLayout",
    "RqSnapshot",
    "RqState",
    "pin_dir",
    "unpin",
]

BPF_DIR = Path(__file__).resolve().parent.parent / "bpf"
SOURCE = BPF_DIR / "nic_xdp.c"
FUNC_NAME = "nic_xdp"

# Pinned maps (the names BPF gives them, and their file names under pin_dir).
RX_QPS_MAP = "nic_rx_qps"
MR_MAP = "nic_mr"
REGIONS_MAP = "nic_regions"
PORT_UP_MAP = "nic_port_up"
COUNTERS_MAP = "nic_counters"
EVENTS_MAP = "nic_events"
PINNED_MAPS = (RX_QPS_MAP, MR_MAP, REGIONS_MAP, PORT_UP_MAP, COUNTERS_MAP, EVENTS_MAP)

# ---- constants (mirror bpf/nic_maps.h) -------------------------------------------

# Layout constants: not tunable.
MR_ELEM_SIZE = 1024
MPR_MAX = 8
BITMAP_BITS = MPR_MAX * wire.MPR_UNIT
BITMAP_WORDS = BITMAP_BITS // 64
MSG_SLOTS = 32
MSG_F_VALID = 0x1
MSG_F_IMM = 0x2

# Tunables: the header's defaults (NicProgram.load passes its own with -D).
DEFAULT_MAX_QPS = 4096
DEFAULT_MR_ELEMS = 65536  # 64 MiB
DEFAULT_MAX_REGIONS = 256
MAX_HOSTS = 256
MAX_PLANES = 16
DEFAULT_HOST_NET = "198.18.0.0/16"
DEFAULT_EVENT_PAGES = 64

# bpf(2) flags this module needs beyond bpfsys's.
BPF_F_LOCK = 4
BPF_F_MMAPABLE = 1 << 10
BPF_MAP_TYPE_RINGBUF = 27

# XDP attach flags (include/uapi/linux/if_link.h).
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
_XDP_MODES = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE, "auto": 0}

_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1


class QpState(enum.IntEnum):
    """enum nic_qp_state: verbs' enum ibv_qp_state. Only RTR and RTS accept data."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class Counter(enum.IntEnum):
    """enum nic_counter: indices of the per-CPU outcome counters (map nic_counters)."""

    PASS_NOT_MRC = 0
    PASS_OTHER_OPCODE = 1
    PASS_DEFERRED = 2
    SACK = 3
    NACK_TRIMMED = 4
    NACK_TRIMMED_LASTHOP = 5
    NACK_OOR = 6
    NACK_NO_RESOURCE = 7
    NACK_REM_ACCESS = 8
    DROP_TRUNCATED = 9
    DROP_SHORT = 10
    DROP_BAD_LEN = 11
    DROP_TOO_LONG = 12
    DROP_BAD_OPCODE = 13
    DROP_IMM_NOT_LAST = 14
    DROP_UNKNOWN_QP = 15
    DROP_SPOOFED = 16
    DROP_QP_STATE = 17
    DROP_QP_CONFIG = 18
    DROP_BAD_VA = 19
    DROP_BAD_MSN = 20
    DROP_XDP_ERR = 21
    PLACED = 22
    PLACED_BYTES = 23
    DUP = 24
    MSG_DONE = 25
    EVENTS = 26
    EVENTS_LOST = 27


COUNTER_SLOTS = len(Counter)  # NIC_CNT_MAX


class EventType(enum.IntEnum):
    """enum nic_event_type."""

    RECV_IMM = 1


# ---- ctypes views of the structs of bpf/nic_maps.h ---------------------------------


class MsgSlot(ctypes.Structure):
    """struct nic_msg_slot: a message whose LAST packet arrived, not complete yet."""

    _fields_ = [
        ("va", ctypes.c_uint64),
        ("last_psn", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class RqStats(ctypes.Structure):
    """struct nic_rq_stats: per-QP counters, written by BPF."""

    _fields_ = [
        ("data_pkts", ctypes.c_uint64),
        ("placed_pkts", ctypes.c_uint64),
        ("placed_bytes", ctypes.c_uint64),
        ("dup_pkts", ctypes.c_uint64),
        ("trimmed_pkts", ctypes.c_uint64),
        ("oor_pkts", ctypes.c_uint64),
        ("sacks", ctypes.c_uint64),
        ("nacks", ctypes.c_uint64),
        ("msgs_done", ctypes.c_uint64),
        ("imm_done", ctypes.c_uint64),
    ]


class SpinLock(ctypes.Structure):
    """struct bpf_spin_lock: the kernel never copies it to or from user space (reads 0)."""

    _fields_ = [("val", ctypes.c_uint32)]


class RqState(ctypes.Structure):
    """struct nic_rq: the receiving side of one QP (map nic_rx_qps, key = QPN)."""

    _fields_ = [
        ("lock", SpinLock),
        ("state", ctypes.c_uint32),
        ("local_host", ctypes.c_uint32),
        ("peer_host", ctypes.c_uint32),
        ("peer_qpn", ctypes.c_uint32),
        ("mpr", ctypes.c_uint32),
        ("region", ctypes.c_uint32),
        ("cum_psn", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("bitmap", ctypes.c_uint64 * BITMAP_WORDS),
        ("stats", RqStats),
        ("msgs", MsgSlot * MSG_SLOTS),
    ]


class RegionLayout(ctypes.Structure):
    """struct nic_region: one region, a slice of nic_mr (map nic_regions)."""

    _fields_ = [
        ("base_va", ctypes.c_uint64),
        ("first_elem", ctypes.c_uint32),
        ("n_elems", ctypes.c_uint32),
        ("rkey", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class Event(ctypes.Structure):
    """struct nic_event: one record of the ring buffer nic_events."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("va", ctypes.c_uint64),
        ("len", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name, _ in self._fields_ if name != "reserved"}


# ---- pins -------------------------------------------------------------------


def unpin(lab: str) -> None:
    """Remove the pins this module made for a lab (only nic_*), then its directory if empty."""
    pins.unpin(lab, PINNED_MAPS)


# ---- loader -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NicConfig:
    """What NicProgram.load compiled the program with (its -D tunables)."""

    host_net: ipaddress.IPv4Network = ipaddress.IPv4Network(DEFAULT_HOST_NET)
    max_qps: int = DEFAULT_MAX_QPS
    mr_elems: int = DEFAULT_MR_ELEMS
    max_regions: int = DEFAULT_MAX_REGIONS
    event_pages: int = DEFAULT_EVENT_PAGES
    mtu: int = wire.MTU

    def cflags(self) -> list[str]:
        return [
            f"-I{BPF_DIR}",
            f"-DNIC_HOST_NET={int(self.host_net.network_address):#010x}U",
            f"-DNIC_MAX_QPS={self.max_qps}",
            f"-DNIC_MR_ELEMS={self.mr_elems}",
            f"-DNIC_MAX_REGIONS={self.max_regions}",
            f"-DNIC_EVENT_PAGES={self.event_pages}",
            f"-DMRC_MTU={self.mtu}",
        ]

    def check(self) -> None:
        if self.host_net.prefixlen > 16:
            raise ValueError(
                f"host_net must be a /16 or larger (one /24 per plane): {self.host_net}"
            )
        for name in ("max_qps", "mr_elems", "max_regions"):
            value = getattr(self, name)
            if not (isinstance(value, int) and 1 <= value <= _U32_MAX // MR_ELEM_SIZE):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        pages = self.event_pages
        if not (isinstance(pages, int) and pages >= 1 and pages & (pages - 1) == 0):
            raise ValueError(f"event_pages must be a power of two, not {pages!r}")
        if wire.payload_max(self.mtu) <= 0:
            raise ValueError(f"mtu {self.mtu} is too small for a data packet")


class NicProgram:
    """The compiled XDP program of one lab, its fd, and its pinned maps."""

    def __init__(self, lab: str, config: NicConfig, bpf: Any, func: Any) -> None:
        self.lab = lab
        self.config = config
        self.bpf = bpf  # the bcc.BPF object: keeps the program and maps alive
        self.fd: int = func.fd
        self.name: str = func.name.decode() if isinstance(func.name, bytes) else func.name

    @classmethod
    def load(
        cls,
        lab: str,
        *,
        host_net: str = DEFAULT_HOST_NET,
        max_qps: int = DEFAULT_MAX_QPS,
        mr_elems: int = DEFAULT_MR_ELEMS,
        max_regions: int = DEFAULT_MAX_REGIONS,
        event_pages: int = DEFAULT_EVENT_PAGES,
        mtu: int = wire.MTU,
    ) -> NicProgram:
        """Compile bpf/nic_xdp.c for a lab and pin its maps under pin_dir(lab).

        host_net is the lab's host network (topology's ``hosts``): the program
        checks that data comes from the QP's peer and goes to its local host
        on one plane of it. mr_elems sizes the memory of every region of the
        lab together, in MR_ELEM_SIZE-byte elements. Refuses
        (FileExistsError) when the lab's NIC maps are already pinned.
        """
        config = NicConfig(
            host_net=ipaddress.IPv4Network(host_net),
            max_qps=max_qps,
            mr_elems=mr_elems,
            max_regions=max_regions,
            event_pages=event_pages,
            mtu=mtu,
        )
        config.check()
        directory = pin_dir(lab)
        for name in PINNED_MAPS:
            if (directory / name).exists():
                raise FileExistsError(
                    errno.EEXIST,
                    f"NIC maps of lab {lab!r} are already pinned (is the lab already up?)",
                    str(directory / name),
                )

        from bcc import BPF  # imported here: the map client must not need bcc

        bpf = BPF(src_file=str(SOURCE).encode(), cflags=config.cflags())
        try:
            func = bpf.load_func(FUNC_NAME.encode(), BPF.XDP)
            directory.mkdir(parents=True, exist_ok=True)
            try:
                for name in PINNED_MAPS:
                    bpfsys.obj_pin(bpf[name.encode()].map_fd, directory / name)
            except BaseException:
                unpin(lab)
                raise
        except BaseException:
            bpf.cleanup()
            raise
        return cls(lab, config, bpf, func)

    def attach(self, ipr: Any, ifindex: int, *, mode: str = "native") -> None:
        """Attach the program at XDP of an interface (mode: native, generic or auto).

        ipr is a pyroute2 IPRoute, possibly IPRoute(netns=...) for a host
        namespace: the program fd is passed by netlink, so the caller stays in
        its own namespace. Replaces a program already attached in that mode.
        """
        ipr.link(
            "set",
            index=ifindex,
            xdp={"attrs": [("IFLA_XDP_FD", self.fd), ("IFLA_XDP_FLAGS", _xdp_flags(mode))]},
        )

    @staticmethod
    def detach(ipr: Any, ifindex: int, *, mode: str = "native") -> None:
        """Remove whatever XDP program is attached to an interface in that mode."""
        ipr.link(
            "set",
            index=ifindex,
            xdp={"attrs": [("IFLA_XDP_FD", -1), ("IFLA_XDP_FLAGS", _xdp_flags(mode))]},
        )

    def close(self) -> None:
        """Drop this process's references; attached ports and pins keep the rest."""
        self.bpf.cleanup()


def _xdp_flags(mode: str) -> int:
    try:
        return _XDP_MODES[mode]
    except KeyError:
        raise ValueError(f"XDP mode must be one of {sorted(_XDP_MODES)}, not {mode!r}") from None


# ---- map client ---------------------------------------------------------------


@dataclasses.dataclass
class RqSnapshot:
    """The receive state of one QP, read under its lock."""

    qpn: int
    state: QpState | int
    local_host: int
    peer_host: int
    peer_qpn: int
    mpr: int
    region: int
    cum_psn: int
    msn: int
    received: list[int]  # PSNs at or after cum_psn that have arrived, in window order
    pending_msgs: list[dict[str, int]]  # LAST packets seen, messages not complete yet
    stats: dict[str, int]

    @property
    def window(self) -> int:
        return self.mpr * wire.MPR_UNIT


class NicMaps:
    """Receive QPs, regions, port bitmaps and counters of a lab, through the pinned maps."""

    def __init__(self, lab: str, fds: dict[str, int]) -> None:
        self.lab = lab
        self._fds = fds
        self.max_regions = bpfsys.map_info(fds[REGIONS_MAP]).max_entries
        self.mr_elems = bpfsys.map_info(fds[MR_MAP]).max_entries
        self._mr: mmap.mmap | None = None

    @classmethod
    def open(cls, lab: str) -> NicMaps:
        """Open the pinned NIC maps of a lab (MapsMissing if the lab is not up)."""
        directory = pin_dir(lab)
        expected = {
            RX_QPS_MAP: ctypes.sizeof(RqState),
            MR_MAP: MR_ELEM_SIZE,
            REGIONS_MAP: ctypes.sizeof(RegionLayout),
            PORT_UP_MAP: 4,
            COUNTERS_MAP: 8,
        }
        fds: dict[str, int] = {}
        try:
            for name in PINNED_MAPS:
                fds[name] = pins.open_pinned(lab, directory / name, "NIC maps", expected.get(name))
            return cls(lab, fds)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise

    def __enter__(self) -> NicMaps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._mr is not None:
            self._mr.close()
            self._mr = None
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def fd(self, name: str) -> int:
        """The fd of one of the pinned maps (owned by this object)."""
        return self._fds[name]

    # -- receive QPs ------------------------------------------------------------

    def setup_rq(
        self,
        qpn: int,
        *,
        local_host: int,
        peer_host: int,
        peer_qpn: int,
        region: int,
        mpr: int = 1,
        state: QpState = QpState.RTR,
        psn: int = 0,
        msn: int = 0,
    ) -> None:
        """Create (or reset) the receive state of a QP: nothing received, cum_psn = psn.

        The whole value is written, so counters, bitmap and messages start at
        zero. Do it before data flows to this QP: a packet being processed
        meanwhile may be lost (the sender resends it).
        """
        pins.check_range("qpn", qpn, wire.QPN_MASK)
        pins.check_range("local_host", local_host, MAX_HOSTS - 2)
        pins.check_range("peer_host", peer_host, MAX_HOSTS - 2)
        pins.check_range("peer_qpn", peer_qpn, wire.QPN_MASK)
        pins.check_range("region", region, self.max_regions - 1)
        if not (isinstance(mpr, int) and 1 <= mpr <= MPR_MAX):
            raise ValueError(f"mpr must be an integer in [1, {MPR_MAX}], not {mpr!r}")
        pins.check_range("psn", psn, wire.PSN_MASK)
        pins.check_range("msn", msn, wire.MSN_MASK)
        value = RqState(
            state=QpState(state),
            local_host=local_host,
            peer_host=peer_host,
            peer_qpn=peer_qpn,
            mpr=mpr,
            region=region,
            cum_psn=psn,
            msn=msn,
        )
        bpfsys.map_update(self._fds[RX_QPS_MAP], _u32(qpn), bytes(value))

    def rq_raw(self, qpn: int) -> RqState:
        """The receive state of a QP as stored, read under its lock (KeyError if none)."""
        try:
            raw = _locked_lookup(self._fds[RX_QPS_MAP], _u32(qpn), ctypes.sizeof(RqState))
        except FileNotFoundError:
            raise KeyError(f"no receive state for QP {qpn:#x}") from None
        return RqState.from_buffer_copy(raw)

    def rq(self, qpn: int) -> RqSnapshot:
        """The receive state of a QP, decoded (KeyError if none)."""
        raw = self.rq_raw(qpn)
        window = raw.mpr * wire.MPR_UNIT if 1 <= raw.mpr <= MPR_MAX else BITMAP_BITS
        received = []
        for i in range(window):
            psn = (raw.cum_psn + i) & wire.PSN_MASK
            pos = psn % BITMAP_BITS
            if raw.bitmap[pos // 64] >> (pos % 64) & 1:
                received.append(psn)
        pending = []
        for i in range(MSG_SLOTS):
            msn = (raw.msn + i) & wire.MSN_MASK
            slot = raw.msgs[msn % MSG_SLOTS]
            if slot.flags & MSG_F_VALID:
                pending.append(
                    {
                        "msn": msn,
                        "last_psn": slot.last_psn,
                        "va": slot.va,
                        "len": slot.len,
                        "imm": slot.imm if slot.flags & MSG_F_IMM else None,
                    }
                )
        try:
            state: QpState | int = QpState(raw.state)
        except ValueError:
            state = raw.state
        return RqSnapshot(
            qpn=qpn,
            state=state,
            local_host=raw.local_host,
            peer_host=raw.peer_host,
            peer_qpn=raw.peer_qpn,
            mpr=raw.mpr,
            region=raw.region,
            cum_psn=raw.cum_psn,
            msn=raw.msn,
            received=received,
            pending_msgs=pending,
            stats={name: getattr(raw.stats, name) for name, _ in RqStats._fields_},
        )

    def set_rq_state(self, qpn: int, state: QpState) -> None:
        """Change the state of a QP, keeping the rest (KeyError if none).

        Read and write each take the QP's lock, but not together: the updates
        of a packet the program processes between them are lost. Safe for
        transitions made while no data flows to the QP, and for ERR/RESET.
        TODO: when the daemon moves live QPs (RTR -> RTS under traffic), keep
        the state word in a map BPF does not write.
        """
        value = self.rq_raw(qpn)
        value.state = QpState(state)
        bpfsys.map_update(
            self._fds[RX_QPS_MAP], _u32(qpn), bytes(value), flags=BPF_F_LOCK | bpfsys.BPF_EXIST
        )

    def delete_rq(self, qpn: int) -> None:
        """Forget a QP's receive state (KeyError if none): its packets are dropped."""
        try:
            bpfsys.map_delete(self._fds[RX_QPS_MAP], _u32(qpn))
        except FileNotFoundError:
            raise KeyError(f"no receive state for QP {qpn:#x}") from None

    # -- regions ------------------------------------------------------------------

    def set_region(
        self, region: int, *, first_elem: int, n_elems: int, rkey: int, base_va: int = 0
    ) -> None:
        """Define region `region` as n_elems elements of nic_mr from first_elem."""
        pins.check_range("region", region, self.max_regions - 1)
        pins.check_range("rkey", rkey, _U32_MAX)
        pins.check_range("base_va", base_va, _U64_MAX)
        if base_va % MR_ELEM_SIZE:
            raise ValueError(f"base_va must be a multiple of {MR_ELEM_SIZE}, not {base_va:#x}")
        if not (first_elem >= 0 and n_elems >= 1 and first_elem + n_elems <= self.mr_elems):
            raise ValueError(
                f"elements [{first_elem}, {first_elem + n_elems}) do not fit nic_mr "
                f"({self.mr_elems} elements)"
            )
        value = RegionLayout(base_va=base_va, first_elem=first_elem, n_elems=n_elems, rkey=rkey)
        bpfsys.map_update(self._fds[REGIONS_MAP], _u32(region), bytes(value))

    def clear_region(self, region: int) -> None:
        """Remove a region: data for QPs that use it is NACKed (remote access error)."""
        pins.check_range("region", region, self.max_regions - 1)
        bpfsys.map_update(self._fds[REGIONS_MAP], _u32(region), bytes(RegionLayout()))

    def region(self, region: int) -> RegionLayout:
        pins.check_range("region", region, self.max_regions - 1)
        raw = bpfsys.map_lookup(self._fds[REGIONS_MAP], _u32(region), ctypes.sizeof(RegionLayout))
        return RegionLayout.from_buffer_copy(raw)

    def memory(self) -> mmap.mmap:
        """nic_mr mapped into this process: every region of the lab, shared with BPF."""
        if self._mr is None:
            self._mr = mmap.mmap(
                self._fds[MR_MAP],
                self.mr_elems * MR_ELEM_SIZE,
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        return self._mr

    def _span(self, region: int, offset: int, length: int) -> int:
        layout = self.region(region)
        size = layout.n_elems * MR_ELEM_SIZE
        if layout.n_elems == 0:
            raise KeyError(f"region {region} is not defined")
        if not (offset >= 0 and length >= 0 and offset + length <= size):
            raise ValueError(f"bytes [{offset}, {offset + length}) are outside region {region}")
        return layout.first_elem * MR_ELEM_SIZE + offset

    def read_region(self, region: int, offset: int, length: int) -> bytes:
        """length bytes of a region from byte offset (offset 0 = its base_va)."""
        start = self._span(region, offset, length)
        return self.memory()[start : start + length]

    def write_region(self, region: int, offset: int, data: bytes) -> None:
        """Write bytes into a region at byte offset (offset 0 = its base_va)."""
        start = self._span(region, offset, len(data))
        self.memory()[start : start + len(data)] = data

    # -- ports and counters ----------------------------------------------------------

    def set_port_bitmap(self, host: int, bitmap: int) -> None:
        """Bit p: host's port p is up. Copied into every SACK/NACK the host sends."""
        pins.check_range("host", host, MAX_HOSTS - 1)
        pins.check_range("bitmap", bitmap, _U32_MAX)
        bpfsys.map_update(self._fds[PORT_UP_MAP], _u32(host), _u32(bitmap))

    def port_bitmap(self, host: int) -> int:
        pins.check_range("host", host, MAX_HOSTS - 1)
        return int.from_bytes(bpfsys.map_lookup(self._fds[PORT_UP_MAP], _u32(host), 4), "little")

    def counters(self) -> dict[str, int]:
        """Outcome counters (Counter names, lower case), summed over CPUs."""
        fd = self._fds[COUNTERS_MAP]
        return {
            c.name.lower(): sum(
                int.from_bytes(v, "little") for v in bpfsys.map_lookup_percpu(fd, _u32(c), 8)
            )
            for c in Counter
        }

    def events(self) -> EventReader:
        """A reader of the event ring buffer (one consumer at a time)."""
        return EventReader(self._fds[EVENTS_MAP])


# ---- events: the ring buffer, without bcc -----------------------------------------------

_RINGBUF_BUSY = 1 << 31
_RINGBUF_DISCARD = 1 << 30
_RINGBUF_HDR = 8


class EventReader:
    """Consumer of the ring buffer nic_events, by mmap (as libbpf's ring_buffer does).

    Layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position (the
    reader writes it), page 1 the producer position, and the data pages
    follow, mapped twice in a row so that a record never wraps. Each record
    has an 8-byte header: length | BUSY | DISCARD bits, then the page offset.
    """

    def __init__(self, map_fd: int) -> None:
        info = bpfsys.map_info(map_fd)
        if info.type != BPF_MAP_TYPE_RINGBUF:
            raise ValueError(f"map fd {map_fd} is not a ring buffer (type {info.type})")
        self._fd = os.dup(map_fd)
        self._size = info.max_entries
        page = mmap.PAGESIZE
        self._page = page
        self._cons = mmap.mmap(
            self._fd, page, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
        self._prod = mmap.mmap(
            self._fd,
            page + 2 * self._size,
            flags=mmap.MAP_SHARED,
            prot=mmap.PROT_READ,
            offset=page,
        )

    def close(self) -> None:
        self._cons.close()
        self._prod.close()
        os.close(self._fd)

    def __enter__(self) -> EventReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait(self, timeout: float) -> bool:
        """Wait up to timeout seconds for data; True if some is there."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(int(timeout * 1000)))

    def read(self) -> list[Event]:
        """Every complete record available now, oldest first; consumes them."""
        events: list[Event] = []
        cons = int.from_bytes(self._cons[0:8], "little")
        prod = int.from_bytes(self._prod[0:8], "little")
        while cons < prod:
            at = self._page + (cons & (self._size - 1))
            header = int.from_bytes(self._prod[at : at + 4], "little")
            if header & _RINGBUF_BUSY:
                break  # being written
            length = header & ~(_RINGBUF_BUSY | _RINGBUF_DISCARD)
            if not header & _RINGBUF_DISCARD and length >= ctypes.sizeof(Event):
                start = at + _RINGBUF_HDR
                events.append(Event.from_buffer_copy(self._prod[start : start + length]))
            cons += (length + _RINGBUF_HDR + 7) & ~7
            self._cons[0:8] = cons.to_bytes(8, "little")
        return events


# ---- helpers ---------------------------------------------------------------------


def _u32(value: int) -> bytes:
    return int(value).to_bytes(4, "little")


def _locked_lookup(map_fd: int, key: bytes, value_size: int) -> bytes:
    """The value copied under its bpf_spin_lock (BPF_F_LOCK)."""
    return bpfsys.map_lookup(map_fd, key, value_size, flags=BPF_F_LOCK)
