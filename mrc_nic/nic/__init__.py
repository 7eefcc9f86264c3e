"""The NIC XDP program: loader (bcc) and map client (raw bpf syscalls, mmap).

bpf/nic_xdp.c (with its role headers) runs at XDP on every host port of a lab (docs/fastpath.md). It
is compiled once per lab (NicProgram.load) and the same program fd is attached
to every port (NicProgram.attach); all of its state is in lab-wide maps keyed
by QPN (receive QPs: by its low bits), region id and host id, pinned under
``pin_dir(lab)`` with names that start with ``nic_`` so that short-lived
processes can set QPs up, read their receive state and counters and reach
memory regions with NicMaps, which needs neither bcc nor a compile.

The ctypes structures below mirror the structs of bpf/nic_structs.h; a test
compares them field by field with the layout bcc compiles, and checks the
constants against the header.

A memory region's bytes are a BPF_F_MMAPABLE array of MR_ELEM_SIZE-byte
elements, the map at its id in nic_mems: the daemons' regions are slices of
the lab's array nic_mr, an application's MR is a map of its own. NicMaps
maps them into the process (mmap of the map fd), so reading and writing
region bytes is plain memory access.

The sending side of a QP (nic_tx_qps: snd_una, snd_nxt, acknowledged PSNs,
retransmit queue), its EVs (nic_evs: state, SKIP expiry, RTT, counters) and
its PSN -> EV table (nic_tx_ring, mmapable, written by the send engine for
every transmission; record_tx does the same from Python, for tests) are set
up and read here too. EventReader decodes every record type of nic_events.

The send engine (in the same program) is driven from here: post_write puts a
work request in a QP's send queue (a map of its own at its ring in nic_wqs,
mmapable), set_port gives the
engine each host port's MACs and device (nic_ports, the devmap nic_tx_ports),
and kick runs the program with BPF_PROG_RUN on live frames, one data packet
per run; the QP's ACKs then clock the rest. The program itself is pinned too
(PROG_PIN), so that a process without bcc can kick, and so is the
applications' doorbell program (DOORBELL_PIN: send kicks only).

Completion queues for applications (verbs) are ring buffers the daemon
creates and the application polls; NicMaps.set_cq_ring puts one at an index
of nic_cq_rings, and a QP set up with cq=index + 1 reports there (cq_maps).

The parts: layout (names, constants, layouts), loader (compile, pin, attach),
driver (the user-space driver: WQE writer, doorbell and kicks, CQ ring reader,
narrow map views), maps (NicMaps, one part per role), snapshots,
events (the ring buffer). This package re-exports their public names.

The scapy layers (wire) are loaded on first use of ``nic.wire``: importing
scapy costs about 0.3 s, which a short CLI call that only reads maps must not
pay; the wire format's numbers are in wireconst, loaded at once.
"""

import importlib

from mrc_nic.kernel.pins import MapsMissing, pin_dir
from mrc_nic.nic.cq_maps import CqMaps
from mrc_nic.nic.driver.doorbell import (
    DOORBELL_FRAMES_MAX,
    DOORBELL_IFINDEX,
    DOORBELL_IFNAME,
    DOORBELL_NIC_IFNAME,
    KICK_ETHERTYPE,
    KICK_TEMPLATE,
    LIVE_BATCH_MAX,
    doorbell_frame,
    kick_frame,
    open_doorbell,
    run_kick,
)
from mrc_nic.nic.driver.sq import SendQueue
from mrc_nic.nic.ev_maps import EvMaps
from mrc_nic.nic.events import (
    EVENT_LAYOUTS,
    AnyEvent,
    Event,
    EventReader,
    EvEvent,
    LossEvent,
    QpErrEvent,
    SendEvent,
)
from mrc_nic.nic.layout import (
    ALL_PLANES,
    BITMAP_BITS,
    BITMAP_WORDS,
    BPF_DIR,
    BPF_F_LOCK,
    BPF_F_MMAPABLE,
    BPF_MAP_TYPE_ARRAY_OF_MAPS,
    BPF_MAP_TYPE_RINGBUF,
    COUNTER_SLOTS,
    COUNTERS_MAP,
    CQ_RINGS_MAP,
    CQ_TEMPLATE_MAP,
    DEFAULT_CQ_RING_PAGES,
    DEFAULT_EVENT_PAGES,
    DEFAULT_HOST_NET,
    DEFAULT_MAX_CQS,
    DEFAULT_MAX_EVS,
    DEFAULT_MAX_QPS,
    DEFAULT_MAX_REGIONS,
    DEFAULT_MR_ELEMS,
    DEFAULT_SKIP_NS,
    DEFAULT_TX_RINGS,
    DOORBELL_PIN,
    EVENTS_MAP,
    EVS_MAP,
    FUNC_NAME,
    GAP_BIN_SHIFT,
    GAP_BINS,
    GAP_MIN_NS,
    HEAD_LOST,
    HEAD_SCAN,
    LOSS_WALK_MAX,
    MAP_PINS,
    MAX_HOSTS,
    MAX_PLANES,
    MAX_QP_EVS,
    MEMS_MAP,
    MPR_MAX,
    MR_ELEM_SIZE,
    MR_MAP,
    MSG_F_IMM,
    MSG_F_VALID,
    MSG_SLOTS,
    PINNED_MAPS,
    PORT_UP_MAP,
    PORTS_MAP,
    PROG_PIN,
    QPN_INDEX_SPAN,
    REGION_BY_RKEY,
    REGION_NONE,
    REGIONS_MAP,
    RETX_SLOTS,
    RQ_TAG_USED,
    RTT_RECENT_CAP,
    RTT_RECENT_SHIFT,
    RX_LOCK_SIZE,
    RX_LOCK_TRIES,
    RX_LOCKS,
    RX_LOCKS_MAP,
    RX_QPS_MAP,
    RX_SLOTS_MAP,
    SEG_ELEMS_MAX,
    SOURCE,
    SQ_DEPTH,
    TIMELINE_BINS,
    TIMELINE_MAP,
    TIMELINE_SHIFT,
    TIMEOUT_F_REORDER,
    TIMEOUT_MAX,
    TX_F_PREV,
    TX_F_RETX,
    TX_PORTS_MAP,
    TX_QPS_MAP,
    TX_RING_MAP,
    WQ_MAP,
    WQE_F_SIGNALED,
    Counter,
    EvCause,
    EventType,
    EvKey,
    EvState,
    EvStateLayout,
    EvStats,
    GapBin,
    Kick,
    KickOp,
    MsgSlot,
    Port,
    QpError,
    QpState,
    RegionLayout,
    Retx,
    RetxCause,
    RqLayout,
    RqStats,
    SpinLock,
    SqCc,
    SqLayout,
    SqStats,
    SqTxStats,
    TxPkt,
    TxRing,
    Wq,
    Wqe,
    memory_elems,
    packer,
    rx_lock_slot,
    seg_size,
)
from mrc_nic.nic.loader import NicConfig, NicProgram, unpin
from mrc_nic.nic.maps import NicMaps
from mrc_nic.nic.maps_base import MapsBase
from mrc_nic.nic.memory_maps import MemoryMaps
from mrc_nic.nic.port_maps import PortMaps
from mrc_nic.nic.rev_maps import REV_EVS, RevEv, RevEvMaps, RevProbe, RevState
from mrc_nic.nic.rx_maps import RxQpMaps
from mrc_nic.nic.snapshots import EvSnapshot, RqSnapshot, SqSnapshot
from mrc_nic.nic.sq_maps import SendQpMaps

__all__ = [
    "REV_EVS",
    "RevEv",
    "RevEvMaps",
    "RevProbe",
    "RevState",
    "ALL_PLANES",
    "AnyEvent",
    "BITMAP_BITS",
    "BITMAP_WORDS",
    "BPF_DIR",
    "BPF_F_LOCK",
    "BPF_F_MMAPABLE",
    "BPF_MAP_TYPE_ARRAY_OF_MAPS",
    "BPF_MAP_TYPE_RINGBUF",
    "COUNTERS_MAP",
    "COUNTER_SLOTS",
    "CQ_RINGS_MAP",
    "CQ_TEMPLATE_MAP",
    "Counter",
    "CqMaps",
    "DEFAULT_CQ_RING_PAGES",
    "DEFAULT_EVENT_PAGES",
    "DEFAULT_HOST_NET",
    "DEFAULT_MAX_CQS",
    "DEFAULT_MAX_EVS",
    "DEFAULT_MAX_QPS",
    "DEFAULT_MAX_REGIONS",
    "DEFAULT_MR_ELEMS",
    "DEFAULT_SKIP_NS",
    "DEFAULT_TX_RINGS",
    "EVENTS_MAP",
    "EVENT_LAYOUTS",
    "EVS_MAP",
    "EvCause",
    "EvEvent",
    "EvKey",
    "EvMaps",
    "EvSnapshot",
    "EvState",
    "EvStateLayout",
    "EvStats",
    "Event",
    "EventReader",
    "EventType",
    "FUNC_NAME",
    "GAP_BINS",
    "GAP_BIN_SHIFT",
    "GAP_MIN_NS",
    "GapBin",
    "HEAD_LOST",
    "HEAD_SCAN",
    "KICK_ETHERTYPE",
    "KICK_TEMPLATE",
    "Kick",
    "KickOp",
    "LIVE_BATCH_MAX",
    "LOSS_WALK_MAX",
    "LossEvent",
    "MAP_PINS",
    "MAX_HOSTS",
    "MAX_PLANES",
    "MAX_QP_EVS",
    "MPR_MAX",
    "MR_ELEM_SIZE",
    "memory_elems",
    "MR_MAP",
    "MSG_F_IMM",
    "MSG_F_VALID",
    "MSG_SLOTS",
    "MapsBase",
    "MapsMissing",
    "MemoryMaps",
    "MsgSlot",
    "NicConfig",
    "NicMaps",
    "NicProgram",
    "PINNED_MAPS",
    "PORTS_MAP",
    "PORT_UP_MAP",
    "PROG_PIN",
    "Port",
    "PortMaps",
    "QPN_INDEX_SPAN",
    "QpErrEvent",
    "QpError",
    "QpState",
    "REGIONS_MAP",
    "REGION_BY_RKEY",
    "REGION_NONE",
    "RETX_SLOTS",
    "RQ_TAG_USED",
    "RTT_RECENT_CAP",
    "RTT_RECENT_SHIFT",
    "RX_LOCKS",
    "RX_LOCKS_MAP",
    "RX_LOCK_SIZE",
    "RX_LOCK_TRIES",
    "RX_QPS_MAP",
    "RX_SLOTS_MAP",
    "RegionLayout",
    "Retx",
    "RetxCause",
    "RqSnapshot",
    "RqLayout",
    "RqStats",
    "RxQpMaps",
    "SEG_ELEMS_MAX",
    "SOURCE",
    "SQ_DEPTH",
    "SendEvent",
    "SendQpMaps",
    "SpinLock",
    "SqCc",
    "SqSnapshot",
    "SqLayout",
    "SqStats",
    "SqTxStats",
    "TIMELINE_BINS",
    "TIMELINE_MAP",
    "TIMELINE_SHIFT",
    "TIMEOUT_F_REORDER",
    "TIMEOUT_MAX",
    "TX_F_PREV",
    "TX_F_RETX",
    "TX_PORTS_MAP",
    "TX_QPS_MAP",
    "TX_RING_MAP",
    "TxPkt",
    "TxRing",
    "WQE_F_SIGNALED",
    "WQ_MAP",
    "MEMS_MAP",
    "DOORBELL_PIN",
    "Wq",
    "Wqe",
    "kick_frame",
    "doorbell_frame",
    "SendQueue",
    "open_doorbell",
    "DOORBELL_FRAMES_MAX",
    "DOORBELL_IFINDEX",
    "DOORBELL_IFNAME",
    "DOORBELL_NIC_IFNAME",
    "pin_dir",
    "run_kick",
    "packer",
    "rx_lock_slot",
    "seg_size",
    "unpin",
]


def __getattr__(name: str):
    # nic.wire, loaded on first use (PEP 562): see the docstring.
    if name == "wire":
        return importlib.import_module("mrc_nic.nic.wire")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
