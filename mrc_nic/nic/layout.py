"""The NIC program's names and layouts as Python sees them: map and pin names,
constants and enums (from the generated mrc_nic.abi.defs), record layouts.
"""

from __future__ import annotations

import ctypes
import struct

from mrc_nic import resources
from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst

BPF_DIR = resources.BPF_DIR
SOURCE = BPF_DIR / "nic_xdp.c"
FUNC_NAME = "nic_xdp"
# The applications' doorbell program: send kicks only, then nic_xdp (a tail call
# through DOORBELL_JUMP_MAP); what a session gets to kick with (docs/api.md, "Isolation").
DOORBELL_FUNC = "nic_doorbell"
DOORBELL_JUMP_MAP = "nic_doorbell_jump"
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
# Map-in-maps whose entries are maps of their own, one per send queue and one per
# region's memory (docs/api.md, "Isolation"): what a session gets as a file descriptor.
WQ_MAP = "nic_wqs"
MEMS_MAP = "nic_mems"
PORTS_MAP = "nic_ports"
TX_PORTS_MAP = "nic_tx_ports"
TIMELINE_MAP = "nic_rx_timeline"
RX_LOCKS_MAP = "nic_rx_locks"
RX_SLOTS_MAP = "nic_rx_slots"
# Completion queues (verbs): an array of ring buffers, index CQ - 1, and the
# template whose size an application's ring buffer takes (docs/nic-program.md, "Completion queues").
CQ_RINGS_MAP = "nic_cq_rings"
CQ_TEMPLATE_MAP = "nic_cq_template"
CQ_LOST_MAP = "nic_cq_lost"  # completions each CQ lost to a full ring (mmapable)
# Reverse EV sets of the receive QPs and their probes' replies (docs/nic-program.md).
REV_EVS_MAP = "nic_rev_evs"
REV_PROBES_MAP = "nic_rev_probes"
# Replies to a host's endpoint probes (the controller's EV probes), per host id.
EP_PROBES_MAP = "nic_ep_probes"
# Per host: its daemon's word to the NIC (DISABLED ports, the EV event queue's CQ),
# and the port status updates its peers sent it.
HOST_CTL_MAP = "nic_host_ctl"
PEER_PORTS_MAP = "nic_peer_ports"
# ACK fan-out: per host and count, a devmap of the host's doorbell (docs/nic-program.md,
# "ACK coalescing").
FANOUT_MAP = "nic_fanout"
MAP_PINS = (
    RX_QPS_MAP,
    RX_SLOTS_MAP,
    MR_MAP,
    MEMS_MAP,
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
    CQ_RINGS_MAP,
    CQ_TEMPLATE_MAP,
    CQ_LOST_MAP,
    REV_EVS_MAP,
    REV_PROBES_MAP,
    EP_PROBES_MAP,
    HOST_CTL_MAP,
    PEER_PORTS_MAP,
    FANOUT_MAP,
    DOORBELL_JUMP_MAP,
)
# The program itself, pinned next to its maps: BPF_OBJ_GET gives a kicker its fd.
PROG_PIN = "nic_xdp_prog"
DOORBELL_PIN = "nic_doorbell_prog"
# Every pin NicProgram.load makes (the name is historical: the program is one of them).
PINNED_MAPS = (*MAP_PINS, PROG_PIN, DOORBELL_PIN)
# Layout constants: not tunable.
MR_ELEM_SIZE = defs.NIC_MR_ELEM_SIZE
SEG_ELEMS_MAX = defs.NIC_SEG_ELEMS_MAX  # a data packet's payload fills at most 3 elements
# Registered memory of the lab's NICs: per host the topology's [nic] memory
# (64 MiB by default: an emulated NIC's host memory), in the kernel as one
# mmapable map for the lab.
MEMORY_PER_HOST = 64 * 2**20


def memory_elems(hosts: int, per_host: int = MEMORY_PER_HOST) -> int:
    """Elements of nic_mr on a lab of `hosts` hosts with per_host bytes each."""
    return hosts * per_host // MR_ELEM_SIZE


def seg_size(mtu: int = wireconst.MTU) -> int:
    """NIC_SEG_SIZE: the payload of a full data packet on a lab of IP MTU `mtu`,
    the largest multiple of MR_ELEM_SIZE that fits it, at most SEG_ELEMS_MAX
    elements (1024 on MTU 1500, 2048 from 2128, 3072 from 3152)."""
    fit = wireconst.payload_max(mtu) // MR_ELEM_SIZE
    if fit < 1:
        raise ValueError(
            f"an IP MTU of {mtu} leaves {wireconst.payload_max(mtu)} bytes of payload per packet; "
            f"the NIC needs {MR_ELEM_SIZE}: use an MTU of "
            f"{MR_ELEM_SIZE + wireconst.WRITE_IMM_OVERHEAD} or more"
        )
    return min(fit, SEG_ELEMS_MAX) * MR_ELEM_SIZE


MPR_MAX = defs.NIC_MPR_MAX
BITMAP_BITS = MPR_MAX * wireconst.MPR_UNIT
BITMAP_WORDS = BITMAP_BITS // 64
MSG_SLOTS = defs.NIC_MSG_SLOTS
GAP_BINS = defs.NIC_GAP_BINS  # the receive QP's log of long delivery gaps
GAP_MIN_NS = defs.NIC_GAP_MIN_NS  # shorter gaps are not logged
GAP_BIN_SHIFT = defs.NIC_GAP_BIN_SHIFT  # a bin of the gap log is 2^26 ns (67 ms)
# The receive locks (docs/nic-program.md, "Receive lock"): QP q's is entry q % RX_LOCKS.
RX_LOCKS = defs.NIC_RX_LOCKS
RX_LOCK_TRIES = defs.NIC_RX_LOCK_TRIES  # then the packet is dropped (DROP_RX_BUSY)
RX_LOCK_SIZE = ctypes.sizeof(defs.NicRxLock)
MSG_F_VALID = defs.NIC_MSG_F_VALID
MSG_F_IMM = defs.NIC_MSG_F_IMM
MAX_QP_EVS = defs.NIC_MAX_QP_EVS
RETX_SLOTS = defs.NIC_RETX_SLOTS
TX_F_PREV = defs.NIC_TX_F_PREV
TX_F_RETX = defs.NIC_TX_F_RETX
# A send QP's queue depth: NIC_MSG_SLOTS WQEs (docs/nic-program.md, "The send engine").
SQ_DEPTH = MSG_SLOTS
ALL_PLANES = (1 << defs.NIC_MAX_PLANES) - 1  # a port bitmap with every plane up
# Tunables: the header's defaults (NicProgram.load passes its own with -D).
DEFAULT_MAX_QPS = defs.NIC_MAX_QPS  # a power of two: QP q receives in slot q & (max_qps - 1)
RQ_TAG_USED = defs.NIC_RQ_TAG_USED  # a slot's owner in nic_rx_slots is QPN | this
QPN_INDEX_SPAN = 1 << defs.NIC_QPN_HOST_SHIFT  # a QPN is host << 16 | index (transport.hostmem)
DEFAULT_MR_ELEMS = defs.NIC_MR_ELEMS  # 64 MiB
DEFAULT_MAX_REGIONS = defs.NIC_MAX_REGIONS
REGION_BY_RKEY = defs.NIC_REGION_BY_RKEY  # a receive QP whose WRITEs name their MR by rkey
REGION_NONE = defs.NIC_REGION_NONE  # a receive QP that takes no WRITE (no REMOTE_WRITE access)
MAX_HOSTS = defs.NIC_MAX_HOSTS
MAX_PLANES = defs.NIC_MAX_PLANES
DEFAULT_HOST_NET = "198.18.0.0/16"
DEFAULT_EVENT_PAGES = defs.NIC_EVENT_PAGES
DEFAULT_MAX_EVS = defs.NIC_MAX_EVS
DEFAULT_TX_RINGS = defs.NIC_TX_RINGS
DEFAULT_SKIP_NS = defs.NIC_SKIP_NS  # see docs/nic-program.md, "EV states", for why
DEFAULT_CQ_RING_PAGES = defs.NIC_CQ_RING_PAGES  # a CQ's ring buffer, in pages
DEFAULT_MAX_CQS = defs.NIC_MAX_CQS  # entries of nic_cq_rings: CQs 1 .. max_cqs
WQE_F_SIGNALED = defs.NIC_WQE_F_SIGNALED  # struct nic_wqe.flags: report its completion
LOSS_WALK_MAX = defs.NIC_LOSS_WALK_MAX  # (the loader keeps the header's value)
HEAD_SCAN = defs.NIC_HEAD_SCAN  # PSNs per pass of the head scan (two passes per SACK)
HEAD_LOST = 2 * HEAD_SCAN  # NIC_HEAD_LOST: losses one head scan can find
RTT_RECENT_SHIFT = defs.NIC_RTT_RECENT_SHIFT  # the head scan's recent RTT forgets a peak
RTT_RECENT_CAP = defs.NIC_RTT_RECENT_CAP  # a sample counts for at most 4 reorder windows
TIMELINE_SHIFT = defs.NIC_TIMELINE_SHIFT  # a bin of the receive timeline is 2^20 ns
TIMELINE_BINS = defs.NIC_TIMELINE_BINS
# bpf(2) flags this module needs beyond bpfsys's.
BPF_F_LOCK = 4
BPF_F_MMAPABLE = bpfsys.BPF_F_MMAPABLE
BPF_MAP_TYPE_ARRAY_OF_MAPS = 12
BPF_MAP_TYPE_RINGBUF = 27
QpState = defs.QpState
Counter = defs.Counter
COUNTER_SLOTS = defs.NIC_CNT_MAX
EventType = defs.EventType
EvState = defs.EvState
EvCause = defs.EvCause
RetxCause = defs.RetxCause
MsgSlot = defs.NicMsgSlot
RqStats = defs.NicRqStats
GapBin = defs.NicGapBin
SpinLock = defs.BpfSpinLock
RqLayout = defs.NicRq  # struct nic_rq: a receive QP's state in nic_rx_qps


_STRUCT_CHARS = {ctypes.c_uint8: "B", ctypes.c_uint16: "H", ctypes.c_uint32: "I",
                 ctypes.c_uint64: "Q"}  # fmt: skip


def packer(layout: type[ctypes.Structure], upto: str | None = None) -> struct.Struct:
    """A struct.Struct of a generated layout (mrc_nic.abi), for pack_into and
    unpack_from on a hot path (a ctypes object per WQE costs microseconds):
    its integer fields in order, `reserved*` arrays as padding; upto: the
    fields before that one only. The format comes from the bpf/ header
    through the ABI, never written by hand."""
    fmt, at = "<", 0
    for name, kind in layout._fields_:
        if name == upto:
            break
        offset = getattr(layout, name).offset
        fmt += "x" * (offset - at)
        size = ctypes.sizeof(kind)
        if name.startswith("reserved"):
            fmt += f"{size}x"
        elif kind in _STRUCT_CHARS:
            fmt += _STRUCT_CHARS[kind]
        else:
            raise TypeError(f"{layout.__name__}.{name}: no struct format for {kind}")
        at = offset + size
    if upto is None:
        fmt += "x" * (ctypes.sizeof(layout) - at)
    return struct.Struct(fmt)


def rx_lock_slot(qpn: int) -> int:
    """The entry of nic_rx_locks that is QP qpn's receive lock (shared by QPs
    whose numbers agree modulo RX_LOCKS)."""
    pins.check_range("qpn", qpn, wireconst.QPN_MASK)
    return qpn % RX_LOCKS


RegionLayout = defs.NicRegion
Retx = defs.NicRetx
SqStats = defs.NicSqStats
SqTxStats = defs.NicSqTxStats
SqCc = defs.NicSqCc
SqLayout = defs.NicSq  # struct nic_sq: a send QP's state in nic_tx_qps
EvKey = defs.NicEvKey
EvStats = defs.NicEvStats
EvStateLayout = defs.NicEv
TxPkt = defs.NicTxPkt
TxRing = defs.NicTxRing
Wqe = defs.NicWqe
Wq = defs.NicWq
Kick = defs.NicKick
KickOp = defs.KickOp
QpError = defs.QpError  # why a send QP went to ERR (struct nic_qp_err_event.error)
TIMEOUT_MAX = defs.NIC_TIMEOUT_MAX  # PSNs one timeout kick queues, at most
TIMEOUT_F_REORDER = defs.NIC_TIMEOUT_F_REORDER  # in its arg: the reorder timer's kick
Port = defs.NicPort
