/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_consts.h: the NIC program's constants and enums, shared with user
 * space (mrc_nic/nic mirrors them; a test compares). Tunables are
 * `#ifndef NAME / #define NAME default`: the loader overrides them with -D.
 * Why each value is what it is: docs/nic-program.md.
 */
#ifndef MRC_NIC_CONSTS_H
#define MRC_NIC_CONSTS_H

#include <linux/types.h>

#include "mrc_wire.h"

/* ---- Tunables (override with -DNAME=value; the loader does) ------------- */

/* Slots of nic_rx_qps (QP q in slot q & (NIC_MAX_QPS - 1)) and entries of
 * nic_tx_qps. A power of two. */
#ifndef NIC_MAX_QPS
#define NIC_MAX_QPS 4096
#endif
_Static_assert(NIC_MAX_QPS > 0 && (NIC_MAX_QPS & (NIC_MAX_QPS - 1)) == 0,
	       "NIC_MAX_QPS must be a power of two");

/* Elements of NIC_MR_ELEM_SIZE bytes in nic_mr, every region of the lab (64 MiB). */
#ifndef NIC_MR_ELEMS
#define NIC_MR_ELEMS 65536
#endif

/* Entries of the region table nic_regions (region ids 0 .. NIC_MAX_REGIONS-1).
 * A power of two: an application MR's rkey carries its region id in its low bits. */
#ifndef NIC_MAX_REGIONS
#define NIC_MAX_REGIONS 256
#endif
_Static_assert((NIC_MAX_REGIONS & (NIC_MAX_REGIONS - 1)) == 0, "NIC_MAX_REGIONS must be a power of two");

/* A receive QP whose region is this takes the region a WRITE's rkey names
 * (rkey & (NIC_MAX_REGIONS - 1)), if its host owns it: verbs' rkey lookup. */
#define NIC_REGION_BY_RKEY 0xFFFFFFFFU
/* struct nic_rq.region of a QP that takes no WRITE (its access flags lack
 * REMOTE_WRITE): no region has this id, so every WRITE with a payload is a
 * remote access error, as for a wrong rkey. */
#define NIC_REGION_NONE 0xFFFFFFFEU

/* Host ids 0 .. NIC_MAX_HOSTS-1 (host h is .h+1 in its plane's /24). */
#ifndef NIC_MAX_HOSTS
#define NIC_MAX_HOSTS 256
#endif

/* Planes: the third octet of a host address, relative to NIC_HOST_NET. */
#ifndef NIC_MAX_PLANES
#define NIC_MAX_PLANES 16
#endif

/* A QP number is host << NIC_QPN_HOST_SHIFT | index (mrc_nic.transport.hostmem):
 * the host whose daemon takes a send QP's EV state records. */
#define NIC_QPN_HOST_SHIFT 16

/* The lab's host network, host order (198.18.0.0): plane p is its p-th /24. */
#ifndef NIC_HOST_NET
#define NIC_HOST_NET 0xC6120000U
#endif

/* Size of the event ring buffer nic_events, in pages (a power of 2). */
/* Reverse EVs per receive QP at most (struct nic_rev_ev_set): the paths its
 * SACKs, NACKs and PROBE_REPLYs take back to the sender. */
#ifndef NIC_REV_EVS
#define NIC_REV_EVS 16
#endif
_Static_assert(NIC_REV_EVS > 0 && NIC_REV_EVS <= 255, "NIC_REV_EVS indexes fit a __u8");

/* Endpoint probe replies kept per host (struct nic_ep_probes): the most
 * probes one host's controller has outstanding. A power of two. */
#ifndef NIC_EP_SLOTS
#define NIC_EP_SLOTS 128
#endif
_Static_assert(NIC_EP_SLOTS > 0 && (NIC_EP_SLOTS & (NIC_EP_SLOTS - 1)) == 0,
	       "NIC_EP_SLOTS must be a power of two");

#ifndef NIC_EVENT_PAGES
#define NIC_EVENT_PAGES 64
#endif

/* Entries of nic_evs (all QPs of the lab together). */
#ifndef NIC_MAX_EVS
#define NIC_MAX_EVS 16384
#endif

/* Entries of nic_tx_ring and nic_wq: one per send QP (struct nic_sq.ring). */
#ifndef NIC_TX_RINGS
#define NIC_TX_RINGS 256
#endif

/* How long an EV stays in SKIP after an ECN mark or a NACK(TRIMMED), ns:
 * about two of the lab's RTTs (docs/nic-program.md, "EV states"). */
#ifndef NIC_SKIP_NS
#define NIC_SKIP_NS 100000
#endif

/* Most PSNs one SACK's loss walk may declare lost; the rest are the timeout's. */
#ifndef NIC_LOSS_WALK_MAX
#define NIC_LOSS_WALK_MAX 16
#endif

/* Payload bytes placed per bin of nic_rx_timeline: bins of 2^SHIFT ns
 * (1.05 ms), the last NIC_TIMELINE_BINS of them (8.6 s). */
#ifndef NIC_TIMELINE_SHIFT
#define NIC_TIMELINE_SHIFT 20
#endif
#ifndef NIC_TIMELINE_BINS
#define NIC_TIMELINE_BINS 8192
#endif

/* Delivery gaps at least this long (ns) go to the QP's gap log (struct nic_rq.gaps). */
#ifndef NIC_GAP_MIN_NS
#define NIC_GAP_MIN_NS 100000
#endif

/* PSNs one head-scan pass looks at (docs/nic-program.md, "Loss detection"). */
#ifndef NIC_HEAD_SCAN
#define NIC_HEAD_SCAN 8
#endif

/* The doorbell port: a veth in each host's namespace whose NIC end has this
 * ifindex and the NIC program. A frame sent into it (AF_PACKET, EtherType
 * NIC_KICK_ETHERTYPE, struct nic_kick after the Ethernet header) is a kick:
 * a few us where a live-frames BPF_PROG_RUN costs about 18 (docs/nic-program.md, "Kicks"). */
#define NIC_DOORBELL_IFINDEX 4791
#define NIC_KICK_ETHERTYPE 0x88B5

/* ACK coalescing (docs/nic-program.md, "ACK coalescing"): a receive QP answers
 * one data packet in NIC_ACK_EVERY (in order or not, within the 64 PSNs a SACK
 * reports), or the first after one held for NIC_ACK_DELAY_NS; LAST, ECN-marked,
 * AckReq, duplicate and trimmed packets at once. The lab's default,
 * for receive QPs whose own ack_every is 0; 1: every packet (no coalescing). */
#ifndef NIC_ACK_EVERY
#define NIC_ACK_EVERY 1
#endif
#ifndef NIC_ACK_DELAY_NS
#define NIC_ACK_DELAY_NS 50000
#endif
/* The sender's side of it: a SACK that acknowledges k > 1 PSNs of an engine
 * QP becomes min(k, NIC_FANOUT_MAX) kicks through the host's doorbell
 * (nic_fanout), each one engine run: the ACK clock's k packets for k acked. */
#define NIC_FANOUT_MAX 8

/* Most PSNs one timeout kick queues (struct nic_kick, NIC_KICK_TIMEOUT). */
#ifndef NIC_TIMEOUT_MAX
#define NIC_TIMEOUT_MAX 64
#endif
/* In a timeout kick's arg (16 bits): the reorder timer's kick, not a timeout.
 * What it queues is overdue, not lost: no EV is blamed for it
 * (docs/nic-program.md, "Blame"). */
#define NIC_TIMEOUT_F_REORDER 0x8000U

/* Size of a completion queue's ring buffer (nic_cq_rings' template), in pages
 * (a power of 2): an application creates its CQ's ring buffer this size. */
#ifndef NIC_CQ_RING_PAGES
#define NIC_CQ_RING_PAGES 16
#endif
_Static_assert(NIC_CQ_RING_PAGES > 0 && (NIC_CQ_RING_PAGES & (NIC_CQ_RING_PAGES - 1)) == 0,
	       "NIC_CQ_RING_PAGES must be a power of two");

/* Entries of nic_cq_rings: completion queues 1 .. NIC_MAX_CQS (struct
 * nic_sq.send_cq, nic_rq.recv_cq; 0 is "none"), each at index CQ - 1. */
#ifndef NIC_MAX_CQS
#define NIC_MAX_CQS 1024
#endif

/* How long an EV stays with the CPU that last sent on it, ns: per-CPU bulk
 * queues would reorder its packets (docs/nic-program.md, "EV hold"). */
#ifndef ENGINE_EV_HOLD_NS
#define ENGINE_EV_HOLD_NS 200000
#endif

/* ---- Layout constants (NOT tunable: user space mirrors them) ------------ */

/* Region element: RoCE's path MTU on 1500-byte Ethernet, the unit of placement. */
#define NIC_MR_ELEM_SIZE 1024

/* A full data packet's payload: the most whole elements that fit MRC_MTU, at
 * most NIC_SEG_ELEMS_MAX (veth's non-frags XDP stops near a 3.5 KB MTU). */
#define NIC_SEG_ELEMS_MAX 3
#define NIC_SEG_ELEMS_FIT (MRC_PAYLOAD_MAX(MRC_MTU) / NIC_MR_ELEM_SIZE)
#define NIC_SEG_ELEMS (NIC_SEG_ELEMS_FIT < NIC_SEG_ELEMS_MAX ? NIC_SEG_ELEMS_FIT : NIC_SEG_ELEMS_MAX)
#define NIC_SEG_SIZE (NIC_SEG_ELEMS * NIC_MR_ELEM_SIZE)
_Static_assert(NIC_SEG_ELEMS >= 1, "MRC_MTU too small for a 1024-byte payload");
/* A payload at an offset inside an element spans one element more; the copy
 * buffer holds it at any offset (the verifier bounds offset + length by the
 * buffer's size, not by their sum at run time). */
#define NIC_COPY_BUF (NIC_SEG_ELEMS_MAX * NIC_MR_ELEM_SIZE + NIC_MR_ELEM_SIZE)

/* Largest MPR (units of MRC_MPR_UNIT PSNs). PSN p lives at bit
 * p % NIC_BITMAP_BITS of the rings: a power of two dividing 2^24, so a ring
 * position does not jump when the PSN wraps. */
#define NIC_MPR_MAX 8
#define NIC_BITMAP_BITS (NIC_MPR_MAX * MRC_MPR_UNIT) /* 1024 */
#define NIC_BITMAP_WORDS (NIC_BITMAP_BITS / 64)      /* 16 */

/* Messages per receive QP whose LAST packet has arrived but that are not
 * complete yet (a LAST of MSN m fits when 0 <= m - msn < NIC_MSG_SLOTS, else
 * NACK(NO_RESOURCE)); also a send queue's depth. A power of two. */
#define NIC_MSG_SLOTS 32

/* EVs in one send QP's EV profile (struct nic_sq.evs): the OCP API's ev_count. */
#define NIC_MAX_QP_EVS 256

/* Entries of a send QP's retransmit queue (struct nic_sq.retxq). A power of two. */
#define NIC_RETX_SLOTS 256

_Static_assert((NIC_BITMAP_BITS & (NIC_BITMAP_BITS - 1)) == 0 && NIC_BITMAP_BITS >= 64,
	       "NIC_BITMAP_BITS must be a power of two >= 64");
_Static_assert((NIC_MSG_SLOTS & (NIC_MSG_SLOTS - 1)) == 0, "NIC_MSG_SLOTS must be a power of two");
_Static_assert((NIC_RETX_SLOTS & (NIC_RETX_SLOTS - 1)) == 0, "NIC_RETX_SLOTS must be a power of two");
_Static_assert(NIC_LOSS_WALK_MAX >= 1 && NIC_LOSS_WALK_MAX <= 64, "NIC_LOSS_WALK_MAX out of range");

/* ---- QP states ---------------------------------------------------------- */

/* verbs' enum ibv_qp_state. RTR and RTS take data and PROBEs; RTS and SQD
 * take SACKs, NACKs and PROBE_REPLYs. */
enum nic_qp_state {
	NIC_QPS_RESET = 0,
	NIC_QPS_INIT = 1,
	NIC_QPS_RTR = 2,
	NIC_QPS_RTS = 3,
	NIC_QPS_SQD = 4,
	NIC_QPS_SQE = 5,
	NIC_QPS_ERR = 6,
};

/* ---- Receive side ------------------------------------------------------- */

#define NIC_RQ_TAG_USED 0x80000000u /* an owner in nic_rx_slots: QPN | this */

#define NIC_MSG_F_VALID 0x1 /* the slot holds a message */
#define NIC_MSG_F_IMM 0x2   /* WRITE_WITH_IMM: raise a completion event */

/* The gap log: bins of 2^NIC_GAP_BIN_SHIFT ns (67 ms), the last NIC_GAP_BINS. */
#define NIC_GAP_BIN_SHIFT 26
#define NIC_GAP_BINS 64
_Static_assert((NIC_GAP_BINS & (NIC_GAP_BINS - 1)) == 0, "NIC_GAP_BINS must be a power of two");

/* Receive locks (nic_rx_locks): QP q's is entry q % NIC_RX_LOCKS; a taker
 * gives up after NIC_RX_LOCK_TRIES (the verifier walks every try). */
#define NIC_RX_LOCKS 256
#define NIC_RX_LOCK_TRIES 1024

/* ---- Send side ---------------------------------------------------------- */

enum nic_retx_cause {
	NIC_RETX_NACK = 1, /* a retryable NACK asked for it (trimmed, window, resources) */
	NIC_RETX_LOST = 2, /* declared lost from a SACK hole (loss walk) */
	NIC_RETX_TIMEOUT = 3, /* no acknowledgement within the QP's timeout (a timeout kick) */
};

/* EV states: the OCP API's enum mrc_ctl_ev_state values, plus SKIP (mrc-nic
 * extension). Who moves an EV where: docs/nic-program.md, "EV states". */
#define NIC_EVS_GOOD 0x1U         /* MRC_CTL_EV_GOOD */
#define NIC_EVS_ASSUMED_BAD 0x2U  /* MRC_CTL_EV_ASSUMED_BAD */
#define NIC_EVS_DENIED 0x4U       /* MRC_CTL_EV_DENIED */
#define NIC_EVS_SKIP 0x10000U     /* mrc-nic extension: skipped until skip_until */
#define NIC_EVS_UNKNOWN 0x80000000U /* MRC_CTL_EV_UNKNOWN */

/* States of a reverse EV (struct nic_rev_ev.state; the receiver's daemon sets them). */
#define NIC_REV_UNTRIED 0U   /* not answered yet: not used */
#define NIC_REV_GOOD 1U      /* its probes are answered: answers may take it */
#define NIC_REV_ASSUMED_BAD 2U /* its probes went unanswered: not used, still probed */

/* The head scan's reorder window follows the largest recent RTT. */
#define NIC_RTT_RECENT_SHIFT 6 /* rtt_recent_ns forgets a peak over about 64 samples */
#define NIC_RTT_RECENT_CAP 4   /* a sample counts for at most 4 reorder windows */
#define NIC_REO_LEARN_SHIFT 20 /* reo_learned_ns forgets a late packet over about 2^20 SACKs */
_Static_assert((NIC_HEAD_SCAN & (NIC_HEAD_SCAN - 1)) == 0, "NIC_HEAD_SCAN must be a power of two");
#define NIC_HEAD_LOST (2 * NIC_HEAD_SCAN) /* losses one head scan can find: two passes */

#define NIC_TX_F_PREV 0x1 /* prev_psn is valid: an earlier packet went on this EV */
#define NIC_TX_F_RETX 0x2 /* this transmission is a retransmission */

/* struct nic_wqe.flags. A QP with a send CQ reports a WQE's completion there
 * only when it is signaled (verbs' CQ moderation); without a CQ, every WQE
 * completes to nic_events as before. */
#define NIC_WQE_F_SIGNALED 0x1

/* What a kick asks (struct nic_kick.op); docs/nic-program.md, "Kicks". */
enum nic_kick_op {
	NIC_KICK_SEND = 0,    /* send what there is: retransmissions first, then new data */
	NIC_KICK_TIMEOUT = 1, /* queue the oldest unacknowledged PSNs, then send */
	NIC_KICK_CWND = 2,    /* set cwnd and cc.rtt_target_ns, then send (mrc-nic extension) */
	NIC_KICK_EV_REPLACE = 3, /* put a new EV in a profile slot (OCP: MRC_CTL_EV_OP_REPLACE_EV) */
	NIC_KICK_FAIL = 4,       /* move the QP to ERR, reason arg (enum nic_qp_error), and report it */
};

/* Why a send QP went to ERR without a fatal NACK (struct nic_qp_err_event.error):
 * the verbs status its work requests complete with. */
enum nic_qp_error {
	NIC_ERR_NONE = 0,           /* a fatal NACK: syndrome and reason say what the peer refused */
	NIC_ERR_RETRY_EXCEEDED = 1, /* the daemon's retry budget is spent (NIC_KICK_FAIL) */
	NIC_ERR_BAD_WQE = 2,        /* a WQE's source could not be read: gone, or outside its
				     * region (local QP operation error) */
	NIC_ERR_LOC_PROT = 3,       /* a WQE's source is a region of another host or protection
				     * domain than the QP's (local protection error) */
};

/* ---- Events: ring buffer nic_events ------------------------------------- */

/* Every record is 40 bytes and starts with type and qpn; ts is its last field. */
enum nic_event_type {
	NIC_EV_RECV_IMM = 1, /* a WRITE_WITH_IMM message completed, in message order */
	NIC_EV_EV_STATE = 2, /* an EV changed state (struct nic_ev_event) */
	NIC_EV_LOSS = 3,     /* a PSN was declared lost (struct nic_loss_event) */
	NIC_EV_QP_ERR = 4,   /* a send QP went to ERR (struct nic_qp_err_event) */
	NIC_EV_SEND_DONE = 5, /* a WQE completed: snd_una passed its last PSN (struct nic_send_event) */
};

/* Why an EV changed state (struct nic_ev_event.cause). SKIP comes and goes
 * without events, as in the OCP API, which reports ASSUMED_BAD and GOOD. */
enum nic_ev_cause {
	NIC_EVC_LOSS = 1,        /* a PSN sent on it was declared lost: -> ASSUMED_BAD */
	NIC_EVC_PROBE_REPLY = 2, /* a PROBE_REPLY came back: ASSUMED_BAD -> GOOD */
	NIC_EVC_TIMEOUT = 3,     /* a PSN sent on it timed out (a timeout kick): -> ASSUMED_BAD */
};

/* ---- Counters: map nic_counters ----------------------------------------- */

/* One index per outcome. Every packet adds 1 to exactly one of PASS_*,
 * DROP_*, SACK, NACK_*, PROBE_REPLY, ACK_CONSUMED, ACK_STALE and
 * PROBE_REPLY_CONSUMED, every kick to one of KICK_SENT, KICK_IDLE and DROP_*;
 * the others are extra. An ACK turned into a data packet is ACK_CONSUMED (or
 * ACK_STALE) and TX_CLOCKED. */
enum nic_counter {
	NIC_CNT_PASS_NOT_MRC = 0,    /* not IPv4 / UDP / dport 4791 (or cut before UDP): XDP_PASS */
	NIC_CNT_PASS_OTHER_OPCODE,   /* a RoCE opcode outside MRC's ranges (UC, UD, CNP...): XDP_PASS */
	NIC_CNT_SACK,                /* data answered with a SACK (XDP_TX) */
	NIC_CNT_NACK_TRIMMED,        /* NACK(TRIMMED) sent */
	NIC_CNT_NACK_TRIMMED_LASTHOP, /* NACK(TRIMMED_LASTHOP) sent */
	NIC_CNT_NACK_OOR,            /* NACK(PSN_OOR_WINDOW) sent */
	NIC_CNT_NACK_NO_RESOURCE,    /* NACK(NO_RESOURCE): no message slot */
	NIC_CNT_NACK_REM_ACCESS,     /* NACK(UNEXP_EVENT), remote access: rkey or va outside region */
	NIC_CNT_DROP_TRUNCATED,      /* frame shorter than its IPv4 total length */
	NIC_CNT_DROP_SHORT,          /* UDP payload shorter than the opcode's headers + ICRC */
	NIC_CNT_DROP_BAD_LEN,        /* IPv4/UDP lengths disagree, or RETH.dmalen != payload */
	NIC_CNT_DROP_TOO_LONG,       /* payload > MRC_PAYLOAD_MAX(MRC_MTU) or > NIC_MR_ELEM_SIZE */
	NIC_CNT_DROP_BAD_OPCODE,     /* unknown opcode in MRC's ranges (RC 0x00-0x1F, 0xC0-0xFF) */
	NIC_CNT_DROP_IMM_NOT_LAST,   /* WRITE_IMM without MRC_DATA_F_LAST */
	NIC_CNT_DROP_UNKNOWN_QP,     /* no state for BTH.qpn: receive QP (data, PROBE), send QP (ACKs) */
	NIC_CNT_DROP_SPOOFED,        /* IPv4 source/destination are not the QP's peer/local host */
	NIC_CNT_DROP_QP_STATE,       /* QP not in RTR/RTS (data, PROBE) or RTS/SQD (ACKs) */
	NIC_CNT_DROP_QP_CONFIG,      /* mpr out of 1..NIC_MPR_MAX, no ring, more in flight than mpr;
				      * a kick for a QP without the engine */
	NIC_CNT_DROP_BAD_VA,         /* none since placement is byte-granular (kept: counter ids) */
	NIC_CNT_DROP_BAD_MSN,        /* LAST packet of an MSN already completed, or conflicting */
	NIC_CNT_DROP_XDP_ERR,        /* resizing the frame for the answer or data packet failed */
	NIC_CNT_PLACED,              /* payloads placed in memory */
	NIC_CNT_PLACED_BYTES,        /* their bytes */
	NIC_CNT_DUP,                 /* duplicates (SACKed with MRC_ACK_F_DUP) */
	NIC_CNT_MSG_DONE,            /* messages completed in order */
	NIC_CNT_EVENTS,              /* events written to nic_events */
	NIC_CNT_EVENTS_LOST,         /* events lost: ring buffer full */
	/* PROBE (receiver role) */
	NIC_CNT_PROBE_REPLY,          /* PROBE answered with a PROBE_REPLY (XDP_TX) */
	/* SACK, NACK, PROBE_REPLY (sender role): consumed, XDP_DROP */
	NIC_CNT_ACK_CONSUMED,         /* SACK/NACK processed */
	NIC_CNT_ACK_STALE,            /* SACK/NACK that changed nothing: stale or duplicate */
	NIC_CNT_PROBE_REPLY_CONSUMED, /* PROBE_REPLY processed */
	NIC_CNT_DROP_BAD_ACK,         /* AETH syndrome and nack_reason unknown or disagreeing */
	NIC_CNT_DROP_ACK_RANGE,       /* acknowledges PSNs at or beyond snd_nxt (never sent) */
	NIC_CNT_ACKED,                /* PSNs newly acknowledged */
	NIC_CNT_LOST,                 /* PSNs declared lost from SACK holes */
	NIC_CNT_RETX_QUEUED,          /* PSNs queued for retransmission */
	NIC_CNT_UNKNOWN_EV,           /* SACK/NACK/PROBE_REPLY for an EV without nic_evs state */
	/* The send engine */
	NIC_CNT_KICK_SENT,       /* kick that sent a data packet (XDP_REDIRECT) */
	NIC_CNT_KICK_IDLE,       /* kick that sent nothing (no work, no room, no EV, error) */
	NIC_CNT_TX_DATA,         /* new data packets built */
	NIC_CNT_TX_RETX,         /* retransmissions built */
	NIC_CNT_TX_BYTES,        /* their payload bytes */
	NIC_CNT_TX_CLOCKED,      /* data packets (new or resent) built from an ACK: the ACK clock */
	NIC_CNT_TX_WINDOW_FULL,  /* engine runs with data to send but no room (window, cwnd) */
	NIC_CNT_TX_NO_EV,        /* engine runs with something to send but no usable EV
				  * (states, ports down, or all held by other CPUs) */
	NIC_CNT_TX_BAD_WQE,      /* a WQE's source gone, outside its region or of another PD
				  * (NIC_ERR_BAD_WQE, NIC_ERR_LOC_PROT): the QP went to ERR */
	NIC_CNT_TX_REDIRECT_ERR, /* no device in nic_tx_ports for the plane: packet dropped */
	NIC_CNT_SEND_DONE,       /* WQEs completed (a record each, but unsignaled ones of a QP with a send CQ) */
	NIC_CNT_TIMEOUT_KICKS,   /* timeout kicks (NIC_KICK_TIMEOUT) taken */
	NIC_CNT_TIMEOUT_QUEUED,  /* PSNs they queued for retransmission */
	NIC_CNT_LOST_HEAD,       /* PSNs the head scan declared lost (also in LOST) */
	NIC_CNT_CWND_KICKS,      /* NIC_KICK_CWND runs that set a QP's window (then a send kick) */
	NIC_CNT_EV_REPLACED,     /* NIC_KICK_EV_REPLACE runs that put a new EV in a profile slot */
	NIC_CNT_DROP_RX_BUSY,    /* data packet dropped: its QP's receive lock stayed taken */
	NIC_CNT_CQ_EVENTS,       /* records written to a CQ's ring buffer (nic_cq_rings) */
	NIC_CNT_CQ_OVERRUN,      /* records lost: the CQ's ring was full, or its index has no ring */
	NIC_CNT_FAIL_KICKS,      /* NIC_KICK_FAIL runs that moved a QP to ERR */
	/* Forged or stray packets (docs/nic-program.md, "Packets from the network") */
	NIC_CNT_DROP_BAD_PORT,    /* UDP source port 0: EV 0 is invalid, no MRC peer sends it */
	NIC_CNT_DROP_DATA_RANGE,  /* data PSN at or beyond cum_psn + NIC_BITMAP_BITS: past any window */
	NIC_CNT_DROP_NACK_STALE,  /* fatal NACK of a PSN not outstanding (behind snd_una or acked) */
	NIC_CNT_DROP_AUTH,        /* the QP takes only MAC'd packets, and this one's MAC is wrong */
	/* The reverse EV set (receiver role; docs/nic-program.md, "Reverse EVs") */
	NIC_CNT_ANSWER_REROUTED, /* answers sent out of another port than their packet came in on */
	NIC_CNT_REV_PROBE_REPLY, /* PROBE_REPLYs for a reverse EV recorded (also PROBE_REPLY_CONSUMED) */
	/* Endpoint probes (MRC_EP_QPN; docs/nic-program.md, "Endpoint probes") */
	NIC_CNT_EP_PROBE,       /* PROBEs to the endpoint QPN answered (also PROBE_REPLY) */
	NIC_CNT_EP_PROBE_REPLY, /* their PROBE_REPLYs recorded in nic_ep_probes (also PROBE_REPLY_CONSUMED) */
	NIC_CNT_PORT_STATUS_UPDATE, /* port status updates from peers recorded in nic_peer_ports and answered (also PROBE_REPLY) */
	/* Port admin state (docs/nic-program.md, "Ports") */
	NIC_CNT_DROP_PORT_DISABLED, /* MRC packet that came in on an administratively DISABLED port */
	/* Blame (docs/nic-program.md, "Blame") */
	NIC_CNT_LOST_SUSPECT,    /* overdue PSNs (head scan, reorder kick) whose EV was only suspected */
	NIC_CNT_SUSPECT_CLEARED, /* suspected EVs cleared: the overdue packet, or an earlier one, came */
	NIC_CNT_SUSPECT_BLAMED,  /* suspected EVs blamed: a later packet came first, or silent_ns passed */
	/* ACK coalescing (docs/nic-program.md, "ACK coalescing") */
	NIC_CNT_ACK_HELD,   /* data placed and not answered yet (a later SACK covers it) */
	NIC_CNT_ACK_FANOUT, /* SACKs of several PSNs broadcast as kicks through the doorbell (nic_fanout) */
	/* Isolation (docs/api.md, "Isolation") */
	NIC_CNT_DROP_NOT_KICK, /* a frame through a doorbell (port or program) that is no kick */
	NIC_CNT_MAX,
};

#endif /* MRC_NIC_CONSTS_H */
