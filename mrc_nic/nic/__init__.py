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

Memory regions are slices of one BPF_F_MMAPABLE array (nic_mr) of
MR_ELEM_SIZE-byte elements: NicMaps maps it into the process (mmap of the map
fd), so reading and writing region bytes is plain memory access.

The sending side of a QP (nic_tx_qps: snd_una, snd_nxt, acknowledged PSNs,
retransmit queue), its EVs (nic_evs: state, SKIP expiry, RTT, counters) and
its PSN -> EV table (nic_tx_ring, mmapable, written by the send engine for
every transmission; record_tx does the same from Python, for tests) are set
up and read here too. EventReader decodes every record type of nic_events.

The send engine (in the same program) is driven from here: post_write puts a
work request in a QP's send queue (nic_wq, mmapable), set_port gives the
engine each host port's MACs and device (nic_ports, the devmap nic_tx_ports),
and kick runs the program with BPF_PROG_RUN on live frames, one data packet
per run; the QP's ACKs then clock the rest. The program itself is pinned too
(PROG_PIN), so that a process without bcc can kick.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import errno
import ipaddress
import mmap
import os
import select
import sys
from typing import Any

from mrc_nic import resources
from mrc_nic.kernel import bpfsys, pins, xdp
from mrc_nic.kernel.pins import MapsMissing, pin_dir  # noqa: F401 (re-exported)
from mrc_nic.nic import wire

__all__ = [
    "Counter",
    "EvCause",
    "EvEvent",
    "EvSnapshot",
    "EvState",
    "EvStateLayout",
    "Event",
    "EventReader",
    "Kick",
    "LossEvent",
    "NicMaps",
    "NicProgram",
    "Port",
    "QpErrEvent",
    "QpState",
    "RegionLayout",
    "RetxCause",
    "RqSnapshot",
    "RqState",
    "SendEvent",
    "SqSnapshot",
    "SqState",
    "SqTxStats",
    "TxPkt",
    "Wq",
    "Wqe",
    "kick_frame",
    "pin_dir",
    "run_kick",
    "unpin",
]

BPF_DIR = resources.BPF_DIR
SOURCE = BPF_DIR / "nic_xdp.c"
FUNC_NAME = "nic_xdp"

# Pinned maps (the names BPF gives them, and their file names under pin_dir).
RX_QPS_MAP = "nic_rx_qps"
MR_MAP = "nic_mr"
REGIONS_MAP = "nic_regions"
PORT_UP_MAP = "nic_port_up"
COUNTERS_MAP = "nic_counters"
EVENTS_MAP = "nic_events"
TX_QPS_MAP = "nic_tx_qps"
EVS_MAP = "nic_evs"
TX_RING_MAP = "nic_tx_ring"
WQ_MAP = "nic_wq"
PORTS_MAP = "nic_ports"
TX_PORTS_MAP = "nic_tx_ports"
TIMELINE_MAP = "nic_rx_timeline"
RX_LOCKS_MAP = "nic_rx_locks"
RX_SLOTS_MAP = "nic_rx_slots"
MAP_PINS = (
    RX_QPS_MAP,
    RX_SLOTS_MAP,
    MR_MAP,
    REGIONS_MAP,
    PORT_UP_MAP,
    COUNTERS_MAP,
    EVENTS_MAP,
    TX_QPS_MAP,
    EVS_MAP,
    TX_RING_MAP,
    WQ_MAP,
    PORTS_MAP,
    TX_PORTS_MAP,
    TIMELINE_MAP,
    RX_LOCKS_MAP,
)
# The program itself, pinned next to its maps: BPF_OBJ_GET gives a kicker its fd.
PROG_PIN = "nic_xdp_prog"
# Every pin NicProgram.load makes (the name is historical: the program is one of them).
PINNED_MAPS = (*MAP_PINS, PROG_PIN)

# ---- constants (mirror bpf/nic_consts.h) -----------------------------------------

# Layout constants: not tunable.
MR_ELEM_SIZE = 1024
SEG_ELEMS_MAX = 3  # NIC_SEG_ELEMS_MAX: a data packet's payload fills at most 3 elements


def seg_size(mtu: int = wire.MTU) -> int:
    """NIC_SEG_SIZE: the payload of a full data packet on a lab of IP MTU `mtu`,
    the largest multiple of MR_ELEM_SIZE that fits it, at most SEG_ELEMS_MAX
    elements (1024 on MTU 1500, 2048 from 2128, 3072 from 3152)."""
    fit = wire.payload_max(mtu) // MR_ELEM_SIZE
    if fit < 1:
        raise ValueError(
            f"an IP MTU of {mtu} leaves {wire.payload_max(mtu)} bytes of payload per packet; "
            f"the NIC needs {MR_ELEM_SIZE}: use an MTU of "
            f"{MR_ELEM_SIZE + wire.WRITE_IMM_OVERHEAD} or more"
        )
    return min(fit, SEG_ELEMS_MAX) * MR_ELEM_SIZE


MPR_MAX = 8
BITMAP_BITS = MPR_MAX * wire.MPR_UNIT
BITMAP_WORDS = BITMAP_BITS // 64
MSG_SLOTS = 32
GAP_BINS = 64  # NIC_GAP_BINS: the receive QP's log of long delivery gaps
GAP_MIN_NS = 100_000  # NIC_GAP_MIN_NS: shorter gaps are not logged
GAP_BIN_SHIFT = 26  # NIC_GAP_BIN_SHIFT: a bin of the gap log is 2^26 ns (67 ms)
# The receive locks (docs/nic-program.md, "Receive lock"): QP q's is entry q % RX_LOCKS.
RX_LOCKS = 256  # NIC_RX_LOCKS
RX_LOCK_TRIES = 1024  # NIC_RX_LOCK_TRIES: then the packet is dropped (DROP_RX_BUSY)
RX_LOCK_SIZE = 64  # sizeof(struct nic_rx_lock): 64 bytes each
MSG_F_VALID = 0x1
MSG_F_IMM = 0x2
MAX_QP_EVS = 256
RETX_SLOTS = 256
TX_F_PREV = 0x1
TX_F_RETX = 0x2
# A send QP's queue depth: NIC_MSG_SLOTS WQEs (docs/nic-program.md, "The send engine").
SQ_DEPTH = MSG_SLOTS
ALL_PLANES = (1 << 16) - 1  # a port bitmap with every plane up (MAX_PLANES = 16)

# Tunables: the header's defaults (NicProgram.load passes its own with -D).
DEFAULT_MAX_QPS = 4096  # a power of two: QP q receives in slot q & (max_qps - 1)
RQ_TAG_USED = 0x80000000  # NIC_RQ_TAG_USED: a slot's owner in nic_rx_slots is QPN | this
QPN_INDEX_SPAN = 1 << 16  # a QPN is host << 16 | index (mrc_nic.transport.hostmem)
DEFAULT_MR_ELEMS = 65536  # 64 MiB
DEFAULT_MAX_REGIONS = 256
MAX_HOSTS = 256
MAX_PLANES = 16
DEFAULT_HOST_NET = "198.18.0.0/16"
DEFAULT_EVENT_PAGES = 64
DEFAULT_MAX_EVS = 16384
DEFAULT_TX_RINGS = 256
DEFAULT_SKIP_NS = 100_000  # NIC_SKIP_NS: see docs/nic-program.md, "EV states", for why
LOSS_WALK_MAX = 16  # NIC_LOSS_WALK_MAX (the loader keeps the header's value)
HEAD_SCAN = 8  # NIC_HEAD_SCAN: PSNs per pass of the head scan (two passes per SACK)
HEAD_LOST = 2 * HEAD_SCAN  # NIC_HEAD_LOST: losses one head scan can find
RTT_RECENT_SHIFT = 6  # NIC_RTT_RECENT_SHIFT: the head scan's recent RTT forgets a peak
RTT_RECENT_CAP = 4  # NIC_RTT_RECENT_CAP: a sample counts for at most 4 reorder windows
TIMELINE_SHIFT = 20  # NIC_TIMELINE_SHIFT: a bin of the receive timeline is 2^20 ns
TIMELINE_BINS = 8192  # NIC_TIMELINE_BINS

# A kick's template frame (bpf/nic_structs.h, struct nic_kick): broadcast, EtherType 0x88B5
# (IEEE 802 local experimental), zero padding to 64 bytes; the engine overwrites it.
KICK_ETHERTYPE = 0x88B5
KICK_TEMPLATE = bytes.fromhex("ffffffffffff000000000000") + KICK_ETHERTYPE.to_bytes(2, "big")
KICK_TEMPLATE += bytes(64 - len(KICK_TEMPLATE))
# Room for the frame a non-live kick run returns (metadata + the largest data packet).
_KICK_OUT = 4096

# bpf(2) flags this module needs beyond bpfsys's.
BPF_F_LOCK = 4
BPF_F_MMAPABLE = 1 << 10
BPF_MAP_TYPE_RINGBUF = 27


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
    SACK = 2
    NACK_TRIMMED = 3
    NACK_TRIMMED_LASTHOP = 4
    NACK_OOR = 5
    NACK_NO_RESOURCE = 6
    NACK_REM_ACCESS = 7
    DROP_TRUNCATED = 8
    DROP_SHORT = 9
    DROP_BAD_LEN = 10
    DROP_TOO_LONG = 11
    DROP_BAD_OPCODE = 12
    DROP_IMM_NOT_LAST = 13
    DROP_UNKNOWN_QP = 14
    DROP_SPOOFED = 15
    DROP_QP_STATE = 16
    DROP_QP_CONFIG = 17
    DROP_BAD_VA = 18
    DROP_BAD_MSN = 19
    DROP_XDP_ERR = 20
    PLACED = 21
    PLACED_BYTES = 22
    DUP = 23
    MSG_DONE = 24
    EVENTS = 25
    EVENTS_LOST = 26
    PROBE_REPLY = 27
    ACK_CONSUMED = 28
    ACK_STALE = 29
    PROBE_REPLY_CONSUMED = 30
    DROP_BAD_ACK = 31
    DROP_ACK_RANGE = 32
    ACKED = 33
    LOST = 34
    RETX_QUEUED = 35
    UNKNOWN_EV = 36
    KICK_SENT = 37
    KICK_IDLE = 38
    TX_DATA = 39
    TX_RETX = 40
    TX_BYTES = 41
    TX_CLOCKED = 42
    TX_WINDOW_FULL = 43
    TX_NO_EV = 44
    TX_BAD_WQE = 45
    TX_REDIRECT_ERR = 46
    SEND_DONE = 47
    TIMEOUT_KICKS = 48
    TIMEOUT_QUEUED = 49
    LOST_HEAD = 50
    CWND_KICKS = 51
    EV_REPLACED = 52
    DROP_RX_BUSY = 53


COUNTER_SLOTS = len(Counter)  # NIC_CNT_MAX


class EventType(enum.IntEnum):
    """enum nic_event_type."""

    RECV_IMM = 1
    EV_STATE = 2
    LOSS = 3
    QP_ERR = 4
    SEND_DONE = 5


class EvState(enum.IntEnum):
    """NIC_EVS_*: the OCP API's enum mrc_ctl_ev_state values, plus SKIP (mrc-nic's)."""

    GOOD = 0x1
    ASSUMED_BAD = 0x2
    DENIED = 0x4
    SKIP = 0x10000
    UNKNOWN = 0x80000000


class EvCause(enum.IntEnum):
    """enum nic_ev_cause: why an EV changed state (EvEvent.cause)."""

    LOSS = 1
    PROBE_REPLY = 2
    TIMEOUT = 3


class RetxCause(enum.IntEnum):
    """enum nic_retx_cause: why a PSN is in the retransmit queue."""

    NACK = 1
    LOST = 2
    TIMEOUT = 3


# ---- ctypes views of the structs of bpf/nic_structs.h ------------------------------


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
        ("first_place_ns", ctypes.c_uint64),
        ("last_place_ns", ctypes.c_uint64),
        ("max_gap_ns", ctypes.c_uint64),
        ("max_gap_end_ns", ctypes.c_uint64),
    ]


class GapBin(ctypes.Structure):
    """struct nic_gap_bin: the longest delivery gap that ended in one bin of time."""

    _fields_ = [("end_ns", ctypes.c_uint64), ("gap_ns", ctypes.c_uint64)]


class SpinLock(ctypes.Structure):
    """struct bpf_spin_lock: the kernel never copies it to or from user space (reads 0)."""

    _fields_ = [("val", ctypes.c_uint32)]


class RqState(ctypes.Structure):
    """struct nic_rq: the receiving side of one QP (map nic_rx_qps, slot rx_slot(qpn))."""

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
        ("gaps", GapBin * GAP_BINS),
    ]


def rx_lock_slot(qpn: int) -> int:
    """The entry of nic_rx_locks that is QP qpn's receive lock (shared by QPs
    whose numbers agree modulo RX_LOCKS)."""
    pins.check_range("qpn", qpn, wire.QPN_MASK)
    return qpn % RX_LOCKS


class RegionLayout(ctypes.Structure):
    """struct nic_region: one region, a slice of nic_mr (map nic_regions)."""

    _fields_ = [
        ("base_va", ctypes.c_uint64),
        ("first_elem", ctypes.c_uint32),
        ("n_elems", ctypes.c_uint32),
        ("rkey", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class Retx(ctypes.Structure):
    """struct nic_retx: one entry of a send QP's retransmit queue."""

    _fields_ = [
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("cause", ctypes.c_uint8),
        ("nack_reason", ctypes.c_uint8),
    ]


class SqStats(ctypes.Structure):
    """struct nic_sq_stats: per-send-QP counters, written by BPF."""

    _fields_ = [
        ("sacks", ctypes.c_uint64),
        ("nacks", ctypes.c_uint64),
        ("stale_acks", ctypes.c_uint64),
        ("dup_acks", ctypes.c_uint64),
        ("acked_pkts", ctypes.c_uint64),
        ("lost_pkts", ctypes.c_uint64),
        ("retx_queued", ctypes.c_uint64),
        ("retx_overflow", ctypes.c_uint64),
        ("fatal_nacks", ctypes.c_uint64),
    ]


class SqTxStats(ctypes.Structure):
    """struct nic_sq_tx_stats: the send engine's per-QP counters."""

    _fields_ = [
        ("data_pkts", ctypes.c_uint64),
        ("data_bytes", ctypes.c_uint64),
        ("retx_pkts", ctypes.c_uint64),
        ("retx_stale", ctypes.c_uint64),
        ("window_full", ctypes.c_uint64),
        ("wqes_done", ctypes.c_uint64),
    ]


class SqCc(ctypes.Structure):
    """struct nic_sq_cc: a send QP's congestion signals (mrc-nic extension), written by
    BPF per ACK: what NSCC (mrc_nic.transport.nscc) reads as differences between two reads."""

    _fields_ = [
        ("rtt_target_ns", ctypes.c_uint64),
        ("acks", ctypes.c_uint64),
        ("ecn_acks", ctypes.c_uint64),
        ("pkts_lo", ctypes.c_uint64),
        ("pkts_hi", ctypes.c_uint64),
        ("pkts_ecn_lo", ctypes.c_uint64),
        ("pkts_ecn_hi", ctypes.c_uint64),
        ("headroom", ctypes.c_uint64),
        ("rtt_samples", ctypes.c_uint64),
        ("rtt_sum_ns", ctypes.c_uint64),
        ("rtt_min_ns", ctypes.c_uint64),
        ("trims", ctypes.c_uint64),
        ("trims_lasthop", ctypes.c_uint64),
        ("cwnd_sets", ctypes.c_uint64),
    ]


class SqState(ctypes.Structure):
    """struct nic_sq: the sending side of one QP (map nic_tx_qps, key = QPN)."""

    _fields_ = [
        ("lock", SpinLock),
        ("state", ctypes.c_uint32),
        ("local_host", ctypes.c_uint32),
        ("peer_host", ctypes.c_uint32),
        ("peer_qpn", ctypes.c_uint32),
        ("mpr", ctypes.c_uint32),
        ("ring", ctypes.c_uint32),
        ("n_evs", ctypes.c_uint32),
        ("ev_min_active", ctypes.c_uint32),
        ("snd_una", ctypes.c_uint32),
        ("snd_nxt", ctypes.c_uint32),
        ("retx_head", ctypes.c_uint32),
        ("retx_tail", ctypes.c_uint32),
        ("peer_ports", ctypes.c_uint32),
        ("reo_wnd_ns", ctypes.c_uint32),
        ("scan_psn", ctypes.c_uint32),
        ("acked", ctypes.c_uint64 * BITMAP_WORDS),
        ("echoed", ctypes.c_uint64 * BITMAP_WORDS),
        ("retx", ctypes.c_uint64 * BITMAP_WORDS),
        ("stats", SqStats),
        ("retxq", Retx * RETX_SLOTS),
        ("evs", ctypes.c_uint16 * MAX_QP_EVS),
        ("engine", ctypes.c_uint32),
        ("cwnd", ctypes.c_uint32),
        ("snd_msn", ctypes.c_uint32),
        ("wqe_sent", ctypes.c_uint32),
        ("wqe_done", ctypes.c_uint32),
        ("wqe_off", ctypes.c_uint32),
        ("ev_next", ctypes.c_uint32),
        ("rtt_recent_ns", ctypes.c_uint32),
        ("wqe_last_psn", ctypes.c_uint32 * MSG_SLOTS),
        ("tx_stats", SqTxStats),
        ("cc", SqCc),
    ]


class EvKey(ctypes.Structure):
    """struct nic_ev_key: (send QPN, EV value), the key of nic_evs."""

    _fields_ = [("qpn", ctypes.c_uint32), ("ev", ctypes.c_uint32)]


class EvStats(ctypes.Structure):
    """struct nic_ev_stats: per-EV counters (tx_* and retx_pkts: the send engine's)."""

    _fields_ = [
        ("tx_pkts", ctypes.c_uint64),
        ("tx_bytes", ctypes.c_uint64),
        ("retx_pkts", ctypes.c_uint64),
        ("acks", ctypes.c_uint64),
        ("nack_trimmed", ctypes.c_uint64),
        ("nack_trimmed_lasthop", ctypes.c_uint64),
        ("nack_oor", ctypes.c_uint64),
        ("nack_no_resource", ctypes.c_uint64),
        ("nack_fatal", ctypes.c_uint64),
        ("ecn_marks", ctypes.c_uint64),
        ("lost_pkts", ctypes.c_uint64),
        ("retx_queued", ctypes.c_uint64),
        ("skips", ctypes.c_uint64),
        ("rtt_samples", ctypes.c_uint64),
        ("probe_replies", ctypes.c_uint64),
    ]


class EvStateLayout(ctypes.Structure):
    """struct nic_ev: one EV of one send QP (map nic_evs)."""

    _fields_ = [
        ("lock", SpinLock),
        ("plane", ctypes.c_uint32),
        ("state", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("skip_until", ctypes.c_uint64),
        ("rtt_last", ctypes.c_uint64),
        ("rtt_min", ctypes.c_uint64),
        ("srtt", ctypes.c_uint64),
        ("last_tx_psn", ctypes.c_uint32),
        ("last_tx_cpu", ctypes.c_uint32),
        ("last_tx_ts", ctypes.c_uint64),
        ("stats", EvStats),
    ]


class TxPkt(ctypes.Structure):
    """struct nic_tx_pkt: one transmission in a send QP's PSN -> EV table (nic_tx_ring)."""

    _fields_ = [
        ("tx_ts", ctypes.c_uint64),
        ("psn", ctypes.c_uint32),
        ("prev_psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("flags", ctypes.c_uint16),
        ("len", ctypes.c_uint32),
        ("wqe", ctypes.c_uint32),
        ("msg_off", ctypes.c_uint32),
    ]


class TxRing(ctypes.Structure):
    """struct nic_tx_ring: one send QP's table, entry psn % BITMAP_BITS."""

    _fields_ = [("pkts", TxPkt * BITMAP_BITS)]


class Wqe(ctypes.Structure):
    """struct nic_wqe: one work request of a send queue."""

    _fields_ = [
        ("wr_id", ctypes.c_uint64),
        ("remote_va", ctypes.c_uint64),
        ("rkey", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("src_region", ctypes.c_uint32),
        ("src_off", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("opcode", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 3),
    ]


class Wq(ctypes.Structure):
    """struct nic_wq: one send QP's queue (map nic_wq, key = the QP's ring)."""

    _fields_ = [
        ("posted", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("wqes", Wqe * SQ_DEPTH),
    ]


class Kick(ctypes.Structure):
    """struct nic_kick: the XDP metadata of a kick frame."""

    _fields_ = [
        ("qpn", ctypes.c_uint32),
        ("op", ctypes.c_uint16),
        ("arg", ctypes.c_uint16),
        ("age_ns", ctypes.c_uint64),
    ]


class KickOp(enum.IntEnum):
    """enum nic_kick_op."""

    SEND = 0
    TIMEOUT = 1
    CWND = 2  # mrc-nic extension: congestion control sets cwnd (docs/nic-program.md, "Kicks")
    EV_REPLACE = 3  # a new EV in a profile slot (OCP: MRC_CTL_EV_OP_REPLACE_EV)


TIMEOUT_MAX = 64  # NIC_TIMEOUT_MAX: PSNs one timeout kick queues, at most


class Port(ctypes.Structure):
    """struct nic_port: a host port's MACs (map nic_ports, key = host * MAX_PLANES + plane)."""

    _fields_ = [
        ("mac", ctypes.c_uint8 * 6),
        ("nh_mac", ctypes.c_uint8 * 6),
        ("ifindex", ctypes.c_uint32),
    ]


class _Record(ctypes.Structure):
    """A record of the ring buffer nic_events: 40 bytes, type and qpn first, ts last."""

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name, *_ in self._fields_ if name != "reserved"}


class Event(_Record):
    """struct nic_event: one record of the ring buffer nic_events (NIC_EV_RECV_IMM)."""

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


class EvEvent(_Record):
    """struct nic_ev_event: an EV changed state (NIC_EV_EV_STATE)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("old_state", ctypes.c_uint32),
        ("new_state", ctypes.c_uint32),
        ("cause", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class LossEvent(_Record):
    """struct nic_loss_event: a PSN declared lost and queued (NIC_EV_LOSS)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("tx_ts", ctypes.c_uint64),
        ("ack_psn", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class QpErrEvent(_Record):
    """struct nic_qp_err_event: a send QP went to ERR on a fatal NACK (NIC_EV_QP_ERR)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("syndrome", ctypes.c_uint32),
        ("reason", ctypes.c_uint32),
        ("reserved", ctypes.c_uint64),
        ("ts", ctypes.c_uint64),
    ]


class SendEvent(_Record):
    """struct nic_send_event: a WQE completed, every packet acknowledged (NIC_EV_SEND_DONE)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("last_psn", ctypes.c_uint32),
        ("wr_id", ctypes.c_uint64),
        ("len", ctypes.c_uint32),
        ("wqe", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


AnyEvent = Event | EvEvent | LossEvent | QpErrEvent | SendEvent

# Event type -> record layout; every record is ctypes.sizeof(Event) bytes.
EVENT_LAYOUTS: dict[int, type[ctypes.Structure]] = {
    EventType.RECV_IMM: Event,
    EventType.EV_STATE: EvEvent,
    EventType.LOSS: LossEvent,
    EventType.QP_ERR: QpErrEvent,
    EventType.SEND_DONE: SendEvent,
}


# ---- pins -------------------------------------------------------------------


def unpin(lab: str) -> None:
    """Remove the pins this module made for a lab (only nic_*), then its directory if empty."""
    pins.unpin(lab, PINNED_MAPS)


# ---- kicks: the send engine run from user space -------------------------------------


def kick_frame(qpn: int, op: KickOp = KickOp.SEND, arg: int = 0, age_ns: int = 0) -> bytes:
    """BPF_PROG_RUN's data_in for a kick of QP qpn: the metadata, then the template."""
    pins.check_range("qpn", qpn, wire.QPN_MASK)
    pins.check_range("arg", arg, 0xFFFF)
    pins.check_range("age_ns", age_ns, pins.U64_MAX)
    return bytes(Kick(qpn=qpn, op=op, arg=arg, age_ns=age_ns)) + KICK_TEMPLATE


LIVE_BATCH_MAX = 256  # frames per batch of a live-frames BPF_PROG_RUN, at most


def run_kick(
    prog_fd: int,
    qpn: int,
    packets: int,
    *,
    live: bool = True,
    batch_size: int = 0,
    op: KickOp = KickOp.SEND,
    arg: int = 0,
    age_ns: int = 0,
) -> bpfsys.TestRunResult:
    """Run the send engine `packets` times for QP qpn; each run sends at most one packet.

    live: with BPF_F_TEST_XDP_LIVE_FRAMES, every packet really leaves through
    the devmap nic_tx_ports (batch_size frames per batch; 0: the kernel's 64),
    and nothing comes back but the mean run time (duration, ns). Not live:
    the runs reuse one buffer, and data_out is the last run's frame (the
    metadata stripped); nothing is sent. The counters say what the runs did
    (kick_sent, kick_idle and the tx_* extras). op and arg: struct nic_kick's
    (every run of a TIMEOUT kick queues; NicMaps.timeout_kick runs one).
    """
    if not (isinstance(packets, int) and 1 <= packets <= pins.U32_MAX):
        raise ValueError(f"packets must be a positive integer, not {packets!r}")
    data = kick_frame(qpn, op, arg, age_ns)
    meta = ctypes.sizeof(Kick)
    ctx = bytes(bpfsys.XdpMd(data=meta, data_end=len(data)))
    if live:
        return bpfsys.prog_test_run(
            prog_fd,
            data,
            repeat=packets,
            data_size_out=0,
            ctx_in=ctx,
            flags=bpfsys.BPF_F_TEST_XDP_LIVE_FRAMES,
            # The kernel refuses larger batches (TEST_XDP_MAX_BATCH) with E2BIG.
            batch_size=min(batch_size, LIVE_BATCH_MAX),
        )
    result = bpfsys.prog_test_run(
        prog_fd,
        data,
        repeat=packets,
        data_size_out=_KICK_OUT,
        ctx_in=ctx,
        ctx_size_out=ctypes.sizeof(bpfsys.XdpMd),
    )
    start = bpfsys.XdpMd.from_buffer_copy(result.ctx_out).data
    return result._replace(data_out=result.data_out[start:])


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
    max_evs: int = DEFAULT_MAX_EVS
    tx_rings: int = DEFAULT_TX_RINGS
    skip_ns: int = DEFAULT_SKIP_NS

    def cflags(self) -> list[str]:
        return [
            f"-I{BPF_DIR}",
            f"-DNIC_HOST_NET={int(self.host_net.network_address):#010x}U",
            f"-DNIC_MAX_QPS={self.max_qps}",
            f"-DNIC_MR_ELEMS={self.mr_elems}",
            f"-DNIC_MAX_REGIONS={self.max_regions}",
            f"-DNIC_EVENT_PAGES={self.event_pages}",
            f"-DMRC_MTU={self.mtu}",
            f"-DNIC_MAX_EVS={self.max_evs}",
            f"-DNIC_TX_RINGS={self.tx_rings}",
            f"-DNIC_SKIP_NS={self.skip_ns}ULL",
        ]

    def check(self) -> None:
        if self.host_net.prefixlen > 16:
            raise ValueError(
                f"host_net must be a /16 or larger (one /24 per plane): {self.host_net}"
            )
        for name in ("max_qps", "mr_elems", "max_regions", "max_evs", "tx_rings"):
            value = getattr(self, name)
            if not (isinstance(value, int) and 1 <= value <= pins.U32_MAX // MR_ELEM_SIZE):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.max_qps & (self.max_qps - 1) or not 2 <= self.max_qps <= QPN_INDEX_SPAN:
            raise ValueError(
                f"max_qps must be a power of two from 2 to {QPN_INDEX_SPAN} (QPN & "
                f"(max_qps - 1) picks a QP's receive slot, within the QPN's index "
                f"bits), not {self.max_qps}"
            )
        pages = self.event_pages
        if not (isinstance(pages, int) and pages >= 1 and pages & (pages - 1) == 0):
            raise ValueError(f"event_pages must be a power of two, not {pages!r}")
        if wire.payload_max(self.mtu) <= 0:
            raise ValueError(f"mtu {self.mtu} is too small for a data packet")
        if not (isinstance(self.skip_ns, int) and 0 <= self.skip_ns < 1 << 63):
            raise ValueError(f"skip_ns must be a non-negative integer, not {self.skip_ns!r}")


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
        max_evs: int = DEFAULT_MAX_EVS,
        tx_rings: int = DEFAULT_TX_RINGS,
        skip_ns: int = DEFAULT_SKIP_NS,
    ) -> NicProgram:
        """Compile bpf/nic_xdp.c for a lab and pin its maps under pin_dir(lab).

        host_net is the lab's host network (topology's ``hosts``): the program
        checks that data comes from the QP's peer and goes to its local host
        on one plane of it. mr_elems sizes the memory of every region of the
        lab together, in MR_ELEM_SIZE-byte elements. max_evs is the number
        of (send QP, EV) entries of the lab, tx_rings the number of send QPs
        with a PSN -> EV table, skip_ns how long an EV stays in SKIP after an
        ECN mark or a fabric trim (NIC_SKIP_NS). Refuses (FileExistsError)
        when the lab's NIC maps are already pinned.
        """
        config = NicConfig(
            host_net=ipaddress.IPv4Network(host_net),
            max_qps=max_qps,
            mr_elems=mr_elems,
            max_regions=max_regions,
            event_pages=event_pages,
            mtu=mtu,
            max_evs=max_evs,
            tx_rings=tx_rings,
            skip_ns=skip_ns,
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
                for name in MAP_PINS:
                    bpfsys.obj_pin(bpf[name.encode()].map_fd, directory / name)
                bpfsys.obj_pin(func.fd, directory / PROG_PIN)
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
        xdp.attach(ipr, ifindex, self.fd, mode)

    @staticmethod
    def detach(ipr: Any, ifindex: int, *, mode: str = "native") -> None:
        """Remove whatever XDP program is attached to an interface in that mode."""
        xdp.detach(ipr, ifindex, mode)

    def kick(
        self, qpn: int, packets: int, *, live: bool = True, batch_size: int = 0
    ) -> bpfsys.TestRunResult:
        """Run the send engine for a QP, `packets` times (see run_kick)."""
        return run_kick(self.fd, qpn, packets, live=live, batch_size=batch_size)

    def close(self) -> None:
        """Drop this process's references; attached ports and pins keep the rest."""
        self.bpf.cleanup()


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
    # Delivery gaps of at least GAP_MIN_NS, (end_ns, gap_ns) by end, the longest
    # of each 67 ms bin of the last 4.3 s (struct nic_gap_bin)
    long_gaps: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    @property
    def window(self) -> int:
        return self.mpr * wire.MPR_UNIT


@dataclasses.dataclass
class SqSnapshot:
    """The send state of one QP, read under its lock."""

    qpn: int
    state: QpState | int
    local_host: int
    peer_host: int
    peer_qpn: int
    mpr: int
    ring: int
    evs: list[int]  # the EV profile, in order
    ev_min_active: int
    snd_una: int
    snd_nxt: int
    peer_ports: int
    reo_wnd_ns: int  # the head scan's reorder window (0: off)
    acked: list[int]  # PSNs in [snd_una, snd_nxt) acknowledged (out of order)
    retx_pending: list[int]  # PSNs in [snd_una, snd_nxt) queued and not resent yet
    retx_queue: list[dict[str, int]]  # the queue, oldest first (see NicMaps.retx_queue)
    stats: dict[str, int]
    # the send engine
    engine: bool = False
    cwnd: int = 0  # 0: the window
    snd_msn: int = 0  # MSN of WQE wqe_sent
    wqe_sent: int = 0  # WQEs whose every packet has been sent once
    wqe_done: int = 0  # WQEs completed
    wqe_off: int = 0  # bytes of WQE wqe_sent sent
    ev_next: int = 0  # the EV round robin's cursor
    tx_stats: dict[str, int] = dataclasses.field(default_factory=dict)
    cc: dict[str, int] = dataclasses.field(default_factory=dict)  # struct nic_sq_cc
    rtt_recent_ns: int = 0  # the head scan's largest recent RTT (BPF's; docs/nic-program.md)

    @property
    def window(self) -> int:
        return self.mpr * wire.MPR_UNIT

    @property
    def in_flight(self) -> int:
        return (self.snd_nxt - self.snd_una) & wire.PSN_MASK

    @property
    def window_free(self) -> int:
        """PSNs the engine may still send: window - in flight."""
        return self.window - self.in_flight

    @property
    def in_network(self) -> int:
        """Packets that may still draw a SACK: in flight, neither acknowledged
        nor queued for retransmission (lost ones not found yet count too)."""
        return self.in_flight - len(self.acked) - len(self.retx_pending)


@dataclasses.dataclass
class EvSnapshot:
    """One EV of a send QP, read under its lock."""

    qpn: int
    ev: int
    plane: int
    state: EvState | int
    skip_until: int  # bpf_ktime_get_ns() (CLOCK_MONOTONIC) at which a SKIP ends
    rtt_last: int  # ns; 0: no sample yet
    rtt_min: int
    srtt: int
    last_tx_psn: int
    last_tx_ts: int
    stats: dict[str, int]


class NicMaps:
    """QPs (both sides), EVs, regions, port bitmaps and counters of a lab, through the pins."""

    def __init__(self, lab: str, fds: dict[str, int]) -> None:
        self.lab = lab
        self._fds = fds
        self.max_regions = bpfsys.map_info(fds[REGIONS_MAP]).max_entries
        self.max_qps = bpfsys.map_info(fds[RX_QPS_MAP]).max_entries
        self.mr_elems = bpfsys.map_info(fds[MR_MAP]).max_entries
        self.tx_rings = bpfsys.map_info(fds[TX_RING_MAP]).max_entries
        self._mr: mmap.mmap | None = None
        self._ring: mmap.mmap | None = None
        self._wq: mmap.mmap | None = None
        self._prog_fd: int | None = None

    @classmethod
    def open(cls, lab: str) -> NicMaps:
        """Open the pinned NIC maps of a lab (MapsMissing if the lab is not up)."""
        directory = pin_dir(lab)
        expected = {
            RX_QPS_MAP: ctypes.sizeof(RqState),
            RX_SLOTS_MAP: 4,
            MR_MAP: MR_ELEM_SIZE,
            REGIONS_MAP: ctypes.sizeof(RegionLayout),
            PORT_UP_MAP: 4,
            COUNTERS_MAP: 8,
            TX_QPS_MAP: ctypes.sizeof(SqState),
            EVS_MAP: ctypes.sizeof(EvStateLayout),
            TX_RING_MAP: ctypes.sizeof(TxRing),
            WQ_MAP: ctypes.sizeof(Wq),
            PORTS_MAP: ctypes.sizeof(Port),
            TX_PORTS_MAP: 4,
        }
        fds: dict[str, int] = {}
        try:
            for name in MAP_PINS:
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
        for view in (self._mr, self._ring, self._wq):
            if view is not None:
                view.close()
        self._mr = self._ring = self._wq = None
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        if self._prog_fd is not None:
            os.close(self._prog_fd)
            self._prog_fd = None

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
        owner = self._rx_slot_owner(qpn)
        if owner not in (0, qpn | RQ_TAG_USED):
            holder = owner & wire.QPN_MASK
            raise FileExistsError(
                errno.EEXIST,
                f"QP {qpn:#x} cannot receive: its receive slot {self.rx_slot(qpn)} "
                f"(QPN & {self.max_qps - 1:#x}) is QP {holder:#x}'s. "
                f"Use a QPN that differs from it in the low {self.max_qps.bit_length() - 1} "
                f"bits, or free the slot first (NicMaps.delete_rq({holder:#x}))",
            )
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
        # The slot first, then its owner (and a QP set up again loses its owner
        # meanwhile): a packet that arrives after the write finds the new value
        # whole. One that passed the owner check before it may still finish
        # on the old or a mixed value (docs/nic-program.md, "Receive QPs").
        if owner:
            bpfsys.map_update(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), _u32(0))
        bpfsys.map_update(self._fds[RX_QPS_MAP], self._rx_key(qpn), bytes(value))
        bpfsys.map_update(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), _u32(qpn | RQ_TAG_USED))

    def rx_slot(self, qpn: int) -> int:
        """The slot of nic_rx_qps (and nic_rx_slots) where QP qpn receives."""
        return qpn & (self.max_qps - 1)

    def _rx_key(self, qpn: int) -> bytes:
        return _u32(self.rx_slot(qpn))

    def _rx_slot_owner(self, qpn: int) -> int:
        """The owner word of QP qpn's receive slot: QPN | RQ_TAG_USED, or 0."""
        raw = bpfsys.map_lookup(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), 4)
        return int.from_bytes(raw, sys.byteorder)

    def _check_rx_owner(self, qpn: int) -> None:
        """KeyError unless QP qpn owns its receive slot. One writer per slot is
        assumed (the daemons' QPNs never share one): a check and the access
        after it are two syscalls."""
        if qpn & ~wire.QPN_MASK or self._rx_slot_owner(qpn) != qpn | RQ_TAG_USED:
            raise KeyError(f"no receive state for QP {qpn:#x}")

    def rq_raw(self, qpn: int) -> RqState:
        """The receive state of a QP as stored, read under its lock (KeyError if none)."""
        self._check_rx_owner(qpn)
        raw = _locked_lookup(self._fds[RX_QPS_MAP], self._rx_key(qpn), ctypes.sizeof(RqState))
        self._check_rx_owner(qpn)  # not deleted (nor replaced) while we read
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
            long_gaps=sorted((g.end_ns, g.gap_ns) for g in raw.gaps if g.end_ns),
        )

    def set_rq_state(self, qpn: int, state: QpState) -> None:
        """Change the state of a QP, keeping the rest (KeyError if none).

        Read and write each take the value's bpf_spin_lock, which the
        program does not take (it takes the QP's receive lock, nic_rx_locks):
        the updates of a packet processed between them are lost, and a write
        during one can mix two states (a new cum_psn with stale bitmap bits:
        a later PSN taken for a duplicate, never placed). Only for
        transitions made while no data flows to the QP, and for ERR/RESET.
        TODO: when the daemon moves live QPs (RTR -> RTS under traffic), keep
        the state word in a map BPF does not write, or change it by a kick.
        """
        value = self.rq_raw(qpn)
        value.state = QpState(state)
        self._check_rx_owner(qpn)
        bpfsys.map_update(self._fds[RX_QPS_MAP], self._rx_key(qpn), bytes(value), flags=BPF_F_LOCK)

    def delete_rq(self, qpn: int) -> None:
        """Forget a QP's receive state (KeyError if none): its packets are
        dropped, and its slot is free for another QP."""
        self._check_rx_owner(qpn)
        # The owner first, then the slot: the program stops using it before it is wiped.
        bpfsys.map_update(self._fds[RX_SLOTS_MAP], self._rx_key(qpn), _u32(0))
        bpfsys.map_update(self._fds[RX_QPS_MAP], self._rx_key(qpn), bytes(RqState()))

    # -- regions ------------------------------------------------------------------

    def set_region(
        self, region: int, *, first_elem: int, n_elems: int, rkey: int, base_va: int = 0
    ) -> None:
        """Define region `region` as n_elems elements of nic_mr from first_elem."""
        pins.check_range("region", region, self.max_regions - 1)
        pins.check_range("rkey", rkey, pins.U32_MAX)
        pins.check_range("base_va", base_va, pins.U64_MAX)
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
        pins.check_range("bitmap", bitmap, pins.U32_MAX)
        bpfsys.map_update(self._fds[PORT_UP_MAP], _u32(host), _u32(bitmap))

    def port_bitmap(self, host: int) -> int:
        pins.check_range("host", host, MAX_HOSTS - 1)
        return int.from_bytes(bpfsys.map_lookup(self._fds[PORT_UP_MAP], _u32(host), 4), "little")

    def counters(self) -> dict[str, int]:
        """Outcome counters (Counter names, lower case), summed over CPUs."""
        return {c.name.lower(): self.counter(c) for c in Counter}

    def counter(self, which: Counter) -> int:
        """One outcome counter, summed over CPUs."""
        values = bpfsys.map_lookup_percpu(self._fds[COUNTERS_MAP], _u32(which), 8)
        return sum(int.from_bytes(v, "little") for v in values)

    def rx_lock_taken(self, qpn: int) -> bool:
        """Is QP qpn's receive lock taken right now? (It is held for about 30 ns
        per packet; one seen taken twice apart means a holder that never let go.)"""
        raw = bpfsys.map_lookup(self._fds[RX_LOCKS_MAP], _u32(rx_lock_slot(qpn)), RX_LOCK_SIZE)
        return int.from_bytes(raw[:8], "little") != 0

    def set_rx_lock(self, qpn: int, taken: bool) -> None:
        """Take or free QP qpn's receive lock from user space: what a holder held
        up looks like to the receiver (tests). Freeing a lock a packet holds
        lets a second one in: only while no traffic runs."""
        value = (1 if taken else 0).to_bytes(8, "little") + bytes(RX_LOCK_SIZE - 8)
        bpfsys.map_update(self._fds[RX_LOCKS_MAP], _u32(rx_lock_slot(qpn)), value)

    def rx_timeline(self) -> dict[int, int]:
        """Payload bytes placed per timeline bin (bin = ktime_ns >> TIMELINE_SHIFT),
        summed over CPUs: the last TIMELINE_BINS bins of the whole lab, one batch read."""
        slot = bpfsys.percpu_slot_size(16)
        value_size = slot * bpfsys.possible_cpus()
        bins: dict[int, int] = {}
        entries = bpfsys.map_lookup_batch(
            self._fds[TIMELINE_MAP], 4, value_size, chunk=TIMELINE_BINS
        )
        for _key, value in entries:
            for at in range(0, value_size, slot):
                b = int.from_bytes(value[at : at + 8], "little")
                n = int.from_bytes(value[at + 8 : at + 16], "little")
                if n:
                    bins[b] = bins.get(b, 0) + n
        return bins

    def events(self) -> EventReader:
        """A reader of the event ring buffer (one consumer at a time)."""
        return EventReader(self._fds[EVENTS_MAP])

    # -- send QPs -----------------------------------------------------------------------

    def setup_sq(
        self,
        qpn: int,
        *,
        local_host: int,
        peer_host: int,
        peer_qpn: int,
        ring: int,
        evs: dict[int, int],
        mpr: int = 1,
        state: QpState = QpState.RTS,
        psn: int = 0,
        snd_nxt: int | None = None,
        ev_min_active: int = 0,
        engine: bool = False,
        cwnd: int = 0,
        msn: int = 0,
        peer_ports: int = ALL_PLANES,
        reo_wnd_ns: int = 0,
        cc_rtt_target_ns: int = 0,
    ) -> None:
        """Create (or reset) the send state of a QP, its EVs, its PSN -> EV table and
        its send queue.

        evs is the EV profile, {EV value: plane}, in the order the engine
        uses them; every EV starts GOOD with zero counters. snd_una = psn and
        snd_nxt = snd_nxt (default psn: nothing in flight); the send engine
        advances snd_nxt, tests set it here. engine: the send engine serves
        the QP (post_write, kick, the ACK clock); cwnd: most packets in flight
        (0: the window); msn: the MSN of the first WQE; peer_ports: the
        peer's port bitmap until its first ACK says otherwise; reo_wnd_ns:
        the head scan's reorder window (0: off; docs/nic-program.md, "Loss detection");
        cc_rtt_target_ns: the RTT that splits its congestion signals (struct
        nic_sq_cc; later changes go with the window, cwnd_kick).
        The whole values are written: do it before packets flow for this QP.
        """
        pins.check_range("qpn", qpn, wire.QPN_MASK)
        pins.check_range("local_host", local_host, MAX_HOSTS - 2)
        pins.check_range("peer_host", peer_host, MAX_HOSTS - 2)
        pins.check_range("peer_qpn", peer_qpn, wire.QPN_MASK)
        pins.check_range("ring", ring, self.tx_rings - 1)
        if not (isinstance(mpr, int) and 1 <= mpr <= MPR_MAX):
            raise ValueError(f"mpr must be an integer in [1, {MPR_MAX}], not {mpr!r}")
        pins.check_range("psn", psn, wire.PSN_MASK)
        snd_nxt = psn if snd_nxt is None else snd_nxt
        pins.check_range("snd_nxt", snd_nxt, wire.PSN_MASK)
        if wire.psn_diff(snd_nxt, psn) not in range(mpr * wire.MPR_UNIT + 1):
            raise ValueError(
                f"snd_nxt {snd_nxt} must be psn {psn} plus at most the window "
                f"({mpr * wire.MPR_UNIT} PSNs)"
            )
        if not 1 <= len(evs) <= MAX_QP_EVS:
            raise ValueError(f"a QP needs 1 to {MAX_QP_EVS} EVs, not {len(evs)}")
        for ev, plane in evs.items():
            pins.check_range("ev", ev, wire.EV_MAX)
            if ev == wire.EV_INVALID:
                raise ValueError("EV 0 is invalid")
            pins.check_range("plane", plane, MAX_PLANES - 1)
        pins.check_range("ev_min_active", ev_min_active, len(evs))
        pins.check_range("cwnd", cwnd, pins.U32_MAX)
        pins.check_range("msn", msn, wire.MSN_MASK)
        pins.check_range("peer_ports", peer_ports, pins.U32_MAX)
        pins.check_range("reo_wnd_ns", reo_wnd_ns, pins.U32_MAX)
        pins.check_range("cc_rtt_target_ns", cc_rtt_target_ns, pins.U64_MAX)
        value = SqState(
            state=QpState(state),
            local_host=local_host,
            peer_host=peer_host,
            peer_qpn=peer_qpn,
            mpr=mpr,
            ring=ring,
            n_evs=len(evs),
            ev_min_active=ev_min_active,
            snd_una=psn,
            snd_nxt=snd_nxt,
            peer_ports=peer_ports,
            reo_wnd_ns=reo_wnd_ns,
            engine=int(bool(engine)),
            cwnd=cwnd,
            snd_msn=msn,
            cc=SqCc(rtt_target_ns=cc_rtt_target_ns),
        )
        for i, ev in enumerate(evs):
            value.evs[i] = ev
        for ev, plane in evs.items():
            self.setup_ev(qpn, ev, plane=plane)
        size = ctypes.sizeof(TxRing)
        self.tx_ring_memory()[ring * size : (ring + 1) * size] = bytes(size)
        size = ctypes.sizeof(Wq)
        self.wq_memory()[ring * size : (ring + 1) * size] = bytes(size)
        bpfsys.map_update(self._fds[TX_QPS_MAP], _u32(qpn), bytes(value))

    def sq_raw(self, qpn: int) -> SqState:
        """The send state of a QP as stored, read under its lock (KeyError if none)."""
        try:
            raw = _locked_lookup(self._fds[TX_QPS_MAP], _u32(qpn), ctypes.sizeof(SqState))
        except FileNotFoundError:
            raise KeyError(f"no send state for QP {qpn:#x}") from None
        return SqState.from_buffer_copy(raw)

    def sq(self, qpn: int) -> SqSnapshot:
        """The send state of a QP, decoded (KeyError if none)."""
        raw = self.sq_raw(qpn)
        in_flight = min((raw.snd_nxt - raw.snd_una) & wire.PSN_MASK, BITMAP_BITS)

        def in_ring(bitmap: ctypes.Array) -> list[int]:
            out = []
            for i in range(in_flight):
                psn = (raw.snd_una + i) & wire.PSN_MASK
                pos = psn % BITMAP_BITS
                if bitmap[pos // 64] >> (pos % 64) & 1:
                    out.append(psn)
            return out

        return SqSnapshot(
            qpn=qpn,
            state=_enum_or_int(QpState, raw.state),
            local_host=raw.local_host,
            peer_host=raw.peer_host,
            peer_qpn=raw.peer_qpn,
            mpr=raw.mpr,
            ring=raw.ring,
            evs=list(raw.evs[: min(raw.n_evs, MAX_QP_EVS)]),
            ev_min_active=raw.ev_min_active,
            snd_una=raw.snd_una,
            snd_nxt=raw.snd_nxt,
            peer_ports=raw.peer_ports,
            reo_wnd_ns=raw.reo_wnd_ns,
            acked=in_ring(raw.acked),
            retx_pending=in_ring(raw.retx),
            retx_queue=_retx_entries(raw),
            stats={name: getattr(raw.stats, name) for name, _ in SqStats._fields_},
            engine=bool(raw.engine),
            cwnd=raw.cwnd,
            snd_msn=raw.snd_msn,
            wqe_sent=raw.wqe_sent,
            wqe_done=raw.wqe_done,
            wqe_off=raw.wqe_off,
            ev_next=raw.ev_next,
            tx_stats={name: getattr(raw.tx_stats, name) for name, _ in SqTxStats._fields_},
            cc={name: getattr(raw.cc, name) for name, _ in SqCc._fields_},
            rtt_recent_ns=raw.rtt_recent_ns,
        )

    def retx_queue(self, qpn: int) -> list[dict[str, int]]:
        """The retransmit queue of a QP, oldest first: psn, ev (the EV that lost it:
        resend on another), cause (RetxCause) and nack_reason (for NACK)."""
        return _retx_entries(self.sq_raw(qpn))

    def set_sq_state(self, qpn: int, state: QpState) -> None:
        """Change the state of a send QP, keeping the rest (KeyError if none).

        Not atomic with the program (see set_rq_state): safe while no ACKs
        for the QP are being processed, and for ERR/RESET.
        """
        self._sq_modify(qpn, state=QpState(state))

    def set_snd_nxt(self, qpn: int, snd_nxt: int) -> None:
        """Set snd_nxt, as the send engine advances it (tests and tools; same caveat
        as set_sq_state: the engine does it in BPF under the QP's lock)."""
        raw = self.sq_raw(qpn)
        pins.check_range("snd_nxt", snd_nxt, wire.PSN_MASK)
        if wire.psn_diff(snd_nxt, raw.snd_una) not in range(raw.mpr * wire.MPR_UNIT + 1):
            raise ValueError(f"snd_nxt {snd_nxt} is outside the window of snd_una {raw.snd_una}")
        self._sq_modify(qpn, snd_nxt=snd_nxt)

    def set_cwnd(self, qpn: int, cwnd: int) -> None:
        """Set a QP's congestion window, most packets in flight (0: the window).

        Rewrites the whole value: same caveat as set_sq_state. While packets
        flow, use cwnd_kick (BPF sets it under the QP's lock).
        """
        pins.check_range("cwnd", cwnd, pins.U32_MAX)
        self._sq_modify(qpn, cwnd=cwnd)

    def _sq_modify(self, qpn: int, **fields: int) -> None:
        value = self.sq_raw(qpn)
        for name, v in fields.items():
            setattr(value, name, v)
        bpfsys.map_update(
            self._fds[TX_QPS_MAP], _u32(qpn), bytes(value), flags=BPF_F_LOCK | bpfsys.BPF_EXIST
        )

    def delete_sq(self, qpn: int) -> None:
        """Forget a QP's send state and its EVs (KeyError if none): its ACKs are dropped."""
        raw = self.sq_raw(qpn)
        for ev in raw.evs[: min(raw.n_evs, MAX_QP_EVS)]:
            with contextlib.suppress(FileNotFoundError):
                bpfsys.map_delete(self._fds[EVS_MAP], bytes(EvKey(qpn, ev)))
        try:
            bpfsys.map_delete(self._fds[TX_QPS_MAP], _u32(qpn))
        except FileNotFoundError:
            raise KeyError(f"no send state for QP {qpn:#x}") from None

    # -- EVs --------------------------------------------------------------------------------

    def setup_ev(self, qpn: int, ev: int, *, plane: int, state: EvState = EvState.GOOD) -> None:
        """Create (or reset) one EV of a send QP: counters and RTT zero."""
        pins.check_range("qpn", qpn, wire.QPN_MASK)
        pins.check_range("ev", ev, wire.EV_MAX)
        pins.check_range("plane", plane, MAX_PLANES - 1)
        value = EvStateLayout(plane=plane, state=EvState(state))
        bpfsys.map_update(self._fds[EVS_MAP], bytes(EvKey(qpn, ev)), bytes(value))

    def ev_raw(self, qpn: int, ev: int) -> EvStateLayout:
        """One EV as stored, read under its lock (KeyError if none)."""
        try:
            raw = _locked_lookup(
                self._fds[EVS_MAP], bytes(EvKey(qpn, ev)), ctypes.sizeof(EvStateLayout)
            )
        except FileNotFoundError:
            raise KeyError(f"no state for EV {ev:#x} of QP {qpn:#x}") from None
        return EvStateLayout.from_buffer_copy(raw)

    def ev(self, qpn: int, ev: int) -> EvSnapshot:
        """One EV, decoded (KeyError if none)."""
        raw = self.ev_raw(qpn, ev)
        return EvSnapshot(
            qpn=qpn,
            ev=ev,
            plane=raw.plane,
            state=_enum_or_int(EvState, raw.state),
            skip_until=raw.skip_until,
            rtt_last=raw.rtt_last,
            rtt_min=raw.rtt_min,
            srtt=raw.srtt,
            last_tx_psn=raw.last_tx_psn,
            last_tx_ts=raw.last_tx_ts,
            stats={name: getattr(raw.stats, name) for name, _ in EvStats._fields_},
        )

    def set_ev_state(self, qpn: int, ev: int, state: EvState) -> None:
        """The controller's word on an EV (DENIED, UNKNOWN, GOOD...), keeping the rest.

        Not atomic with the program (see set_rq_state): an ACK processed
        between the read and the write loses its update of this EV.
        """
        value = self.ev_raw(qpn, ev)
        value.state = EvState(state)
        bpfsys.map_update(
            self._fds[EVS_MAP],
            bytes(EvKey(qpn, ev)),
            bytes(value),
            flags=BPF_F_LOCK | bpfsys.BPF_EXIST,
        )

    # -- the send engine: send queues, ports, kicks -----------------------------------------

    def wq_memory(self) -> mmap.mmap:
        """nic_wq mapped into this process: every send QP's queue (struct nic_wq)."""
        if self._wq is None:
            self._wq = mmap.mmap(
                self._fds[WQ_MAP],
                self.tx_rings * ctypes.sizeof(Wq),
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        return self._wq

    def wq(self, qpn: int) -> Wq:
        """A copy of a QP's send queue (posted, and the WQE slots)."""
        ring = self.sq_raw(qpn).ring
        size = ctypes.sizeof(Wq)
        return Wq.from_buffer_copy(self.wq_memory()[ring * size : (ring + 1) * size])

    def post_write(
        self,
        qpn: int,
        *,
        length: int,
        src_region: int,
        remote_va: int,
        rkey: int,
        src_offset: int = 0,
        imm: int | None = None,
        wr_id: int = 0,
    ) -> int:
        """Post an RDMA WRITE (WRITE_WITH_IMM when imm is given) on a send QP; returns
        the WQE's index (free-running; NIC_EV_SEND_DONE reports it, with wr_id).

        length bytes from byte src_offset of the local region src_region go to
        remote_va (rkey) at the peer. Both src_offset and remote_va are
        multiples of MR_ELEM_SIZE (v1: packets never straddle elements). The
        engine sends nothing until kicked (kick) or clocked by the QP's ACKs.
        BlockingIOError when SQ_DEPTH WQEs are outstanding (not completed).
        One poster per QP at a time.
        """
        raw = self.sq_raw(qpn)
        if not raw.engine:
            raise ValueError(f"QP {qpn:#x} is not served by the send engine (setup_sq engine)")
        pins.check_range("length", length, pins.U32_MAX)
        pins.check_range("remote_va", remote_va, pins.U64_MAX)
        pins.check_range("rkey", rkey, pins.U32_MAX)
        pins.check_range("wr_id", wr_id, pins.U64_MAX)
        if imm is not None:
            pins.check_range("imm", imm, pins.U32_MAX)
        for name, value in (("src_offset", src_offset), ("remote_va", remote_va)):
            if value % MR_ELEM_SIZE:
                raise ValueError(f"{name} must be a multiple of {MR_ELEM_SIZE}, not {value:#x}")
        self._span(src_region, src_offset, length)  # KeyError / ValueError if outside
        at = raw.ring * ctypes.sizeof(Wq)
        memory = self.wq_memory()
        posted = int.from_bytes(memory[at : at + 4], "little")
        if (posted - raw.wqe_done) & pins.U32_MAX >= SQ_DEPTH:
            raise BlockingIOError(
                errno.EAGAIN, f"send queue of QP {qpn:#x} is full ({SQ_DEPTH} WQEs outstanding)"
            )
        wqe = Wqe(
            wr_id=wr_id,
            remote_va=remote_va,
            rkey=rkey,
            len=length,
            src_region=src_region,
            src_off=src_offset,
            imm=imm or 0,
            opcode=wire.Opcode.WRITE if imm is None else wire.Opcode.WRITE_IMM,
        )
        slot = at + Wq.wqes.offset + (posted % SQ_DEPTH) * ctypes.sizeof(Wqe)
        memory[slot : slot + ctypes.sizeof(Wqe)] = bytes(wqe)
        # The WQE first, then posted: the engine reads them in the other order.
        memory[at : at + 4] = ((posted + 1) & pins.U32_MAX).to_bytes(4, "little")
        return posted

    def set_port(
        self,
        host: int,
        plane: int,
        *,
        ifindex: int,
        mac: str,
        nh_mac: str,
        netns: str | None = None,
    ) -> None:
        """Tell the send engine about host port `plane` of `host`: its MAC, the next
        hop's MAC (data packets' Ethernet source and destination) and its device.

        ifindex is the port's index inside netns (the host's namespace; None:
        this process's), where the devmap entry is written, since the kernel
        resolves it in the writer's namespace. ifindex 0 removes the device.
        """
        from mrc_nic.kernel import netns as netns_mod  # pyroute2: only for this

        pins.check_range("host", host, MAX_HOSTS - 1)
        pins.check_range("plane", plane, MAX_PLANES - 1)
        pins.check_range("ifindex", ifindex, pins.U32_MAX)
        value = Port(mac=_mac_bytes(mac), nh_mac=_mac_bytes(nh_mac), ifindex=ifindex)
        key = _u32(host * MAX_PLANES + plane)
        with netns_mod.entered(netns) if netns else contextlib.nullcontext():
            if ifindex:
                bpfsys.map_update(self._fds[TX_PORTS_MAP], key, _u32(ifindex))
            else:
                with contextlib.suppress(FileNotFoundError):
                    bpfsys.map_delete(self._fds[TX_PORTS_MAP], key)
        bpfsys.map_update(self._fds[PORTS_MAP], key, bytes(value))

    def port(self, host: int, plane: int) -> dict[str, Any]:
        """What set_port stored: mac, nh_mac, ifindex."""
        pins.check_range("host", host, MAX_HOSTS - 1)
        pins.check_range("plane", plane, MAX_PLANES - 1)
        raw = bpfsys.map_lookup(
            self._fds[PORTS_MAP], _u32(host * MAX_PLANES + plane), ctypes.sizeof(Port)
        )
        value = Port.from_buffer_copy(raw)
        return {
            "mac": ":".join(f"{b:02x}" for b in value.mac),
            "nh_mac": ":".join(f"{b:02x}" for b in value.nh_mac),
            "ifindex": value.ifindex,
        }

    def program_fd(self) -> int:
        """The fd of the lab's pinned NIC program (owned by this object)."""
        if self._prog_fd is None:
            path = pin_dir(self.lab) / PROG_PIN
            try:
                self._prog_fd = bpfsys.obj_get(path)
            except FileNotFoundError:
                raise MapsMissing(
                    errno.ENOENT, f"the NIC program of lab {self.lab!r} is not pinned", str(path)
                ) from None
        return self._prog_fd

    def kick(
        self, qpn: int, packets: int, *, live: bool = True, batch_size: int = 0
    ) -> bpfsys.TestRunResult:
        """Run the send engine for a QP, `packets` times, through the pinned program:
        with live frames, up to `packets` data packets leave (see run_kick)."""
        return run_kick(self.program_fd(), qpn, packets, live=live, batch_size=batch_size)

    def timeout_kick(
        self, qpn: int, packets: int, *, max_psns: int = TIMEOUT_MAX, age_ns: int = 0
    ) -> None:
        """The retransmission timeout of a QP: a timeout kick queues up to
        max_psns of its oldest unacknowledged PSNs last sent age_ns ago or more
        (in BPF, under the QP's lock) and puts their EVs in ASSUMED_BAD, then a
        send kick of `packets` runs sends them (and new data, if there is
        room). The counters timeout_kicks and timeout_queued say what it did."""
        if not (isinstance(max_psns, int) and 1 <= max_psns <= TIMEOUT_MAX):
            raise ValueError(f"max_psns must be 1..{TIMEOUT_MAX}, not {max_psns!r}")
        run_kick(self.program_fd(), qpn, 1, op=KickOp.TIMEOUT, arg=max_psns, age_ns=age_ns)
        if packets:
            self.kick(qpn, packets, batch_size=packets)

    def cwnd_kick(self, qpn: int, cwnd: int, *, rtt_target_ns: int = 0, packets: int = 1) -> None:
        """Congestion control's new window for a QP that may be sending: a
        NIC_KICK_CWND kick sets cwnd (packets in flight; 0: the window) and
        cc.rtt_target_ns (the RTT at or above which its SACKs count as high
        delay, struct nic_sq_cc) under the QP's lock, then runs the engine
        `packets` times with live frames, so that a window that grew is
        filled at once (the ACK clock sends one packet per ACK, never more)."""
        if not (isinstance(cwnd, int) and 0 <= cwnd <= 0xFFFF):
            raise ValueError(f"cwnd must be 0..65535 packets, not {cwnd!r}")
        pins.check_range("rtt_target_ns", rtt_target_ns, pins.U64_MAX)
        run_kick(
            self.program_fd(),
            qpn,
            max(1, packets),
            op=KickOp.CWND,
            arg=cwnd,
            age_ns=rtt_target_ns,
            batch_size=max(1, packets),
        )

    def replace_ev(self, qpn: int, slot: int, old: int, new: int) -> bool:
        """Put EV `new` in slot `slot` of a sending QP's EV profile, where EV
        `old` is (OCP: MRC_CTL_EV_OP_REPLACE_EV). The new EV gets the old one's
        plane, state GOOD and zero counters. The swap itself is a
        NIC_KICK_EV_REPLACE kick, under the QP's lock, so it is safe while
        packets flow. False (and nothing changed) if the slot no longer holds
        `old`. KeyError: no such QP or EV.

        The old EV's state stays: a program that looked it up just before
        the swap may still write to it, and nic_evs is a preallocated hash
        whose freed elements are reused at once (by the next EV created).
        Delete it with delete_ev once such runs are over (a few ms later)."""
        pins.check_range("ev", new, wire.EV_MAX)
        if new == wire.EV_INVALID:
            raise ValueError("EV 0 is invalid")
        raw = self.sq_raw(qpn)
        if new in raw.evs[: raw.n_evs]:
            raise ValueError(f"EV {new} is in QP {qpn:#x}'s profile already")
        plane = self.ev_raw(qpn, old).plane
        self.setup_ev(qpn, new, plane=plane)
        run_kick(self.program_fd(), qpn, 1, op=KickOp.EV_REPLACE, arg=slot, age_ns=old << 16 | new)
        swapped = self.sq_raw(qpn).evs[slot] == new
        if not swapped:  # never in the profile: no program has seen it
            self.delete_ev(qpn, new)
        return swapped

    def delete_ev(self, qpn: int, ev: int) -> None:
        """Forget one EV's state (nothing if there is none)."""
        with contextlib.suppress(FileNotFoundError):
            bpfsys.map_delete(self._fds[EVS_MAP], bytes(EvKey(qpn, ev)))

    # -- the PSN -> EV table ----------------------------------------------------------------

    def tx_ring_memory(self) -> mmap.mmap:
        """nic_tx_ring mapped into this process: every send QP's PSN -> EV table."""
        if self._ring is None:
            self._ring = mmap.mmap(
                self._fds[TX_RING_MAP],
                self.tx_rings * ctypes.sizeof(TxRing),
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        return self._ring

    def _tx_offset(self, qpn: int, psn: int) -> int:
        pins.check_range("psn", psn, wire.PSN_MASK)
        ring = self.sq_raw(qpn).ring
        if ring >= self.tx_rings:
            raise ValueError(f"QP {qpn:#x} has ring {ring}, beyond the {self.tx_rings} rings")
        return ring * ctypes.sizeof(TxRing) + (psn % BITMAP_BITS) * ctypes.sizeof(TxPkt)

    def tx_entry(self, qpn: int, psn: int) -> TxPkt:
        """The PSN -> EV table entry where psn lives (its psn field says whose it is)."""
        at = self._tx_offset(qpn, psn)
        return TxPkt.from_buffer_copy(self.tx_ring_memory()[at : at + ctypes.sizeof(TxPkt)])

    def record_tx(
        self,
        qpn: int,
        psn: int,
        ev: int,
        *,
        tx_ts: int,
        length: int = MR_ELEM_SIZE,
        retx: bool = False,
    ) -> TxPkt:
        """Record a transmission as the send engine does: link it to the previous
        packet on the same EV, update the EV's last PSN and tx counters, and
        write the table entry. For tests and tools: the engine does this in
        BPF, under the EV's lock; here the EV is read and written back, so do
        not use it while ACKs for the QP are being processed.
        """
        pins.check_range("tx_ts", tx_ts, pins.U64_MAX)
        pins.check_range("length", length, pins.U32_MAX)
        at = self._tx_offset(qpn, psn)
        state = self.ev_raw(qpn, ev)
        entry = TxPkt(tx_ts=tx_ts, psn=psn, ev=ev, len=length)
        if state.stats.tx_pkts:
            entry.prev_psn = state.last_tx_psn
            entry.flags |= TX_F_PREV
        if retx:
            entry.flags |= TX_F_RETX
            state.stats.retx_pkts += 1
        state.last_tx_psn = psn
        state.last_tx_ts = tx_ts
        state.stats.tx_pkts += 1
        state.stats.tx_bytes += length
        bpfsys.map_update(
            self._fds[EVS_MAP],
            bytes(EvKey(qpn, ev)),
            bytes(state),
            flags=BPF_F_LOCK | bpfsys.BPF_EXIST,
        )
        self.tx_ring_memory()[at : at + ctypes.sizeof(TxPkt)] = bytes(entry)
        return entry

    # -- listing, for the counter readers (stats) --
    def rx_qpns(self) -> list[int]:
        """QPNs with receive state (the owners in nic_rx_slots), ascending."""
        pairs = bpfsys.map_lookup_batch(self._fds[RX_SLOTS_MAP], 4, 4, chunk=self.max_qps)
        owners = (int.from_bytes(value, sys.byteorder) for _, value in pairs)
        return sorted(o & wire.QPN_MASK for o in owners if o & RQ_TAG_USED)

    def tx_qpns(self) -> list[int]:
        """QPNs with send state (nic_tx_qps), ascending."""
        keys = bpfsys.map_keys(self._fds[TX_QPS_MAP], 4)
        return sorted(int.from_bytes(k, sys.byteorder) for k in keys)

    def evs_raw(self) -> dict[tuple[int, int], EvStateLayout]:
        """Every EV of every send QP, {(qpn, ev): state}, in one batch read
        (each value copied under its lock)."""
        pairs = bpfsys.map_lookup_batch(
            self._fds[EVS_MAP],
            ctypes.sizeof(EvKey),
            ctypes.sizeof(EvStateLayout),
            elem_flags=BPF_F_LOCK,
        )
        out = {}
        for key, value in pairs:
            k = EvKey.from_buffer_copy(key)
            out[(k.qpn, k.ev)] = EvStateLayout.from_buffer_copy(value)
        return out


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

    def fileno(self) -> int:
        """The ring buffer's fd: readable (poll, select) when records are there."""
        return self._fd

    def wait(self, timeout: float) -> bool:
        """Wait up to timeout seconds for data; True if some is there."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(int(timeout * 1000)))

    def read(self) -> list[AnyEvent]:
        """Every complete record available now, oldest first; consumes them.

        Each record is decoded by its type (EVENT_LAYOUTS): Event for a
        completion, EvEvent, LossEvent, QpErrEvent; an unknown type as Event.
        """
        events: list[AnyEvent] = []
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
                record = self._prod[start : start + length]
                layout = EVENT_LAYOUTS.get(int.from_bytes(record[:4], "little"), Event)
                events.append(layout.from_buffer_copy(record))
            cons += (length + _RINGBUF_HDR + 7) & ~7
            self._cons[0:8] = cons.to_bytes(8, "little")
        return events


# ---- helpers ---------------------------------------------------------------------


def _enum_or_int(kind: type[enum.IntEnum], value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return value


def _retx_entries(raw: SqState) -> list[dict[str, int]]:
    count = (raw.retx_tail - raw.retx_head) & pins.U32_MAX
    out = []
    for i in range(min(count, RETX_SLOTS)):
        entry = raw.retxq[(raw.retx_head + i) % RETX_SLOTS]
        out.append(
            {
                "psn": entry.psn,
                "ev": entry.ev,
                "cause": _enum_or_int(RetxCause, entry.cause),
                "nack_reason": entry.nack_reason,
            }
        )
    return out


def _u32(value: int) -> bytes:
    return int(value).to_bytes(4, "little")


def _mac_bytes(mac: str) -> ctypes.Array:
    raw = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return (ctypes.c_uint8 * 6)(*raw)


def _locked_lookup(map_fd: int, key: bytes, value_size: int) -> bytes:
    """The value copied under its bpf_spin_lock (BPF_F_LOCK)."""
    return bpfsys.map_lookup(map_fd, key, value_size, flags=BPF_F_LOCK)
