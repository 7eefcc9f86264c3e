"""The hand copies of bpf/nic_maps.h that the header tests check: each struct's
Python view and each constant as (C expression, Python value). Shared by the
compiled-header tests (tests/bpf/test_nic_rx.py, test_nic_tx.py) and the
no-root check that every NIC_* name has a copy (tests/unit/test_nic.py)."""

from __future__ import annotations

import ctypes

from mrc_nic import nic
from mrc_nic.nic import wire as w

# struct name in nic_maps.h -> its Python view
C_VIEWS = {
    "nic_rq": nic.RqState,
    "nic_rq_stats": nic.RqStats,
    "nic_msg_slot": nic.MsgSlot,
    "nic_region": nic.RegionLayout,
    "nic_event": nic.Event,
}

# Every constant Python copies from nic_maps.h, as (C expression, Python value).
HEADER_CONSTANTS = [
    ("NIC_MAX_QPS", nic.DEFAULT_MAX_QPS),
    ("NIC_RQ_TAG_USED", nic.RQ_TAG_USED),
    ("NIC_MR_ELEMS", nic.DEFAULT_MR_ELEMS),
    ("NIC_MAX_REGIONS", nic.DEFAULT_MAX_REGIONS),
    ("NIC_MAX_HOSTS", nic.MAX_HOSTS),
    ("NIC_MAX_PLANES", nic.MAX_PLANES),
    ("NIC_HOST_NET", int(nic.NicConfig().host_net.network_address)),
    ("NIC_EVENT_PAGES", nic.DEFAULT_EVENT_PAGES),
    ("NIC_MR_ELEM_SIZE", nic.MR_ELEM_SIZE),
    ("NIC_MPR_MAX", nic.MPR_MAX),
    ("NIC_BITMAP_BITS", nic.BITMAP_BITS),
    ("NIC_BITMAP_WORDS", nic.BITMAP_WORDS),
    ("NIC_MSG_SLOTS", nic.MSG_SLOTS),
    ("NIC_MSG_F_VALID", nic.MSG_F_VALID),
    ("NIC_MSG_F_IMM", nic.MSG_F_IMM),
    ("NIC_TIMELINE_SHIFT", nic.TIMELINE_SHIFT),
    ("NIC_TIMELINE_BINS", nic.TIMELINE_BINS),
    ("NIC_RX_LOCKS", nic.RX_LOCKS),
    ("NIC_RX_LOCK_TRIES", nic.RX_LOCK_TRIES),
    ("sizeof(struct nic_rx_lock)", nic.RX_LOCK_SIZE),
    *[(f"NIC_QPS_{s.name}", s) for s in nic.QpState],
    *[(f"NIC_EV_{e.name}", e) for e in nic.EventType],
    *[(f"NIC_CNT_{c.name}", c) for c in nic.Counter],
    ("NIC_CNT_MAX", nic.COUNTER_SLOTS),
    ("sizeof(struct nic_mr_elem)", nic.MR_ELEM_SIZE),
    *[(f"sizeof(struct {s})", ctypes.sizeof(v)) for s, v in C_VIEWS.items()],
]

# struct name in nic_maps.h -> its Python view (the sender's)
TX_C_VIEWS = {
    "nic_sq": nic.SqState,
    "nic_sq_stats": nic.SqStats,
    "nic_sq_cc": nic.SqCc,
    "nic_retx": nic.Retx,
    "nic_ev_key": nic.EvKey,
    "nic_ev_stats": nic.EvStats,
    "nic_ev": nic.EvStateLayout,
    "nic_tx_pkt": nic.TxPkt,
    "nic_tx_ring": nic.TxRing,
    "nic_ev_event": nic.EvEvent,
    "nic_loss_event": nic.LossEvent,
    "nic_qp_err_event": nic.QpErrEvent,
}

# Every constant of the sender's part of nic_maps.h, as (C expression, Python value).
# The event types and counters are in HEADER_CONSTANTS (whole enums).
TX_HEADER_CONSTANTS = [
    ("NIC_MAX_EVS", nic.DEFAULT_MAX_EVS),
    ("NIC_TX_RINGS", nic.DEFAULT_TX_RINGS),
    ("NIC_SKIP_NS", nic.DEFAULT_SKIP_NS),
    ("NIC_LOSS_WALK_MAX", nic.LOSS_WALK_MAX),
    ("NIC_HEAD_SCAN", nic.HEAD_SCAN),
    ("NIC_HEAD_LOST", nic.HEAD_LOST),
    ("NIC_RTT_RECENT_SHIFT", nic.RTT_RECENT_SHIFT),
    ("NIC_RTT_RECENT_CAP", nic.RTT_RECENT_CAP),
    ("NIC_MAX_QP_EVS", nic.MAX_QP_EVS),
    ("NIC_RETX_SLOTS", nic.RETX_SLOTS),
    ("NIC_TX_F_PREV", nic.TX_F_PREV),
    ("NIC_TX_F_RETX", nic.TX_F_RETX),
    *[(f"NIC_EVS_{s.name}", s) for s in nic.EvState],
    *[(f"NIC_EVC_{c.name}", c) for c in nic.EvCause],
    *[(f"NIC_RETX_{c.name}", c) for c in nic.RetxCause],
    *[(f"NIC_KICK_{op.name}", op) for op in nic.KickOp],
    ("NIC_TIMEOUT_MAX", nic.TIMEOUT_MAX),
    ("NIC_GAP_MIN_NS", nic.GAP_MIN_NS),
    ("NIC_SEG_ELEMS_MAX", nic.SEG_ELEMS_MAX),
    ("NIC_SEG_ELEMS_FIT", w.payload_max() // nic.MR_ELEM_SIZE),
    ("NIC_SEG_ELEMS", nic.seg_size() // nic.MR_ELEM_SIZE),
    ("NIC_SEG_SIZE", nic.seg_size()),
    ("NIC_GAP_BINS", nic.GAP_BINS),
    ("NIC_GAP_BIN_SHIFT", nic.GAP_BIN_SHIFT),
    *[(f"sizeof(struct {s})", ctypes.sizeof(v)) for s, v in TX_C_VIEWS.items()],
]
