/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_structs.h: the layouts of the NIC program's map values and event
 * records, shared with user space (mrc_nic/nic mirrors them; a test compares
 * each with what bcc compiles). Natural alignment, every hole filled by an
 * explicit reserved field, sizes pinned with _Static_assert; grow a struct
 * only at its end. Who owns which field, and the protocols between BPF and
 * user space: docs/nic-program.md.
 */
#ifndef MRC_NIC_STRUCTS_H
#define MRC_NIC_STRUCTS_H

#include <linux/types.h>

#include "mrc_wire.h"
#include "nic_consts.h"

/* ---- Receive QPs: nic_rx_qps, nic_rx_locks, nic_rx_timeline -------------- */

/* A message whose LAST packet has arrived, waiting for cum_psn to pass it. */
struct nic_msg_slot {
	__u64 va;       /* message base address: RETH.va - MRC_DATA.msg_off */
	__u32 last_psn; /* PSN of its LAST packet */
	__u32 len;      /* message bytes: msg_off + dmalen of the LAST packet */
	__u32 imm;      /* ImmDt, host order (WRITE_WITH_IMM only) */
	__u32 flags;    /* NIC_MSG_F_* */
};
_Static_assert(sizeof(struct nic_msg_slot) == 24, "struct nic_msg_slot layout changed");

/* Per-QP counters, written by BPF under the QP's receive lock. */
struct nic_rq_stats {
	__u64 data_pkts;    /* data packets answered (SACK or NACK); dropped ones are not */
	__u64 placed_pkts;  /* payloads placed (first arrival of a PSN) */
	__u64 placed_bytes; /* their bytes */
	__u64 dup_pkts;     /* duplicates: acknowledged, not placed */
	__u64 trimmed_pkts; /* trimmed packets (NACKed TRIMMED or TRIMMED_LASTHOP) */
	__u64 oor_pkts;     /* PSN at or beyond cum_psn + window (NACKed PSN_OOR_WINDOW) */
	__u64 sacks;        /* SACKs sent */
	__u64 nacks;        /* NACKs sent, every reason */
	__u64 msgs_done;    /* messages completed in order (AETH.msn moves with it) */
	__u64 imm_done;     /* of which WRITE_WITH_IMM (one completion event each) */
	/* Delivery gaps (bpf_ktime_get_ns): the longest time between two placements
	 * of new payload, the disruption a failure causes as the receiver sees it.
	 * User space may zero max_gap_ns to start a new measurement. */
	__u64 first_place_ns; /* first placement */
	__u64 last_place_ns;  /* latest placement */
	__u64 max_gap_ns;     /* longest time between two placements */
	__u64 max_gap_end_ns; /* when that gap ended (its last_place_ns + max_gap_ns) */
};
_Static_assert(sizeof(struct nic_rq_stats) == 112, "struct nic_rq_stats layout changed");

/* One bin of nic_rx_timeline (per CPU): payload bytes placed in it. */
struct nic_timeline_bin {
	__u64 bin;   /* ktime >> NIC_TIMELINE_SHIFT */
	__u64 bytes; /* payload bytes placed in it, on this CPU */
};
_Static_assert(sizeof(struct nic_timeline_bin) == 16, "struct nic_timeline_bin layout changed");

/* One bin of a receive QP's gap log: the longest gap that ended in it. */
struct nic_gap_bin {
	__u64 end_ns; /* when the longest gap of this bin ended (0: never used) */
	__u64 gap_ns; /* its length */
};
_Static_assert(sizeof(struct nic_gap_bin) == 16, "struct nic_gap_bin layout changed");

/*
 * The receiving side of one QP. User space writes it whole at setup; then
 * BPF owns the fields below "BPF-owned", under the QP's receive lock (its
 * nic_rx_locks word; the value's bpf_spin_lock is only user space's
 * BPF_F_LOCK). Bitmap bit p % NIC_BITMAP_BITS is set only for PSNs p in
 * [cum_psn, cum_psn + window) that have arrived.
 */
struct nic_rq {
	struct bpf_spin_lock lock; /* guards the BPF-owned fields; ports of one QP run on several CPUs */
	/* setup: written by user space */
	__u32 state;      /* enum nic_qp_state */
	__u32 local_host; /* this QP's host: packets must go to 198.18.P.(local_host+1) */
	__u32 peer_host;  /* the sender's host: packets must come from 198.18.P.(peer_host+1) */
	__u32 peer_qpn;   /* the sender's QP: dest QP of our SACKs and NACKs */
	__u32 mpr;        /* window = mpr * MRC_MPR_UNIT PSNs, 1 .. NIC_MPR_MAX */
	__u32 region;     /* index in nic_regions of the memory this QP writes */
	/* BPF-owned (user space sets the initial values) */
	__u32 cum_psn; /* every PSN before it has arrived; the first hole */
	__u32 msn;     /* messages completed in order (24 bits): AETH.msn */
	/* setup: the receive CQ, index + 1 in nic_cq_rings; 0: completions go to nic_events */
	__u32 recv_cq;
	__u64 bitmap[NIC_BITMAP_WORDS]; /* ring of received PSNs */
	struct nic_rq_stats stats;
	struct nic_msg_slot msgs[NIC_MSG_SLOTS]; /* message MSN m in msgs[m % NIC_MSG_SLOTS] */
	struct nic_gap_bin gaps[NIC_GAP_BINS];   /* long delivery gaps, by end */
	/* setup: the optional per-packet MAC (nic_auth.h) */
	__u64 auth_key[2]; /* the connection's SipHash key, the peer's QP has the same */
	__u32 auth;        /* 1: data must carry a MAC, our SACKs/NACKs carry one */
	/* setup: the OCP QP attributes of the responder (mrc.h) */
	__u32 max_wimm_dest; /* most WRITE_WITH_IMM messages held incomplete (their LAST
			      * arrived, an earlier PSN missing); 0: NIC_MSG_SLOTS */
	__u32 dyn_mpr;       /* 1: MRC_QP_CAP_DYNAMIC_MPR: our SACKs/NACKs advertise mpr;
			      * 0: they carry MPR 0 (not advertised) */
	/* BPF-owned */
	__u32 wimm_held;     /* WRITE_WITH_IMM messages in msgs, not complete yet */
	/* setup */
	__u32 pd;            /* the QP's protection domain: a WRITE's region must be of it
			      * (nic_region.pd); 0: the daemon's own QPs */
	/* setup: ACK coalescing (docs/nic-program.md, "ACK coalescing") */
	__u16 ack_every;     /* answer one data packet in this many; 0: the lab's
			      * NIC_ACK_EVERY; 1: every packet */
	/* BPF-owned, under the receive lock */
	__u16 ack_held;      /* packets placed since the last answer, not answered */
	__u64 ack_held_ns;   /* when the first of them was placed */
	/* setup */
	__u32 ack_delay_ns;  /* answer a held packet's successor after this long at the
			      * latest; 0: the lab's NIC_ACK_DELAY_NS */
	__u32 reserved;
};
_Static_assert(__builtin_offsetof(struct nic_rq, cum_psn) == 28, "struct nic_rq layout changed");
_Static_assert(__builtin_offsetof(struct nic_rq, bitmap) == 40, "struct nic_rq layout changed");
_Static_assert(sizeof(struct nic_rq) == 40 + 8 * NIC_BITMAP_WORDS + sizeof(struct nic_rq_stats) +
					     NIC_MSG_SLOTS * sizeof(struct nic_msg_slot) +
					     NIC_GAP_BINS * sizeof(struct nic_gap_bin) + 56,
	       "struct nic_rq has hidden padding");

/* A receive lock: one 64-byte entry of nic_rx_locks, taken with cmpxchg. */
struct nic_rx_lock {
	__u64 word; /* 0: free, 1: taken */
	__u64 pad[7]; /* keeps neighbours' words apart */
};
_Static_assert(sizeof(struct nic_rx_lock) == 64, "struct nic_rx_lock is 64 bytes");

/* ---- Reverse EVs: nic_rev_evs, nic_rev_probes --------------------------- */

/* One reverse EV: a path a receive QP's answers take back to its sender. */
struct nic_rev_ev {
	__u16 ev;    /* UDP source port of the answers (1 .. MRC_EV_MAX); 0: unused entry */
	__u8 plane;  /* the port they leave from */
	__u8 state;  /* NIC_REV_* (the receiver's daemon decides, from its probes) */
};
_Static_assert(sizeof(struct nic_rev_ev) == 4, "struct nic_rev_ev layout changed");

/*
 * A receive QP's reverse EV set, slot QPN & (NIC_MAX_QPS - 1); user space
 * (the receiver's daemon) writes it whole, BPF only reads it. An answer to a
 * packet that came in on plane p takes use[p][psn % n_use[p]] (an index in
 * evs), or, when plane p has no usable reverse EV, use[NIC_MAX_PLANES][...]
 * (every plane's); with none at all, or no set for the QP, it goes back in
 * place as before. Lists, not states, so the pick is one lookup.
 */
struct nic_rev_ev_set {
	__u32 qpn;  /* QPN | NIC_RQ_TAG_USED of the receive QP it belongs to; else not in use */
	__u32 n;    /* entries of evs in use */
	struct nic_rev_ev evs[NIC_REV_EVS];
	__u8 n_use[NIC_MAX_PLANES + 1];
	__u8 use[(NIC_MAX_PLANES + 1) * NIC_REV_EVS]; /* row r at r * NIC_REV_EVS (1-D: bcc's
						      * layouts take no 2-D arrays) */
	__u8 reserved[(8 - (NIC_MAX_PLANES + 1) * (NIC_REV_EVS + 1) % 8) % 8];
};
_Static_assert(sizeof(struct nic_rev_ev_set) % 8 == 0, "struct nic_rev_ev_set has hidden padding");

/* What the PROBE_REPLYs of one reverse EV said (BPF writes, user space reads). */
struct nic_rev_probe {
	__u64 replies;  /* PROBE_REPLYs recorded for it */
	__u64 last_ns;  /* when the latest came back (bpf_ktime_get_ns) */
	__u32 last_psn; /* its probe number (BTH.psn) */
	__u32 rtt_ns;   /* its round trip: now - echoed tx_ts */
	__u16 ev;       /* the EV value it was for (entries are reused when an EV is replaced) */
	__u16 reserved[3];
};
_Static_assert(sizeof(struct nic_rev_probe) == 32, "struct nic_rev_probe layout changed");

/* nic_rev_probes' value: one receive QP's replies, entry i for evs[i] of its set. */
struct nic_rev_probes {
	struct nic_rev_probe evs[NIC_REV_EVS];
};

/* ---- Endpoint probes: nic_ep_probes ------------------------------------- */

/* One endpoint PROBE_REPLY as the prober's NIC took it: BPF writes, the
 * host's daemon reads (it matches psn and tx_ts with what it sent). */
struct nic_ep_probe {
	__u64 rx_ns;       /* when it came in (bpf_ktime_get_ns); 0: never written */
	__u64 tx_ts;       /* the echoed transmit time of the PROBE */
	__u32 psn;         /* the probe number (BTH.psn): slot psn % NIC_EP_SLOTS */
	__u32 svc_ns;      /* the responder's service time, when flags has MRC_PROBE_F_SVC */
	__u32 src_ip;      /* who answered: IPv4 source, network order */
	__u32 port_bitmap; /* the responder's ports that are up */
	__u16 ev;          /* the EV echoed */
	__u8 plane;        /* the port (plane) it came in on */
	__u8 flags;        /* the reply's flags (MRC_ACK_F_ECN, MRC_PROBE_F_SVC) */
	__u32 reserved;
};
_Static_assert(sizeof(struct nic_ep_probe) == 40, "struct nic_ep_probe layout changed");

/* nic_ep_probes' value: one host's endpoint probe replies. */
struct nic_ep_probes {
	struct nic_ep_probe slots[NIC_EP_SLOTS];
};

/* ---- Hosts: nic_host_ctl, nic_peer_ports --------------------------------- */

/* What a host's daemon tells its NIC (nic_host_ctl, per host id): user space
 * writes, BPF reads. */
struct nic_host_ctl {
	__u32 ports_disabled; /* bit p: port p is administratively DISABLED (mrc_ctl_modify_port):
			       * it answers no PROBE (the daemon sends none from it either) */
	__u32 ev_event_cq;    /* the CQ (index + 1 of nic_cq_rings) that takes a copy of the
			       * NIC_EV_EV_STATE records of the host's send QPs: its daemon's EV
			       * event queue (mrc_ctl_poll_ev_event); 0: none */
};
_Static_assert(sizeof(struct nic_host_ctl) == 8, "struct nic_host_ctl layout changed");

/* The last port status update (MRC_PROBE_F_PORT_STATUS) a host took from one
 * peer: BPF writes, the host's daemon reads. */
struct nic_peer_port {
	__u64 rx_ns;   /* when it came in (bpf_ktime_get_ns); 0: never */
	__u32 ports;   /* the peer's port status: bit p, its port p (plane p) up */
	__u32 updates; /* updates taken from that peer */
	__u32 plane;   /* the port (plane) the last one came in on */
	__u32 reserved;
};
_Static_assert(sizeof(struct nic_peer_port) == 24, "struct nic_peer_port layout changed");

/* nic_peer_ports' value: one host's view of its peers' ports, by peer host id. */
struct nic_peer_ports {
	struct nic_peer_port peers[NIC_MAX_HOSTS];
};

/* ---- Send QPs: nic_tx_qps ----------------------------------------------- */

/* One entry of the retransmit queue. */
struct nic_retx {
	__u32 psn;        /* the PSN to resend */
	__u16 ev;         /* the EV it was lost or trimmed on: resend on another one */
	__u8 cause;       /* enum nic_retx_cause */
	__u8 nack_reason; /* NIC_RETX_NACK: the MRC_NACK_* reason; else 0 */
};
_Static_assert(sizeof(struct nic_retx) == 8, "struct nic_retx layout changed");

/* The send engine's per-QP counters, written by BPF under the QP's lock. */
struct nic_sq_tx_stats {
	__u64 data_pkts;   /* new data packets: PSNs assigned */
	__u64 data_bytes;  /* their payload bytes */
	__u64 retx_pkts;   /* retransmissions */
	__u64 retx_stale;  /* retxq entries skipped: acknowledged or out of the window meanwhile */
	__u64 window_full; /* engine runs with data to send and no room (window or cwnd) */
	__u64 wqes_done;   /* WQEs completed (NIC_EV_SEND_DONE) */
};
_Static_assert(sizeof(struct nic_sq_tx_stats) == 48, "struct nic_sq_tx_stats layout changed");

/* Per-QP counters, written by BPF under the QP's lock. */
struct nic_sq_stats {
	__u64 sacks;         /* SACKs processed (stale and duplicate ones included) */
	__u64 nacks;         /* NACKs processed, every reason */
	__u64 stale_acks;    /* BTH.psn before snd_una: no feedback */
	__u64 dup_acks;      /* BTH.psn's feedback already taken: no feedback */
	__u64 acked_pkts;    /* PSNs newly acknowledged */
	__u64 lost_pkts;     /* PSNs declared lost from SACK holes */
	__u64 retx_queued;   /* entries written to retxq */
	__u64 retx_overflow; /* retransmissions not queued: retxq full (left to the timeout) */
	__u64 fatal_nacks;   /* NACK(UNEXP_EVENT): the QP went to ERR */
};
_Static_assert(sizeof(struct nic_sq_stats) == 72, "struct nic_sq_stats layout changed");

/* Congestion signals for NSCC (mrc-nic extension), written by rx_ack under the
 * QP's lock once per transmission's feedback; docs/congestion.md. */
struct nic_sq_cc {
	__u64 rtt_target_ns; /* setup (NIC_KICK_CWND): the high-delay threshold of an RTT */
	__u64 acks;          /* SACKs taken as feedback */
	__u64 ecn_acks;      /* of which with MRC_ACK_F_ECN */
	__u64 pkts_lo;       /* PSNs newly acknowledged, by NSCC case */
	__u64 pkts_hi;
	__u64 pkts_ecn_lo;
	__u64 pkts_ecn_hi;
	__u64 headroom;      /* sum over pkts_lo of (target - RTT), PSNs x ns */
	__u64 rtt_samples;   /* SACKs with an RTT sample */
	__u64 rtt_sum_ns;    /* the sum of those samples */
	__u64 rtt_min_ns;    /* the smallest sample ever (0: none yet) */
	__u64 trims;         /* NACK(TRIMMED): trimmed in the fabric */
	__u64 trims_lasthop; /* NACK(TRIMMED_LASTHOP): trimmed facing the receiver */
	__u64 cwnd_sets;     /* NIC_KICK_CWND runs that set the window */
};
_Static_assert(sizeof(struct nic_sq_cc) == 14 * 8, "struct nic_sq_cc layout changed");

/* The sending side of one QP: the QP that SACKs, NACKs and PROBE_REPLYs
 * address. Its rings, window and queue protocol: docs/nic-program.md,
 * "Send QPs". */
struct nic_sq {
	struct bpf_spin_lock lock; /* guards the BPF-owned fields */
	/* setup: written by user space */
	__u32 state;         /* enum nic_qp_state; BPF sets NIC_QPS_ERR on a fatal NACK */
	__u32 local_host;    /* this QP's host: ACKs must go to 198.18.P.(local_host+1) */
	__u32 peer_host;     /* the receiver's host: ACKs must come from 198.18.P.(peer_host+1) */
	__u32 peer_qpn;      /* the receiver's QP: dest QP of our data packets and probes */
	__u32 mpr;           /* window = mpr * MRC_MPR_UNIT PSNs, 1 .. NIC_MPR_MAX */
	__u32 ring;          /* index in nic_tx_ring of this QP's PSN -> EV table */
	__u32 n_evs;         /* EV profile: evs[0 .. n_evs), the OCP API's ev_count */
	__u32 ev_min_active; /* EV profile: floor of active EVs (OCP API), for the daemon */
	/* BPF-owned (user space sets the initial values) */
	__u32 snd_una;    /* oldest unacknowledged PSN */
	__u32 snd_nxt;    /* next PSN to send: the send engine advances it */
	__u32 retx_head;  /* retxq consumer (the send engine), free-running */
	__u32 retx_tail;  /* retxq producer (rx_ack), free-running */
	__u32 peer_ports; /* port bitmap of the last ACK: the peer's ports that are up */
	__u32 reo_wnd_ns; /* setup: the head scan's reorder window, ns; 0: off
			   * (mrc-nic extension) */
	__u32 scan_psn;   /* where the head scan's last pass stopped */
	__u64 acked[NIC_BITMAP_WORDS];  /* ring: acknowledged PSNs */
	__u64 echoed[NIC_BITMAP_WORDS]; /* ring: PSNs whose own SACK/NACK was taken */
	__u64 retx[NIC_BITMAP_WORDS];   /* ring: PSNs queued for retransmission */
	struct nic_sq_stats stats;
	struct nic_retx retxq[NIC_RETX_SLOTS]; /* retransmit queue, head .. tail */
	__u16 evs[NIC_MAX_QP_EVS];             /* setup: the EV profile's EV values */
	/* ---- send engine ---- */
	/* setup: written by user space */
	__u32 engine; /* 1: the send engine serves this QP (kicks and the ACK clock); 0: not */
	__u32 cwnd;   /* most packets in flight, the congestion window: snd_nxt - snd_una
		       * less the acknowledged PSNs; 0: the window. Set at setup; while
		       * packets flow, only through a NIC_KICK_CWND kick (under the lock) */
	/* BPF-owned (user space sets the initial values) */
	__u32 snd_msn;  /* MSN of WQE wqe_sent, the one being segmented (24 bits) */
	__u32 wqe_sent; /* WQEs whose every packet has been sent once (free-running) */
	__u32 wqe_done; /* WQEs completed: snd_una passed their last PSN (free-running) */
	__u32 wqe_off;  /* bytes of WQE wqe_sent sent so far */
	__u32 ev_next;  /* round robin: index in evs where the next EV search starts */
	__u32 rtt_recent_ns; /* the head scan's largest recent RTT  */
	__u32 wqe_last_psn[NIC_MSG_SLOTS]; /* WQE i in [wqe_done, wqe_sent): its last PSN, at
					    * i % NIC_MSG_SLOTS */
	struct nic_sq_tx_stats tx_stats;
	/* ---- congestion control (BPF-owned, under the lock; user space sets
	 * cwnd and cc.rtt_target_ns with a NIC_KICK_CWND kick once packets flow) ---- */
	struct nic_sq_cc cc;
	/* ---- verbs (setup) ---- */
	__u32 send_cq; /* index + 1 in nic_cq_rings: signaled WQEs and QP_ERR go there;
			* 0: every completion goes to nic_events */
	__u32 auth;          /* setup: 1: data carries a MAC, ACKs must carry one (nic_auth.h) */
	__u64 auth_key[2];   /* setup: the connection's SipHash key, the peer's QP has the same */
	/* ---- the OCP QP attributes of the requestor (mrc.h) ---- */
	__u32 max_wimm;   /* setup: most WRITE_WITH_IMM WQEs started and not completed; 0: no bound */
	__u32 dyn_mpr;    /* setup: 1: MRC_QP_CAP_DYNAMIC_MPR: the window is the smaller of
			   * mpr and the MPR the peer's latest ACK advertised */
	__u32 wimm_out;   /* BPF: WRITE_WITH_IMM WQEs started (first segment planned) and not
			   * completed */
	__u32 peer_mpr;   /* BPF: the MPR of the peer's latest ACK (0: not advertised) */
	__u64 wimm_full;  /* BPF: engine runs that held a WRITE_WITH_IMM back for max_wimm */
	__u32 probe_good; /* setup: PROBE_REPLYs that bring an ASSUMED_BAD EV back to GOOD
			   * (0 and 1: the first) */
	__u32 pd;         /* setup: the QP's protection domain: a WQE's src_region must be of
			   * it (nic_region.pd), else a local protection error; 0: the daemon's */
	__u64 peer_ports_ns; /* BPF: when an ACK last set peer_ports; a port status update
			      * from the peer after it overrides them (sq_peer_ports) */
	/* ---- blame (docs/nic-program.md, "Blame") ---- */
	__u32 silent_ns;      /* setup: an EV suspected this long without an answer is
			       * ASSUMED_BAD (the QP's timeout); 0: overdue is lost at once */
	__u32 reo_learned_ns; /* BPF: how late a packet may be here without being lost,
			       * learned from duplicates' SACKs (reo_learn), at most
			       * silent_ns, decaying; the head scan's window is at least this */
	__u64 reo_grown_ts;   /* BPF: when a duplicate last widened reo_learned_ns */
};
_Static_assert(__builtin_offsetof(struct nic_sq, snd_una) == 36, "struct nic_sq layout changed");
_Static_assert(__builtin_offsetof(struct nic_sq, acked) == 64, "struct nic_sq layout changed");
_Static_assert(__builtin_offsetof(struct nic_sq, engine) ==
		       64 + 3 * 8 * NIC_BITMAP_WORDS + sizeof(struct nic_sq_stats) +
			       NIC_RETX_SLOTS * sizeof(struct nic_retx) + 2 * NIC_MAX_QP_EVS,
	       "struct nic_sq has hidden padding");
_Static_assert(sizeof(struct nic_sq) == __builtin_offsetof(struct nic_sq, engine) + 32 +
					     4 * NIC_MSG_SLOTS + sizeof(struct nic_sq_tx_stats) +
					     sizeof(struct nic_sq_cc) + 8 + 16 + 32 + 8 + 8 + 8,
	       "struct nic_sq has hidden padding");

/* ---- EVs: nic_evs -------------------------------------------------------- */

/* Keyed by (QPN, EV value): a SACK's echoed EV finds its entry in one lookup. */
struct nic_ev_key {
	__u32 qpn; /* the send QP */
	__u32 ev;  /* the EV value (UDP source port), 1 .. MRC_EV_MAX */
};
_Static_assert(sizeof(struct nic_ev_key) == 8, "struct nic_ev_key layout changed");

/* Per-EV counters. */
struct nic_ev_stats {
	__u64 tx_pkts;              /* send engine: packets sent on this EV, retransmissions too */
	__u64 tx_bytes;             /* send engine: their payload bytes */
	__u64 retx_pkts;            /* send engine: retransmissions sent on this EV */
	__u64 acks;                 /* SACKs taken as feedback for this EV (not stale, not dup) */
	__u64 nack_trimmed;         /* NACK(TRIMMED): trimmed in the fabric */
	__u64 nack_trimmed_lasthop; /* NACK(TRIMMED_LASTHOP): trimmed facing the receiver */
	__u64 nack_oor;             /* NACK(PSN_OOR_WINDOW) */
	__u64 nack_no_resource;     /* NACK(NO_BITMAP, NO_PKT_BUFFER, NO_RESOURCE) */
	__u64 nack_fatal;           /* NACK(UNEXP_EVENT) */
	__u64 ecn_marks;            /* SACKs, NACKs and PROBE_REPLYs with MRC_ACK_F_ECN */
	__u64 lost_pkts;            /* PSNs sent on it declared lost from SACK holes */
	__u64 retx_queued;          /* PSNs sent on it queued for retransmission */
	__u64 skips;                /* times it was put in SKIP (or its SKIP extended) */
	__u64 rtt_samples;          /* RTT samples (SACKs and PROBE_REPLYs) */
	__u64 probe_replies;        /* PROBE_REPLYs for it */
};
_Static_assert(sizeof(struct nic_ev_stats) == 120, "struct nic_ev_stats layout changed");

/* One EV of one send QP. User space writes it whole at setup and may change
 * state with BPF_F_LOCK; BPF changes state and skip_until. RTT samples come
 * from SACKs and PROBE_REPLYs (srtt = 7/8 srtt + 1/8 sample). */
struct nic_ev {
	struct bpf_spin_lock lock;
	/* setup */
	__u32 plane; /* the plane (host port) packets on this EV leave from */
	/* shared: user space and BPF */
	__u32 state; /* NIC_EVS_* */
	__u32 good_probes; /* BPF: PROBE_REPLYs since it went ASSUMED_BAD (nic_sq.probe_good) */
	__u64 skip_until; /* SKIP: bpf_ktime_get_ns() at which it ends */
	/* BPF-owned */
	__u64 rtt_last; /* ns; 0: no sample yet */
	__u64 rtt_min;
	__u64 srtt;
	/* send engine */
	__u32 last_tx_psn; /* PSN of the last packet sent on this EV (if stats.tx_pkts) */
	__u32 last_tx_cpu; /* the CPU that sent it (the engine's; record_tx leaves 0) */
	__u64 last_tx_ts;  /* its tx_ts */
	/* loss detection (BPF): tx_ts of a transmission on it found overdue (the
	 * head scan, the reorder timer) with no answer on it since; 0: none. Late
	 * is not lost: the EV is blamed only when a later one of its packets is
	 * answered first, or when it stays silent for nic_sq.silent_ns
	 * (docs/nic-program.md, "Blame") */
	__u64 suspect_ts;
	struct nic_ev_stats stats;
};
_Static_assert(__builtin_offsetof(struct nic_ev, skip_until) == 16, "struct nic_ev layout changed");
_Static_assert(sizeof(struct nic_ev) == 72 + sizeof(struct nic_ev_stats),
	       "struct nic_ev has hidden padding");

/* ---- Transmissions: nic_tx_ring ----------------------------------------- */

/* What the engine records for each transmission, at entry psn % NIC_BITMAP_BITS
 * of its QP's ring, before the packet leaves: read by the loss walk. */
struct nic_tx_pkt {
	__u64 tx_ts;    /* MRC_DATA.tx_ts of the PSN's latest transmission */
	__u32 psn;      /* the PSN (24 bits): PSNs sharing the slot do not match */
	__u32 prev_psn; /* the PSN sent on the same EV just before (NIC_TX_F_PREV) */
	__u16 ev;       /* the EV of its latest transmission */
	__u16 flags;    /* NIC_TX_F_* */
	__u32 len;      /* payload bytes */
	/* send engine: what the PSN carries, for its retransmissions */
	__u32 wqe;     /* the WQE (free-running index, struct nic_sq.wqe_sent) */
	__u32 msg_off; /* byte offset of its payload in that WQE's message */
};
_Static_assert(sizeof(struct nic_tx_pkt) == 32, "struct nic_tx_pkt layout changed");

/* One send QP's PSN -> EV table. */
struct nic_tx_ring {
	struct nic_tx_pkt pkts[NIC_BITMAP_BITS];
};

/* ---- Memory: nic_mr, nic_regions ---------------------------------------- */

/* One element of nic_mr; user space mmaps the map. */
struct nic_mr_elem {
	__u8 bytes[NIC_MR_ELEM_SIZE];
};
_Static_assert(sizeof(struct nic_mr_elem) == NIC_MR_ELEM_SIZE, "struct nic_mr_elem layout changed");

/* One region, a slice of nic_mr (n_elems == 0: none). Data is placed when
 * rkey matches, its bytes lie inside the region's MR (byte-granular: any va,
 * any length), the region takes WRITEs and is of the receiving QP's host
 * (owner) and protection domain (pd); the send engine reads a WQE's payload
 * only from a region of the QP's own host and PD (docs/api.md, "Protection
 * domains"). An MR need not start or end on an element: head and tail are
 * the bytes of its first and last elements outside it (an application's MR
 * lies at the page offset of its buffer, docs/api.md "C programs"). */
struct nic_region {
	__u64 base_va;      /* RETH.va of the region's first element's first byte */
	__u32 first_elem;   /* its first element in nic_mr */
	__u32 n_elems;      /* its size in elements */
	__u32 rkey;         /* the remote key data packets must carry */
	__u32 owner;        /* host + 1 of an application's MR (the verbs API); 0: the daemon's */
	__u32 pd;           /* its protection domain, a number of the owner's host; 0: the daemon's */
	__u32 remote_write; /* 1: WRITEs may be placed in it (IBV_ACCESS_REMOTE_WRITE); 0: none */
	__u32 head;         /* bytes from base_va to the MR's first byte (not the MR's) */
	__u32 tail;         /* bytes after the MR's last byte to the region's end (not the MR's) */
};
_Static_assert(sizeof(struct nic_region) == 40, "struct nic_region layout changed");

/* ---- Send queues and kicks: nic_wq -------------------------------------- */

/* One work request: a WRITE or WRITE_WITH_IMM of len bytes from src_region
 * at src_off to the peer's remote_va/rkey, at any byte addresses. */
struct nic_wqe {
	__u64 wr_id;      /* user space's id, returned in the completion */
	__u64 remote_va;  /* RETH.va of the message's first byte */
	__u32 rkey;       /* the peer region's remote key */
	__u32 len;        /* message bytes; 0: one packet without payload */
	__u32 src_region; /* index in nic_regions of the memory the payload is read from */
	__u32 src_off;    /* byte offset of the message in it (from its base_va): any byte */
	__u32 imm;        /* immediate data, host order (opcode MRC_OP_WRITE_IMM) */
	__u8 opcode;      /* MRC_OP_WRITE, or MRC_OP_WRITE_IMM for WRITE_WITH_IMM: its last
			   * packet is a WRITE_IMM carrying imm, the others are WRITEs */
	__u8 flags;       /* NIC_WQE_F_*: SIGNALED, a completion record for a QP with a send CQ */
	__u8 reserved[2];
};
_Static_assert(sizeof(struct nic_wqe) == 40, "struct nic_wqe layout changed");

/* A send QP's queue (docs/nic-program.md, "Send queues"): user space posts, BPF
 * publishes what completed, so a poster reading the mmapped queue sees free
 * slots without a syscall. */
struct nic_wq {
	__u32 posted; /* WQEs posted (free-running); written after the WQE itself; user space */
	__u32 done;   /* WQEs completed (free-running): struct nic_sq.wqe_done, written by BPF
		       * whenever it advances; slot i % NIC_MSG_SLOTS is free once done > i */
	struct nic_wqe wqes[NIC_MSG_SLOTS]; /* WQE i at i % NIC_MSG_SLOTS */
};
_Static_assert(sizeof(struct nic_wq) == 8 + NIC_MSG_SLOTS * sizeof(struct nic_wqe),
	       "struct nic_wq layout changed");

/* A kick's XDP metadata: user space runs the program with BPF_PROG_RUN on a
 * template frame that carries it (docs/nic-program.md, "Kicks"). */
struct nic_kick {
	__u32 qpn;    /* the send QP to serve */
	__u16 op;     /* enum nic_kick_op */
	__u16 arg;    /* NIC_KICK_TIMEOUT: most PSNs to queue (0: NIC_TIMEOUT_MAX);
		       * NIC_KICK_CWND: the new cwnd (packets; 0: the window);
		       * NIC_KICK_EV_REPLACE: the slot, an index in struct nic_sq.evs;
		       * NIC_KICK_FAIL: the reason (enum nic_qp_error) */
	__u64 age_ns; /* NIC_KICK_TIMEOUT: queue only PSNs last sent this long ago or more;
		       * NIC_KICK_CWND: the new cc.rtt_target_ns;
		       * NIC_KICK_EV_REPLACE: old EV << 16 | new EV */
};
_Static_assert(sizeof(struct nic_kick) == 16, "struct nic_kick layout changed");

/* ---- Ports: nic_ports ---------------------------------------------------- */

/* A host port's addresses, for the engine's data packets. */
struct nic_port {
	__u8 mac[6];    /* the host port's MAC: Ethernet source of data packets */
	__u8 nh_mac[6]; /* the next hop's MAC (the T0 switch port): their destination */
	__u32 ifindex;  /* the port's ifindex in its host's namespace (as put in nic_tx_ports) */
};
_Static_assert(sizeof(struct nic_port) == 16, "struct nic_port layout changed");

/* ---- Events: nic_events (40 bytes each: type and qpn first, ts last) ---- */

/* A WRITE_WITH_IMM completion (NIC_EV_RECV_IMM). */
struct nic_event {
	__u32 type; /* enum nic_event_type */
	__u32 qpn;  /* the receiving QP */
	__u32 msn;  /* the message's MSN */
	__u32 imm;  /* its immediate data, host order */
	__u64 va;   /* its base address (RETH.va of its first byte) */
	__u32 len;  /* its length in bytes */
	__u32 reserved;
	__u64 ts; /* bpf_ktime_get_ns() when it completed */
};
_Static_assert(sizeof(struct nic_event) == 40, "struct nic_event layout changed");

/* An EV state change (NIC_EV_EV_STATE). */
struct nic_ev_event {
	__u32 type; /* NIC_EV_EV_STATE */
	__u32 qpn;  /* the send QP */
	__u32 ev;
	__u32 old_state; /* NIC_EVS_* */
	__u32 new_state;
	__u32 cause; /* enum nic_ev_cause */
	__u32 psn;   /* LOSS: the first PSN declared lost; PROBE_REPLY: the probe number */
	__u32 reserved;
	__u64 ts;
};
_Static_assert(sizeof(struct nic_ev_event) == 40, "struct nic_ev_event layout changed");

/* A PSN declared lost (NIC_EV_LOSS). */
struct nic_loss_event {
	__u32 type; /* NIC_EV_LOSS */
	__u32 qpn;  /* the send QP */
	__u32 psn;  /* the PSN declared lost (queued for retransmission) */
	__u32 ev;   /* the EV it was sent on */
	__u64 tx_ts;   /* when it was sent */
	__u32 ack_psn; /* the PSN whose SACK exposed the hole (sent later on the same EV) */
	__u32 reserved;
	__u64 ts;
};
_Static_assert(sizeof(struct nic_loss_event) == 40, "struct nic_loss_event layout changed");

/* A fatal NACK (error NIC_ERR_NONE), or a local error (syndrome, reason and
 * ev 0): the engine could not read a WQE's source (psn: the PSN it was about
 * to send), or user space failed the QP with NIC_KICK_FAIL (psn: snd_una).
 * Written to nic_events and, for a QP with a send CQ, to that CQ too. */
struct nic_qp_err_event {
	__u32 type;     /* NIC_EV_QP_ERR */
	__u32 qpn;      /* the send QP, now in ERR */
	__u32 psn;      /* BTH.psn of the fatal NACK: the request that failed */
	__u32 ev;       /* its echoed EV */
	__u32 syndrome; /* AETH syndrome (MRC_AETH_NAK_*): the verbs error to complete with */
	__u32 reason;   /* MRC_NACK_* */
	__u32 error;    /* enum nic_qp_error: NIC_ERR_NONE for a fatal NACK */
	__u32 reserved;
	__u64 ts;
};
_Static_assert(sizeof(struct nic_qp_err_event) == 40, "struct nic_qp_err_event layout changed");

/* A send completion, in posting order (NIC_EV_SEND_DONE). */
struct nic_send_event {
	__u32 type;     /* NIC_EV_SEND_DONE */
	__u32 qpn;      /* the send QP */
	__u32 msn;      /* the MSN the engine gave the WQE */
	__u32 last_psn; /* the PSN of its last packet */
	__u64 wr_id;    /* the WQE's wr_id */
	__u32 len;      /* its length in bytes */
	__u32 wqe;      /* its free-running index (struct nic_sq.wqe_done before it) */
	__u64 ts;
};
_Static_assert(sizeof(struct nic_send_event) == 40, "struct nic_send_event layout changed");

/* ---- Per-CPU scratch (BPF only, not pinned) ----------------------------- */

/* Completions one data packet raised, gathered under the receive lock and
 * sent after it (nic_cqe_scratch). */
struct nic_cqe {
	__u64 va;
	__u32 msn;
	__u32 imm;
	__u32 len;
	__u32 reserved;
};
struct nic_cqe_batch {
	__u32 n;    /* completions in cqes */
	__u32 done; /* messages completed by this packet, with or without immediate */
	struct nic_cqe cqes[NIC_MSG_SLOTS];
	struct nic_event out[NIC_MSG_SLOTS]; /* a receive CQ's records, for one ring write */
};
_Static_assert(sizeof(struct nic_cqe) == 24, "struct nic_cqe layout changed");

/* A payload on its way between a packet and NIC memory that does not start
 * on an element (nic_copy_scratch): copied whole here, then piece by piece
 * to or from its elements (docs/nic-program.md, "Byte-granular placement"). */
struct nic_copy_buf {
	__u8 bytes[NIC_COPY_BUF];
};

/* A PSN rx_ack declared lost. */
struct nic_lost {
	__u32 psn;
	__u32 ev; /* the head scan's: the EV it went on (the walk's are all the echoed EV) */
	__u64 tx_ts;
};

/* What the locked part of rx_ack decided, read after the lock (nic_ack_scratch). */
struct nic_ack_scratch {
	__u32 verdict; /* enum ack_verdict */
	__u32 newly;   /* PSNs newly acknowledged */
	__u32 fb;      /* feedback taken for the echoed EV */
	__u32 queued;  /* the NACKed PSN was queued */
	__u32 fatal;   /* the QP went to ERR */
	__u32 n_lost;  /* entries of lost */
	__u32 n_head;  /* entries of head (the head scan) */
	__u32 reserved;
	struct nic_lost lost[NIC_LOSS_WALK_MAX];
	struct nic_lost head[NIC_HEAD_LOST];
};

/* What the locked part of the engine decided, read after the lock (nic_tx_scratch). */
struct nic_tx_scratch {
	__u32 what;    /* enum tx_plan */
	__u32 full;    /* new data waited: no room in the window or cwnd */
	__u32 psn;     /* the PSN to send */
	__u32 wqe;     /* its WQE (free-running index) */
	__u32 off;     /* its payload's offset in the message */
	__u32 msn;     /* the WQE's MSN */
	__u32 lost_ev; /* a retransmission: the EV that lost it */
	__u32 second;  /* send on the second EV found (the first lost this PSN) */
	__u32 n_done;  /* completion records in done (a QP with a send CQ: signaled WQEs only) */
	__u32 n_wqes;  /* WQEs completed by this run, signaled or not */
	__u32 ackreq;  /* new data that fills the window or cwnd: set AckReq (ACK coalescing) */
	__u32 reserved;
	struct nic_send_event done[NIC_MSG_SLOTS];
	/* The planned WQE, copied under the QP's lock: once the lock is released a
	 * SACK on another CPU may complete it and the poster reuse its slot. */
	struct nic_wqe wqe_copy;
	/* The data packet's headers as the engine builds them (struct data_hdrs,
	 * bpf/nic_engine.h): here, not on the program's full stack. */
	__u8 hdrs[96];
};

/* A timeout kick's lost PSNs and their EVs, marked after the QP's lock
 * (nic_timeout_scratch). */
struct nic_timeout_scratch {
	__u32 psn[NIC_TIMEOUT_MAX];
	__u32 ev[NIC_TIMEOUT_MAX];
};

#endif /* MRC_NIC_STRUCTS_H */
