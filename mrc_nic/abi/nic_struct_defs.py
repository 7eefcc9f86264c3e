"""The NIC program's map values and records, generated from bpf/*.h: do not edit.

Regenerate with `make abi` (python -m mrc_nic.abi.generate); a unit test fails
when a header changed and this file was not regenerated.
"""

import ctypes


class BpfSpinLock(ctypes.Structure):
    """struct bpf_spin_lock (the kernel's uapi)."""

    _fields_ = [
        ("val", ctypes.c_uint32),
    ]

# ---- bpf/nic_structs.h ---------------------------------------------------------



class NicMsgSlot(ctypes.Structure):
    """struct nic_msg_slot (bpf/nic_structs.h)."""

    _fields_ = [
        ("va", ctypes.c_uint64),
        ("last_psn", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class NicRqStats(ctypes.Structure):
    """struct nic_rq_stats (bpf/nic_structs.h)."""

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


class NicTimelineBin(ctypes.Structure):
    """struct nic_timeline_bin (bpf/nic_structs.h)."""

    _fields_ = [
        ("bin", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
    ]


class NicGapBin(ctypes.Structure):
    """struct nic_gap_bin (bpf/nic_structs.h)."""

    _fields_ = [
        ("end_ns", ctypes.c_uint64),
        ("gap_ns", ctypes.c_uint64),
    ]


class NicRq(ctypes.Structure):
    """struct nic_rq (bpf/nic_structs.h)."""

    _fields_ = [
        ("lock", BpfSpinLock),
        ("state", ctypes.c_uint32),
        ("local_host", ctypes.c_uint32),
        ("peer_host", ctypes.c_uint32),
        ("peer_qpn", ctypes.c_uint32),
        ("mpr", ctypes.c_uint32),
        ("region", ctypes.c_uint32),
        ("cum_psn", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("recv_cq", ctypes.c_uint32),
        ("bitmap", ctypes.c_uint64 * 16),
        ("stats", NicRqStats),
        ("msgs", NicMsgSlot * 32),
        ("gaps", NicGapBin * 64),
        ("auth_key", ctypes.c_uint64 * 2),
        ("auth", ctypes.c_uint32),
        ("max_wimm_dest", ctypes.c_uint32),
        ("dyn_mpr", ctypes.c_uint32),
        ("wimm_held", ctypes.c_uint32),
        ("pd", ctypes.c_uint32),
        ("ack_every", ctypes.c_uint16),
        ("ack_held", ctypes.c_uint16),
        ("ack_held_ns", ctypes.c_uint64),
        ("ack_delay_ns", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class NicRxLock(ctypes.Structure):
    """struct nic_rx_lock (bpf/nic_structs.h)."""

    _fields_ = [
        ("word", ctypes.c_uint64),
        ("pad", ctypes.c_uint64 * 7),
    ]


class NicRevEv(ctypes.Structure):
    """struct nic_rev_ev (bpf/nic_structs.h)."""

    _fields_ = [
        ("ev", ctypes.c_uint16),
        ("plane", ctypes.c_uint8),
        ("state", ctypes.c_uint8),
    ]


class NicRevEvSet(ctypes.Structure):
    """struct nic_rev_ev_set (bpf/nic_structs.h)."""

    _fields_ = [
        ("qpn", ctypes.c_uint32),
        ("n", ctypes.c_uint32),
        ("evs", NicRevEv * 16),
        ("n_use", ctypes.c_uint8 * 17),
        ("use", ctypes.c_uint8 * 272),
        ("reserved", ctypes.c_uint8 * 7),
    ]


class NicRevProbe(ctypes.Structure):
    """struct nic_rev_probe (bpf/nic_structs.h)."""

    _fields_ = [
        ("replies", ctypes.c_uint64),
        ("last_ns", ctypes.c_uint64),
        ("last_psn", ctypes.c_uint32),
        ("rtt_ns", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("reserved", ctypes.c_uint16 * 3),
    ]


class NicRevProbes(ctypes.Structure):
    """struct nic_rev_probes (bpf/nic_structs.h)."""

    _fields_ = [
        ("evs", NicRevProbe * 16),
    ]


class NicEpProbe(ctypes.Structure):
    """struct nic_ep_probe (bpf/nic_structs.h)."""

    _fields_ = [
        ("rx_ns", ctypes.c_uint64),
        ("tx_ts", ctypes.c_uint64),
        ("psn", ctypes.c_uint32),
        ("svc_ns", ctypes.c_uint32),
        ("src_ip", ctypes.c_uint32),
        ("port_bitmap", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("plane", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint32),
    ]


class NicEpProbes(ctypes.Structure):
    """struct nic_ep_probes (bpf/nic_structs.h)."""

    _fields_ = [
        ("slots", NicEpProbe * 128),
    ]


class NicHostCtl(ctypes.Structure):
    """struct nic_host_ctl (bpf/nic_structs.h)."""

    _fields_ = [
        ("ports_disabled", ctypes.c_uint32),
        ("ev_event_cq", ctypes.c_uint32),
    ]


class NicPeerPort(ctypes.Structure):
    """struct nic_peer_port (bpf/nic_structs.h)."""

    _fields_ = [
        ("rx_ns", ctypes.c_uint64),
        ("ports", ctypes.c_uint32),
        ("updates", ctypes.c_uint32),
        ("plane", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class NicPeerPorts(ctypes.Structure):
    """struct nic_peer_ports (bpf/nic_structs.h)."""

    _fields_ = [
        ("peers", NicPeerPort * 256),
    ]


class NicRetx(ctypes.Structure):
    """struct nic_retx (bpf/nic_structs.h)."""

    _fields_ = [
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint16),
        ("cause", ctypes.c_uint8),
        ("nack_reason", ctypes.c_uint8),
    ]


class NicSqTxStats(ctypes.Structure):
    """struct nic_sq_tx_stats (bpf/nic_structs.h)."""

    _fields_ = [
        ("data_pkts", ctypes.c_uint64),
        ("data_bytes", ctypes.c_uint64),
        ("retx_pkts", ctypes.c_uint64),
        ("retx_stale", ctypes.c_uint64),
        ("window_full", ctypes.c_uint64),
        ("wqes_done", ctypes.c_uint64),
    ]


class NicSqStats(ctypes.Structure):
    """struct nic_sq_stats (bpf/nic_structs.h)."""

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


class NicSqCc(ctypes.Structure):
    """struct nic_sq_cc (bpf/nic_structs.h)."""

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


class NicSq(ctypes.Structure):
    """struct nic_sq (bpf/nic_structs.h)."""

    _fields_ = [
        ("lock", BpfSpinLock),
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
        ("acked", ctypes.c_uint64 * 16),
        ("echoed", ctypes.c_uint64 * 16),
        ("retx", ctypes.c_uint64 * 16),
        ("stats", NicSqStats),
        ("retxq", NicRetx * 256),
        ("evs", ctypes.c_uint16 * 256),
        ("engine", ctypes.c_uint32),
        ("cwnd", ctypes.c_uint32),
        ("snd_msn", ctypes.c_uint32),
        ("wqe_sent", ctypes.c_uint32),
        ("wqe_done", ctypes.c_uint32),
        ("wqe_off", ctypes.c_uint32),
        ("ev_next", ctypes.c_uint32),
        ("rtt_recent_ns", ctypes.c_uint32),
        ("wqe_last_psn", ctypes.c_uint32 * 32),
        ("tx_stats", NicSqTxStats),
        ("cc", NicSqCc),
        ("send_cq", ctypes.c_uint32),
        ("auth", ctypes.c_uint32),
        ("auth_key", ctypes.c_uint64 * 2),
        ("max_wimm", ctypes.c_uint32),
        ("dyn_mpr", ctypes.c_uint32),
        ("wimm_out", ctypes.c_uint32),
        ("peer_mpr", ctypes.c_uint32),
        ("wimm_full", ctypes.c_uint64),
        ("probe_good", ctypes.c_uint32),
        ("pd", ctypes.c_uint32),
        ("peer_ports_ns", ctypes.c_uint64),
        ("silent_ns", ctypes.c_uint32),
        ("reo_learned_ns", ctypes.c_uint32),
        ("reo_grown_ts", ctypes.c_uint64),
    ]


class NicEvKey(ctypes.Structure):
    """struct nic_ev_key (bpf/nic_structs.h)."""

    _fields_ = [
        ("qpn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
    ]


class NicEvStats(ctypes.Structure):
    """struct nic_ev_stats (bpf/nic_structs.h)."""

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


class NicEv(ctypes.Structure):
    """struct nic_ev (bpf/nic_structs.h)."""

    _fields_ = [
        ("lock", BpfSpinLock),
        ("plane", ctypes.c_uint32),
        ("state", ctypes.c_uint32),
        ("good_probes", ctypes.c_uint32),
        ("skip_until", ctypes.c_uint64),
        ("rtt_last", ctypes.c_uint64),
        ("rtt_min", ctypes.c_uint64),
        ("srtt", ctypes.c_uint64),
        ("last_tx_psn", ctypes.c_uint32),
        ("last_tx_cpu", ctypes.c_uint32),
        ("last_tx_ts", ctypes.c_uint64),
        ("suspect_ts", ctypes.c_uint64),
        ("stats", NicEvStats),
    ]


class NicTxPkt(ctypes.Structure):
    """struct nic_tx_pkt (bpf/nic_structs.h)."""

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


class NicTxRing(ctypes.Structure):
    """struct nic_tx_ring (bpf/nic_structs.h)."""

    _fields_ = [
        ("pkts", NicTxPkt * 1024),
    ]


class NicMrElem(ctypes.Structure):
    """struct nic_mr_elem (bpf/nic_structs.h)."""

    _fields_ = [
        ("bytes", ctypes.c_uint8 * 1024),
    ]


class NicRegion(ctypes.Structure):
    """struct nic_region (bpf/nic_structs.h)."""

    _fields_ = [
        ("base_va", ctypes.c_uint64),
        ("first_elem", ctypes.c_uint32),
        ("n_elems", ctypes.c_uint32),
        ("rkey", ctypes.c_uint32),
        ("owner", ctypes.c_uint32),
        ("pd", ctypes.c_uint32),
        ("remote_write", ctypes.c_uint32),
        ("head", ctypes.c_uint32),
        ("tail", ctypes.c_uint32),
    ]


class NicWqe(ctypes.Structure):
    """struct nic_wqe (bpf/nic_structs.h)."""

    _fields_ = [
        ("wr_id", ctypes.c_uint64),
        ("remote_va", ctypes.c_uint64),
        ("rkey", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("src_region", ctypes.c_uint32),
        ("src_off", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("opcode", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 2),
    ]


class NicWq(ctypes.Structure):
    """struct nic_wq (bpf/nic_structs.h)."""

    _fields_ = [
        ("posted", ctypes.c_uint32),
        ("done", ctypes.c_uint32),
        ("wqes", NicWqe * 32),
    ]


class NicKick(ctypes.Structure):
    """struct nic_kick (bpf/nic_structs.h)."""

    _fields_ = [
        ("qpn", ctypes.c_uint32),
        ("op", ctypes.c_uint16),
        ("arg", ctypes.c_uint16),
        ("age_ns", ctypes.c_uint64),
    ]


class NicPort(ctypes.Structure):
    """struct nic_port (bpf/nic_structs.h)."""

    _fields_ = [
        ("mac", ctypes.c_uint8 * 6),
        ("nh_mac", ctypes.c_uint8 * 6),
        ("ifindex", ctypes.c_uint32),
    ]


class NicEvent(ctypes.Structure):
    """struct nic_event (bpf/nic_structs.h)."""

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


class NicEvEvent(ctypes.Structure):
    """struct nic_ev_event (bpf/nic_structs.h)."""

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


class NicLossEvent(ctypes.Structure):
    """struct nic_loss_event (bpf/nic_structs.h)."""

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


class NicQpErrEvent(ctypes.Structure):
    """struct nic_qp_err_event (bpf/nic_structs.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("qpn", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("syndrome", ctypes.c_uint32),
        ("reason", ctypes.c_uint32),
        ("error", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


class NicSendEvent(ctypes.Structure):
    """struct nic_send_event (bpf/nic_structs.h)."""

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


class NicCqe(ctypes.Structure):
    """struct nic_cqe (bpf/nic_structs.h)."""

    _fields_ = [
        ("va", ctypes.c_uint64),
        ("msn", ctypes.c_uint32),
        ("imm", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class NicCqeBatch(ctypes.Structure):
    """struct nic_cqe_batch (bpf/nic_structs.h)."""

    _fields_ = [
        ("n", ctypes.c_uint32),
        ("done", ctypes.c_uint32),
        ("cqes", NicCqe * 32),
        ("out", NicEvent * 32),
    ]


class NicCopyBuf(ctypes.Structure):
    """struct nic_copy_buf (bpf/nic_structs.h)."""

    _fields_ = [
        ("bytes", ctypes.c_uint8 * 4096),
    ]


class NicLost(ctypes.Structure):
    """struct nic_lost (bpf/nic_structs.h)."""

    _fields_ = [
        ("psn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("tx_ts", ctypes.c_uint64),
    ]


class NicAckScratch(ctypes.Structure):
    """struct nic_ack_scratch (bpf/nic_structs.h)."""

    _fields_ = [
        ("verdict", ctypes.c_uint32),
        ("newly", ctypes.c_uint32),
        ("fb", ctypes.c_uint32),
        ("queued", ctypes.c_uint32),
        ("fatal", ctypes.c_uint32),
        ("n_lost", ctypes.c_uint32),
        ("n_head", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("lost", NicLost * 16),
        ("head", NicLost * 16),
    ]


class NicTxScratch(ctypes.Structure):
    """struct nic_tx_scratch (bpf/nic_structs.h)."""

    _fields_ = [
        ("what", ctypes.c_uint32),
        ("full", ctypes.c_uint32),
        ("psn", ctypes.c_uint32),
        ("wqe", ctypes.c_uint32),
        ("off", ctypes.c_uint32),
        ("msn", ctypes.c_uint32),
        ("lost_ev", ctypes.c_uint32),
        ("second", ctypes.c_uint32),
        ("n_done", ctypes.c_uint32),
        ("n_wqes", ctypes.c_uint32),
        ("ackreq", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("done", NicSendEvent * 32),
        ("wqe_copy", NicWqe),
        ("hdrs", ctypes.c_uint8 * 96),
    ]


class NicTimeoutScratch(ctypes.Structure):
    """struct nic_timeout_scratch (bpf/nic_structs.h)."""

    _fields_ = [
        ("psn", ctypes.c_uint32 * 64),
        ("ev", ctypes.c_uint32 * 64),
    ]

# ---- enums of #define groups --------------------------------------------------


TUNABLES = frozenset(
    {
    }
)
