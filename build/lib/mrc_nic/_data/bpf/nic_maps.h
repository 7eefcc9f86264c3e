/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_maps.h: what the NIC programs (nic_xdp.c, with its send engine; nic_tx.c
 * later) share with each other and with user space (mrc_nic/nic.py).
 * One source of truth:
 * Python keeps a ctypes copy of each struct and a test compares it, field by
 * field, with the layout bcc compiled from this file, and checks the
 * constants below.
 *
 * All maps are lab-wide (the program is compiled once per lab and attached to
 * every host port) and keyed by things that are unique in a lab: QP numbers
 * (host << 16 | index), region ids, host ids. See docs/fastpath.md.
 *
 * Layouts: natural alignment, every hole filled by an explicit reserved field,
 * sizes and the offsets that matter pinned with _Static_assert. (They are not
 * packed, unlike switch_port.h: struct nic_rq holds a bpf_spin_lock and u64
 * arrays indexed at run time, and the verifier and clang both want them
 * naturally aligned.) Grow a struct only by adding fields at its end.
 */
#ifndef MRC_NIC_MAPS_H
#define MRC_NIC_MAPS_H

#include <linux/types.h>

#include "mrc_wire.h"

/* ---- Tunables (override with -DNAME=value; the loader does) ------------- */

/* Slots of the receive-QP array nic_rx_qps (QP q lives in slot
 * q & (NIC_MAX_QPS - 1)), and entries of the send-QP hash map nic_tx_qps.
 * A power of two. */
#ifndef NIC_MAX_QPS
#define NIC_MAX_QPS 4096
#endif
_Static_assert(NIC_MAX_QPS > 0 && (NIC_MAX_QPS & (NIC_MAX_QPS - 1)) == 0,
	       "NIC_MAX_QPS must be a power of two");

/* Memory: elements of NIC_MR_ELEM_SIZE bytes in the one mmapable array that
 * holds every region of the lab (default 64 MiB). */
#ifndef NIC_MR_ELEMS
#define NIC_MR_ELEMS 65536
#endif

/* Entries of the region table nic_regions (region ids 0 .. NIC_MAX_REGIONS-1). */
#ifndef NIC_MAX_REGIONS
#define NIC_MAX_REGIONS 256
#endif

/* Host ids 0 .. NIC_MAX_HOSTS-1 (entries of nic_port_up). The topology allows
 * 253 hosts: host h is .h+1 in its plane's /24. */
#ifndef NIC_MAX_HOSTS
#define NIC_MAX_HOSTS 256
#endif

/* Planes (the third octet of a host address, relative to NIC_HOST_NET). */
#ifndef NIC_MAX_PLANES
#define NIC_MAX_PLANES 16
#endif

/* The lab's host network, host order: plane p is its p-th /24 and host h is
 * .h+1 in it (mrc_nic/topology.py). 198.18.0.0 by default. */
#ifndef NIC_HOST_NET
#define NIC_HOST_NET 0xC6120000U
#endif

/* Size of the event ring buffer nic_events, in pages (a power of 2). */
#ifndef NIC_EVENT_PAGES
#define NIC_EVENT_PAGES 64
#endif

/* Entries of the per-EV state map nic_evs (all QPs of the lab together). */
#ifndef NIC_MAX_EVS
#define NIC_MAX_EVS 16384
#endif

/* Entries of nic_tx_ring: one PSN -> EV table per send QP (struct nic_sq.ring). */
#ifndef NIC_TX_RINGS
#define NIC_TX_RINGS 256
#endif

/*
 * How long an EV stays in SKIP after an ECN-marked SACK or a NACK(TRIMMED), in
 * ns. A CE mark or a trim says that a queue on this EV's path was above its
 * threshold when the packet passed; the sender's reaction reaches that queue
 * one RTT later. Skipping the EV for about two RTTs lets the queue drain and
 * lets the next packet on the EV meet the queue after the reduced load: any
 * shorter and the EV is used again before the congestion can have gone; any
 * longer and a healthy path sits idle (MRC's SKIP is short-lived, unlike
 * ASSUMED_BAD). The lab's RTT through T0-T1-T0 is 26-69 us (DESIGN.md section 3),
 * hence 100 us. A fabric with hardware RTTs (5-10 us) wants about 20 us.
 */
#ifndef NIC_SKIP_NS
#define NIC_SKIP_NS 100000
#endif

/* Most PSNs one SACK may declare lost (the loss walk, see "Loss detection").
 * The rest are the daemon's timeout's. */
#ifndef NIC_LOSS_WALK_MAX
#define NIC_LOSS_WALK_MAX 16
#endif

/* ---- Layout constants (NOT tunable: user space mirrors them) ------------ */

/* Region element: the path MTU RoCE uses on 1500-byte Ethernet, and the unit
 * of placement. A packet's payload starts at an element boundary, the
 * element at (RETH.va - region base_va) / NIC_MR_ELEM_SIZE, and fills up to
 * NIC_SEG_ELEMS_MAX consecutive elements. */
#define NIC_MR_ELEM_SIZE 1024

/*
 * The payload of a full data packet (RoCE's path MTU): the largest multiple
 * of NIC_MR_ELEM_SIZE that fits the lab's IP MTU (MRC_PAYLOAD_MAX(MRC_MTU)),
 * at most NIC_SEG_ELEMS_MAX elements: 1024 bytes on a 1500-byte MTU, 2048
 * from 2128, 3072 from 3152. Why 3 at most: veth runs an XDP program that is
 * not frags-aware only up to an MTU of about 3500 (one page less XDP headroom
 * and skb_shared_info), so RoCE's 4096 does not fit. The engine segments
 * WRITEs in NIC_SEG_SIZE; the receiver takes any payload up to it.
 */
#define NIC_SEG_ELEMS_MAX 3
#define NIC_SEG_ELEMS_FIT (MRC_PAYLOAD_MAX(MRC_MTU) / NIC_MR_ELEM_SIZE)
#define NIC_SEG_ELEMS (NIC_SEG_ELEMS_FIT < NIC_SEG_ELEMS_MAX ? NIC_SEG_ELEMS_FIT : NIC_SEG_ELEMS_MAX)
#define NIC_SEG_SIZE (NIC_SEG_ELEMS * NIC_MR_ELEM_SIZE)
_Static_assert(NIC_SEG_ELEMS >= 1, "MRC_MTU too small for a 1024-byte payload");

/* Largest MPR a receive QP may have (units of MRC_MPR_UNIT = 128 PSNs). The
 * receive bitmap is a ring of NIC_BITMAP_BITS bits: PSN p lives at bit
 * p % NIC_BITMAP_BITS, a power of two that divides 2^24, so the ring position
 * of a PSN does not jump when the 24-bit PSN wraps. */
#define NIC_MPR_MAX 8
#define NIC_BITMAP_BITS (NIC_MPR_MAX * MRC_MPR_UNIT) /* 1024 */
#define NIC_BITMAP_WORDS (NIC_BITMAP_BITS / 64)      /* 16 */

/* Messages whose LAST packet has arrived but that are not complete yet, per
 * receive QP (the OCP API's max_wimm_dest plays this role; here plain WRITEs
 * count too, since they move AETH.msn). A LAST packet of MSN m is accepted
 * when 0 <= m - msn < NIC_MSG_SLOTS; beyond that it is NACKed NO_RESOURCE.
 * A power of two. */
#define NIC_MSG_SLOTS 32

/* EVs in one send QP's EV profile (struct nic_sq.evs): the OCP API's ev_count;
 * MRC uses 128-256 per QP. */
#define NIC_MAX_QP_EVS 256

/* Entries of a send QP's retransmit queue (struct nic_sq.retxq). A power of
 * two. A PSN is in the queue at most once at a time (its retx bit), so a full
 * queue means more than this many PSNs of one window lost at once; the
 * overflow is counted and left to the daemon's timeout. */
#define NIC_RETX_SLOTS 256

_Static_assert((NIC_BITMAP_BITS & (NIC_BITMAP_BITS - 1)) == 0 && NIC_BITMAP_BITS >= 64,
	       "NIC_BITMAP_BITS must be a power of two >= 64");
_Static_assert((NIC_MSG_SLOTS & (NIC_MSG_SLOTS - 1)) == 0, "NIC_MSG_SLOTS must be a power of two");
_Static_assert((NIC_RETX_SLOTS & (NIC_RETX_SLOTS - 1)) == 0, "NIC_RETX_SLOTS must be a power of two");
_Static_assert(NIC_LOSS_WALK_MAX >= 1 && NIC_LOSS_WALK_MAX <= 64, "NIC_LOSS_WALK_MAX out of range");

/* ---- QP states ---------------------------------------------------------- */

/* The values of verbs' enum ibv_qp_state. Only RTR and RTS accept data (and
 * PROBEs); only RTS and SQD accept SACKs, NACKs and PROBE_REPLYs. */
enum nic_qp_state {
	NIC_QPS_RESET = 0,
	NIC_QPS_INIT = 1,
	NIC_QPS_RTR = 2,
	NIC_QPS_RTS = 3,
	NIC_QPS_SQD = 4,
	NIC_QPS_SQE = 5,
	NIC_QPS_ERR = 6,
};

/* ---- Receive QP state: map nic_rx_qps (array, slot = QPN & (NIC_MAX_QPS-1)) */

/*
 * Why an array and not a hash keyed by QPN: the receiver looks its QP up for
 * every data packet, and a hash lookup (jhash, bucket walk, and a call that
 * this CPU's return-thunk mitigation makes expensive) cost about 19 ns of a
 * receiver's 95-170 ns (scripts/bench_fastpath.py, part 1); an array lookup
 * is inlined to a bounds check and an add. The QPN picks the slot, so QPs
 * whose numbers agree in their low bits cannot both have receive state:
 * user space refuses the second (mrc_nic.nic.NicMaps.setup_rq), and the
 * daemons take QP numbers from per-host ranges that never share a slot
 * (mrc_nic.hostmem).
 *
 * Map nic_rx_slots (array of __u32, NIC_MAX_QPS entries, written by user
 * space only) says whose each slot is: QPN | NIC_RQ_TAG_USED, or 0 for a
 * free slot. A packet whose QPN is not its slot's owner is dropped as for an
 * unknown QP. User space fills a slot of nic_rx_qps before it writes its
 * owner, and clears the owner before the slot (also when it sets a live QP
 * up again), so a packet that arrives after a write finds the value whole;
 * and a reader lists the receive QPs by reading these 4 bytes per slot, not
 * the slots themselves. A packet already past the owner check when the
 * owner changes is dropped if the change came before it took the receive
 * lock (the owner is read again under it), but its payload copy, made
 * before the lock, may already have landed. So a slot and its region are
 * reused safely only once the old QP's packets have stopped, which is what
 * the daemons do (a QP is closed after its transfer) and what the old hash
 * map's recycled elements needed as well.
 */
#define NIC_RQ_TAG_USED 0x80000000u /* an owner in nic_rx_slots: QPN | this */

/* A message whose LAST packet has arrived, waiting for cum_psn to pass it. */
struct nic_msg_slot {
	__u64 va;       /* message base address: RETH.va - MRC_DATA.msg_off */
	__u32 last_psn; /* PSN of its LAST packet */
	__u32 len;      /* message bytes: msg_off + dmalen of the LAST packet */
	__u32 imm;      /* ImmDt, host order (WRITE_WITH_IMM only) */
	__u32 flags;    /* NIC_MSG_F_* */
};
_Static_assert(sizeof(struct nic_msg_slot) == 24, "struct nic_msg_slot layout changed");

#define NIC_MSG_F_VALID 0x1 /* the slot holds a message */
#define NIC_MSG_F_IMM 0x2   /* WRITE_WITH_IMM: raise a completion event */

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

/*
 * Map nic_rx_timeline (per-CPU array, NIC_TIMELINE_BINS entries): payload
 * bytes placed by every receive QP of the lab, in bins of 2^NIC_TIMELINE_SHIFT
 * ns of bpf_ktime_get_ns (1.05 ms). Bin b lives in slot b % NIC_TIMELINE_BINS
 * and is restarted when a later bin takes the slot, so the map holds the last
 * NIC_TIMELINE_BINS bins (8.6 s); a reader sums the CPUs' copies whose bin
 * matches. For goodput-over-time plots; the exact gaps are in nic_rq_stats.
 */
#ifndef NIC_TIMELINE_SHIFT
#define NIC_TIMELINE_SHIFT 20
#endif
#ifndef NIC_TIMELINE_BINS
#define NIC_TIMELINE_BINS 8192
#endif
struct nic_timeline_bin {
	__u64 bin;   /* ktime >> NIC_TIMELINE_SHIFT */
	__u64 bytes; /* payload bytes placed in it, on this CPU */
};
_Static_assert(sizeof(struct nic_timeline_bin) == 16, "struct nic_timeline_bin layout changed");

/*
 * The delivery gaps of a receive QP, by when they ended (mrc-nic extension):
 * every gap of at least NIC_GAP_MIN_NS between two placements of new payload
 * goes to the bin of its end, 2^NIC_GAP_BIN_SHIFT ns of bpf_ktime_get_ns
 * (67 ms), which keeps the longest one that ended in it. Bin b lives in slot
 * b % NIC_GAP_BINS and is restarted when a later bin takes it, so the QP holds
 * the last NIC_GAP_BINS bins (4.3 s); a reader keeps the slots whose end_ns
 * falls in the time it asks about. Why: max_gap_ns is the whole run's longest
 * gap; a failover benchmark needs the longest gap that a fault caused, at a
 * known time, apart from the scheduling stalls of a shared machine before it.
 * Gaps shorter than NIC_GAP_MIN_NS are not logged: the per-packet cost stays
 * one compare.
 */
#ifndef NIC_GAP_MIN_NS
#define NIC_GAP_MIN_NS 100000
#endif
#define NIC_GAP_BIN_SHIFT 26
#define NIC_GAP_BINS 64
_Static_assert((NIC_GAP_BINS & (NIC_GAP_BINS - 1)) == 0, "NIC_GAP_BINS must be a power of two");
struct nic_gap_bin {
	__u64 end_ns; /* when the longest gap of this bin ended (0: never used) */
	__u64 gap_ns; /* its length */
};
_Static_assert(sizeof(struct nic_gap_bin) == 16, "struct nic_gap_bin layout changed");

/*
 * The receiving side of one QP. User space writes the whole value when it
 * sets the QP up (the "setup" fields and the initial cum_psn and msn; the
 * rest zero) and reads it back with BPF_F_LOCK. Afterwards BPF owns
 * everything below "BPF-owned", under the QP's receive lock: its word in
 * nic_rx_locks (below), not the bpf_spin_lock of the value, which only user
 * space's BPF_F_LOCK copies take. So a copy user space reads while packets
 * arrive may mix fields of two packets (counters one apart); once traffic
 * stops it is exact.
 *
 * Bitmap invariant: bit (p % NIC_BITMAP_BITS) is set only for PSNs p in
 * [cum_psn, cum_psn + window) that have arrived; every other bit is zero
 * (bits are cleared as cum_psn passes them), so the ring can be reused.
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
	__u32 reserved;
	__u64 bitmap[NIC_BITMAP_WORDS]; /* ring of received PSNs, see above */
	struct nic_rq_stats stats;
	struct nic_msg_slot msgs[NIC_MSG_SLOTS]; /* message MSN m in msgs[m % NIC_MSG_SLOTS] */
	struct nic_gap_bin gaps[NIC_GAP_BINS];   /* long delivery gaps, by end (above) */
};
_Static_assert(__builtin_offsetof(struct nic_rq, cum_psn) == 28, "struct nic_rq layout changed");
_Static_assert(__builtin_offsetof(struct nic_rq, bitmap) == 40, "struct nic_rq layout changed");
_Static_assert(sizeof(struct nic_rq) == 40 + 8 * NIC_BITMAP_WORDS + sizeof(struct nic_rq_stats) +
					     NIC_MSG_SLOTS * sizeof(struct nic_msg_slot) +
					     NIC_GAP_BINS * sizeof(struct nic_gap_bin),
	       "struct nic_rq has hidden padding");

/*
 * Map nic_rx_locks (array of struct nic_rx_lock, NIC_RX_LOCKS entries): the
 * receive lock of QP q is entry q % NIC_RX_LOCKS; QPs that share an entry
 * share the lock, which costs only waiting. A spin lock made of BPF atomics
 * (cmpxchg to take, xchg to release), not bpf_spin_lock: that helper pair
 * saves and restores interrupts and costs about 44 ns a packet on this
 * machine's kernel (two calls with its return-thunk mitigation), a fifth of
 * the receiver's whole cost (scripts/bench_fastpath.py, part 1); this lock
 * costs two atomic instructions. Nothing the receiver does runs in hard
 * interrupt context, so interrupts need no masking. A taker tries
 * NIC_RX_LOCK_TRIES times and then drops the packet (NIC_CNT_DROP_RX_BUSY;
 * the sender resends it): the holder's section is about 30 ns, so only a
 * holder held up by an interrupt or by its vCPU losing the host CPU makes
 * that happen, and no path can wait for ever. Measured: none in a 1 GiB
 * write on the default lab; 33-53 per 98k data packets (0.03-0.05%) in a
 * permutation on clos-8 at 10 Mbit/s with both CPUs saturated. More tries
 * would be better, but the verifier walks the spin loop try by try (rx_data takes
 * the lock in one place for that reason): 2048 exceed its budget of 1M
 * instructions. The lock words are 64 bytes apart: never on one cache
 * line, whatever the array's alignment.
 */
#define NIC_RX_LOCKS 256
#define NIC_RX_LOCK_TRIES 1024
struct nic_rx_lock {
	__u64 word; /* 0: free, 1: taken */
	__u64 pad[7]; /* keeps neighbours' words apart */
};
_Static_assert(sizeof(struct nic_rx_lock) == 64, "struct nic_rx_lock is 64 bytes");

/* ---- Send QP state: map nic_tx_qps (hash, key = __u32 QPN) ------------- */

/*
 * The sending side of one QP: the QP that SACKs, NACKs and PROBE_REPLYs
 * address (their BTH dest QP). A QP that both sends and receives has an entry
 * here under its QPN and one in nic_rx_qps, in slot QPN & (NIC_MAX_QPS - 1).
 *
 * Window: PSNs in [snd_una, snd_nxt) are in flight, and snd_nxt - snd_una <=
 * mpr * MRC_MPR_UNIT. The ring bitmaps are indexed like the receiver's, PSN p
 * at bit p % NIC_BITMAP_BITS; a bit may be set only for p in [snd_una,
 * snd_nxt), and every bit is cleared when snd_una passes it.
 *   acked:  p has been acknowledged (cumulative PSN, SACK bitmap, or a SACK's
 *           BTH.psn). snd_una moves over every acknowledged run.
 *   echoed: the SACK/NACK that p itself triggered (BTH.psn = p) has been
 *           taken as feedback for its EV (RTT, ECN, trim, loss walk). A second
 *           one for the same transmission is a duplicate: its acknowledgements
 *           still count, its feedback is ignored.
 *   retx:   p is queued for retransmission (retxq) and not resent yet.
 *
 * Acknowledgement rules (nic_xdp.c, rx_ack), after the QP, address and state
 * checks: an ACK whose BTH.psn or cumulative PSN lies at or beyond snd_nxt
 * acknowledges PSNs never sent: dropped (NIC_CNT_DROP_ACK_RANGE), no state
 * change. BTH.psn before snd_una: stale (stats.stale_acks), its cumulative PSN
 * and bitmap are still applied (harmless if old). Every processed or stale
 * ACK is consumed: XDP_DROP, since nothing in the stack wants it.
 *
 * The send engine (nic_xdp.c, engine_run) owns snd_nxt and the consumer side
 * of retxq, and follows this protocol, under the lock:
 *   - a new PSN: psn = snd_nxt, only if snd_nxt - snd_una < window and the
 *     packets in flight (snd_nxt - snd_una - acknowledged ones) < cwnd; then
 *     snd_nxt = psn + 1 (24 bits);
 *   - a retransmission: pop retxq[retx_head % NIC_RETX_SLOTS] (retx_head++);
 *     skip it if its PSN is no longer in [snd_una, snd_nxt) or is acked;
 *     else clear its retx and echoed bits and resend it on an EV other than
 *     the entry's ev (the next usable EV in the profile's round robin; the
 *     same one only when it is the only usable EV);
 *   - for every transmission, outside the lock: the ring entry
 *     (struct nic_tx_pkt) and the EV's last_tx_psn/tx counters (struct
 *     nic_ev, under the EV's lock), before the packet leaves.
 *
 * The send engine. A QP with engine = 1 is served by it: user space posts
 * work requests (struct nic_wqe) in the QP's send queue (map nic_wq, entry
 * ring, mmapable) and kicks the engine (a kick run, see struct nic_kick);
 * every SACK or NACK for the QP then also runs the engine, which turns that
 * frame into the next packet (the ACK clock). One engine run sends at most
 * one packet: a queued retransmission first, else the next segment of the
 * oldest WQE not fully sent: NIC_MR_ELEM_SIZE bytes of payload (the last
 * segment shorter), read from the WQE's source region. A WQE completes (a
 * NIC_EV_SEND_DONE event) when snd_una passes its last PSN; completions are
 * checked at every engine run. With engine = 0 (the default), ACKs are only
 * consumed, and snd_nxt and the table are the business of whoever sends.
 *
 * Send queue protocol: WQE i lives in wqes[i % NIC_MSG_SLOTS] of the QP's
 * struct nic_wq. User space writes the whole WQE, then posted = i + 1; it
 * may reuse a slot only once wqe_done has passed it (posted - wqe_done <=
 * NIC_MSG_SLOTS). The depth is NIC_MSG_SLOTS because that is how many
 * messages the receiver holds incomplete: with fewer WQEs outstanding here,
 * no LAST packet ever meets a NACK(NO_RESOURCE) there. The engine assigns
 * each WQE the next MSN (snd_msn), in posting order.
 */

/* One entry of the retransmit queue. */
struct nic_retx {
	__u32 psn;        /* the PSN to resend */
	__u16 ev;         /* the EV it was lost or trimmed on: resend on another one */
	__u8 cause;       /* enum nic_retx_cause */
	__u8 nack_reason; /* NIC_RETX_NACK: the MRC_NACK_* reason; else 0 */
};
_Static_assert(sizeof(struct nic_retx) == 8, "struct nic_retx layout changed");

enum nic_retx_cause {
	NIC_RETX_NACK = 1, /* a retryable NACK asked for it (trimmed, window, resources) */
	NIC_RETX_LOST = 2, /* declared lost from a SACK hole (loss walk) */
	NIC_RETX_TIMEOUT = 3, /* no acknowledgement within the QP's timeout (a timeout kick) */
};

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

/*
 * Congestion signals of a send QP (mrc-nic extension): what congestion
 * control (NSCC, mrc_nic/nscc.py, run by the daemon) reads, as differences
 * between two reads. Written by rx_ack under the QP's lock, once per
 * transmission's feedback (an ACK whose echoed PSN's feedback is taken: not
 * stale, not a duplicate), so they count what NSCC counts per ACK in UET.
 *
 * A SACK's RTT is now - its echoed tx_ts. rtt_target_ns (set by a
 * NIC_KICK_CWND kick, with the window) splits the SACKs as NSCC's four cases
 * do: an RTT at or above it is "high delay" (base RTT + target delay). The
 * PSNs each SACK newly acknowledged go to one of the four pkts_* counters:
 *   no ECN, RTT < target   pkts_lo      (proportional increase; headroom
 *                                        adds PSNs x (target - RTT))
 *   no ECN, RTT >= target  pkts_hi      (fair increase)
 *   ECN,    RTT < target   pkts_ecn_lo  (nothing: a hot path, which SKIP avoids)
 *   ECN,    RTT >= target  pkts_ecn_hi  (multiplicative decrease)
 * A SACK without an RTT sample (tx_ts 0 or in the future) counts as low
 * delay with no headroom. rtt_target_ns = 0 makes every sample high.
 * NACK(TRIMMED) and NACK(TRIMMED_LASTHOP) count in trims and trims_lasthop.
 */
struct nic_sq_cc {
	__u64 rtt_target_ns; /* setup (NIC_KICK_CWND): the high-delay threshold of an RTT */
	__u64 acks;          /* SACKs taken as feedback */
	__u64 ecn_acks;      /* of which with MRC_ACK_F_ECN */
	__u64 pkts_lo;       /* PSNs newly acknowledged, by case (above) */
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
	__u32 reo_wnd_ns; /* setup: the reorder window of the head scan (see "Loss
			   * detection"), ns; 0 turns the scan off (mrc-nic extension) */
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
	__u32 rtt_recent_ns; /* the head scan's largest recent RTT (see "Loss detection") */
	__u32 wqe_last_psn[NIC_MSG_SLOTS]; /* WQE i in [wqe_done, wqe_sent): its last PSN, at
					    * i % NIC_MSG_SLOTS */
	struct nic_sq_tx_stats tx_stats;
	/* ---- congestion control (BPF-owned, under the lock; user space sets
	 * cwnd and cc.rtt_target_ns with a NIC_KICK_CWND kick once packets flow) ---- */
	struct nic_sq_cc cc;
};
_Static_assert(__builtin_offsetof(struct nic_sq, snd_una) == 36, "struct nic_sq layout changed");
_Static_assert(__builtin_offsetof(struct nic_sq, acked) == 64, "struct nic_sq layout changed");
_Static_assert(__builtin_offsetof(struct nic_sq, engine) ==
		       64 + 3 * 8 * NIC_BITMAP_WORDS + sizeof(struct nic_sq_stats) +
			       NIC_RETX_SLOTS * sizeof(struct nic_retx) + 2 * NIC_MAX_QP_EVS,
	       "struct nic_sq has hidden padding");
_Static_assert(sizeof(struct nic_sq) == __builtin_offsetof(struct nic_sq, engine) + 32 +
					     4 * NIC_MSG_SLOTS + sizeof(struct nic_sq_tx_stats) +
					     sizeof(struct nic_sq_cc),
	       "struct nic_sq has hidden padding");

/* ---- Per-EV state: map nic_evs (hash, key = struct nic_ev_key) ---------- */

/*
 * Keyed by (QPN, EV value), not by the EV's index in the profile: the echoed
 * EV of a SACK (MRC_ACK.echo_ev) or PROBE_REPLY (MRC_PROBE.ev) finds its
 * entry in one lookup, with no translation table to keep in step when the
 * daemon replaces an EV (OCP: MRC_CTL_EV_OP_REPLACE_EV = a new key). The
 * order the engine walks the EVs in is the profile, struct nic_sq.evs.
 */
struct nic_ev_key {
	__u32 qpn; /* the send QP */
	__u32 ev;  /* the EV value (UDP source port), 1 .. MRC_EV_MAX */
};
_Static_assert(sizeof(struct nic_ev_key) == 8, "struct nic_ev_key layout changed");

/*
 * EV states: the OCP API's enum mrc_ctl_ev_state values (mrc_ctl.h, API
 * v1.0.1), plus SKIP, an mrc-nic extension for the papers' short-lived SKIP
 * (the API has no such state). Who moves an EV where:
 *   GOOD/SKIP  -> SKIP         BPF: ECN flag in a SACK, NACK or PROBE_REPLY,
 *                              NACK(TRIMMED);
 *                              skip_until = now + NIC_SKIP_NS (extended if SKIP)
 *   SKIP       -> GOOD         BPF, lazily: the next SACK/NACK/PROBE_REPLY for
 *                              the EV after skip_until (the engine treats a
 *                              SKIP whose skip_until has passed as GOOD); no event
 *   any but DENIED -> ASSUMED_BAD  BPF: a PSN sent on it declared lost (event)
 *   ASSUMED_BAD -> GOOD        BPF: a PROBE_REPLY for it (event); whether and
 *                              when to probe, and ev_min_active, are the daemon's
 *   any <-> DENIED, UNKNOWN    user space only (the controller)
 * NACK(TRIMMED_LASTHOP) does not SKIP: incast at the receiver is on every EV
 * (docs/wire-format.md, NACK reasons).
 */
#define NIC_EVS_GOOD 0x1U         /* MRC_CTL_EV_GOOD */
#define NIC_EVS_ASSUMED_BAD 0x2U  /* MRC_CTL_EV_ASSUMED_BAD */
#define NIC_EVS_DENIED 0x4U       /* MRC_CTL_EV_DENIED */
#define NIC_EVS_SKIP 0x10000U     /* mrc-nic extension: skipped until skip_until */
#define NIC_EVS_UNKNOWN 0x80000000U /* MRC_CTL_EV_UNKNOWN */

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

/*
 * One EV of one send QP. User space writes the whole value at setup (plane,
 * state; the rest zero) and may change state (DENIED, UNKNOWN, GOOD) with
 * BPF_F_LOCK; BPF changes state and skip_until as above. RTT samples are
 * bpf_ktime_get_ns() - the echoed tx_ts, in ns, from SACKs and PROBE_REPLYs
 * (not NACKs: a trimmed header overtakes queued data at high priority, so
 * its delay is not the path's); a tx_ts of 0 or in the future gives none.
 * rtt_min is the smallest sample, srtt = 7/8 srtt + 1/8 sample (the first
 * sample sets it).
 */
struct nic_ev {
	struct bpf_spin_lock lock;
	/* setup */
	__u32 plane; /* the plane (host port) packets on this EV leave from */
	/* shared: user space and BPF */
	__u32 state; /* NIC_EVS_* */
	__u32 reserved;
	__u64 skip_until; /* SKIP: bpf_ktime_get_ns() at which it ends */
	/* BPF-owned */
	__u64 rtt_last; /* ns; 0: no sample yet */
	__u64 rtt_min;
	__u64 srtt;
	/* send engine */
	__u32 last_tx_psn; /* PSN of the last packet sent on this EV (if stats.tx_pkts) */
	__u32 last_tx_cpu; /* the CPU that sent it (the engine's; record_tx leaves 0) */
	__u64 last_tx_ts;  /* its tx_ts */
	struct nic_ev_stats stats;
};
_Static_assert(__builtin_offsetof(struct nic_ev, skip_until) == 16, "struct nic_ev layout changed");
_Static_assert(sizeof(struct nic_ev) == 64 + sizeof(struct nic_ev_stats),
	       "struct nic_ev has hidden padding");

/* ---- PSN -> EV table: map nic_tx_ring (mmapable array, key = ring) ------- */

/*
 * What the send engine records for every transmission, at entry
 * psn % NIC_BITMAP_BITS of its QP's ring, before the packet leaves: which EV
 * the PSN went on, when, and which PSN went on the same EV just before it.
 * BPF reads it to detect losses; user space writes it through mmap (as the
 * engine will; tests do) or reads it.
 *
 * Loss detection (rx_ack, "the loss walk"): packets sent on one EV follow one
 * path (the EV is the ECMP hash input and picks the plane), and a path does
 * not reorder. So when the SACK of PSN q, sent on EV e, arrives, every
 * packet sent on e before q has arrived or is lost. From q's entry (it must be
 * the transmission the SACK echoes: same PSN, EV and tx_ts), the walk follows
 * prev_psn back, and each PSN that is in the window, was still sent on e,
 * earlier, and is neither acknowledged nor already queued is declared lost:
 * queued for retransmission and reported, and e becomes ASSUMED_BAD. It stops
 * at the first acknowledged or queued PSN (the walk of an earlier SACK on e
 * has been there), or after NIC_LOSS_WALK_MAX losses.
 * Why per EV and not "N PSNs below the highest SACKed PSN" (TCP's dupthresh):
 * with per-packet spraying, consecutive PSNs take different paths with
 * different queues, so PSN order says nothing about loss; a PSN threshold
 * would declare losses (and blame EVs) on every queueing difference. Order
 * is only kept per EV, so that is where holes mean loss (as RACK reasons per
 * connection, per EV here). Not caught by the walk: losses on an EV from
 * which no later packet is acknowledged (a blackholed path), and packets
 * before a trimmed one (a trimmed header overtakes at high priority, so trim
 * NACKs start no walk).
 *
 * The head scan (rx_ack, when struct nic_sq.reo_wnd_ns is set) catches those
 * in BPF, without waiting for the daemon's timeout: RACK's rule with time
 * instead of PSN order. When a SACK echoes a transmission sent at T, every
 * PSN of the window that is neither acknowledged nor queued and whose latest
 * transmission left before T - W is lost: a packet sent that much later has
 * already made the round trip. Each SACK looks at NIC_HEAD_SCAN PSNs from
 * snd_una on and, when they are all examined, at NIC_HEAD_SCAN more from
 * where the last scan stopped (struct nic_sq.scan_psn): a window's losses are
 * found in a few SACKs. That matters when a whole path dies: with a small
 * cwnd, its undetected losses soon hold all of it and the ACK clock stops;
 * then only the daemon's reorder timer and timeout are left (docs/daemon.md).
 * W, the reorder window, is reo_wnd_ns or the QP's largest recent round
 * trip (rtt_recent_ns), whichever is longer: the tolerance for queueing
 * differences between paths (and for scheduling delays on this machine),
 * which grow with the queues. rtt_recent_ns takes every SACK's RTT sample
 * that is larger (at most NIC_RTT_RECENT_CAP x reo_wnd_ns), and moves
 * 1/2^NIC_RTT_RECENT_SHIFT of the way down to each smaller one (64 samples: under 1 ms at full rate on the default lab, tens
 * of ms on a lab slowed to a few Mbit/s). With only this SACK's round trip, a
 * SACK that came back through an empty queue condemned packets still waiting
 * in a full one: on clos-8 at 5 Mbit/s, 600-900 needless resends per
 * permutation (docs/congestion.md). A path whose queue holds packets longer
 * than W is still blamed wrongly, and the daemon's probes give its EV back. The EV each lost PSN went on becomes
 * ASSUMED_BAD (a silent loss). First transmissions leave in PSN order, so the
 * scan stops at the first one sent too recently; retransmissions are skipped.
 * The daemon's timeout remains the backstop (no SACK at all comes back).
 */
#ifndef NIC_HEAD_SCAN
#define NIC_HEAD_SCAN 8
#endif
#define NIC_RTT_RECENT_SHIFT 6 /* rtt_recent_ns forgets a peak over about 64 samples */
#define NIC_RTT_RECENT_CAP 4   /* a sample counts for at most 4 reorder windows */
_Static_assert((NIC_HEAD_SCAN & (NIC_HEAD_SCAN - 1)) == 0, "NIC_HEAD_SCAN must be a power of two");
#define NIC_HEAD_LOST (2 * NIC_HEAD_SCAN) /* losses one head scan can find: two passes */
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

#define NIC_TX_F_PREV 0x1 /* prev_psn is valid: an earlier packet went on this EV */
#define NIC_TX_F_RETX 0x2 /* this transmission is a retransmission */

struct nic_tx_ring {
	struct nic_tx_pkt pkts[NIC_BITMAP_BITS];
};

/* ---- Memory regions ----------------------------------------------------- */

/* One element of map nic_mr (BPF_F_MMAPABLE array, NIC_MR_ELEMS entries).
 * User space mmaps the map to post source data and read what arrived. */
struct nic_mr_elem {
	__u8 bytes[NIC_MR_ELEM_SIZE];
};
_Static_assert(sizeof(struct nic_mr_elem) == NIC_MR_ELEM_SIZE, "struct nic_mr_elem layout changed");

/* One region: a slice of nic_mr. Map nic_regions (array, NIC_MAX_REGIONS
 * entries), written by user space. n_elems == 0: no region. A data packet
 * is placed when rkey matches, va - base_va is a multiple of
 * NIC_MR_ELEM_SIZE (else dropped) and inside the region (else fatal NACK,
 * remote access error). */
struct nic_region {
	__u64 base_va;    /* RETH.va of the region's first byte */
	__u32 first_elem; /* its first element in nic_mr */
	__u32 n_elems;    /* its size in elements */
	__u32 rkey;       /* the remote key data packets must carry */
	__u32 reserved;
};
_Static_assert(sizeof(struct nic_region) == 24, "struct nic_region layout changed");

/* ---- Send queues: map nic_wq (mmapable array, key = struct nic_sq.ring) -- */

/* One work request: an RDMA WRITE or WRITE_WITH_IMM of len bytes from the
 * local region src_region (at byte src_off) to the peer's remote_va/rkey.
 * Sources and destinations start on a NIC_MR_ELEM_SIZE boundary (v1). */
struct nic_wqe {
	__u64 wr_id;      /* user space's id, returned in the completion */
	__u64 remote_va;  /* RETH.va of the message's first byte */
	__u32 rkey;       /* the peer region's remote key */
	__u32 len;        /* message bytes; 0: one packet without payload */
	__u32 src_region; /* index in nic_regions of the memory the payload is read from */
	__u32 src_off;    /* byte offset of the message in it: a multiple of NIC_MR_ELEM_SIZE */
	__u32 imm;        /* immediate data, host order (opcode MRC_OP_WRITE_IMM) */
	__u8 opcode;      /* MRC_OP_WRITE, or MRC_OP_WRITE_IMM for WRITE_WITH_IMM: its last
			   * packet is a WRITE_IMM carrying imm, the others are WRITEs */
	__u8 reserved[3];
};
_Static_assert(sizeof(struct nic_wqe) == 40, "struct nic_wqe layout changed");

/* A send QP's queue, written by user space only (see "Send queue protocol"). */
struct nic_wq {
	__u32 posted; /* WQEs posted (free-running); written after the WQE itself */
	__u32 reserved;
	struct nic_wqe wqes[NIC_MSG_SLOTS]; /* WQE i at i % NIC_MSG_SLOTS */
};
_Static_assert(sizeof(struct nic_wq) == 8 + NIC_MSG_SLOTS * sizeof(struct nic_wqe),
	       "struct nic_wq layout changed");

/*
 * A kick: how user space makes the engine send. It runs the XDP program with
 * BPF_PROG_RUN on a template frame whose XDP metadata (data_meta .. data)
 * starts with this struct; with BPF_F_TEST_XDP_LIVE_FRAMES and repeat = n,
 * each of the n runs sends one packet of the QP (or nothing: no work, no
 * room, no usable EV) through the devmap nic_tx_ports. A frame is a kick only
 * when its ingress device is the loopback (ifindex 1, which BPF_PROG_RUN
 * uses; no NIC program is ever attached to lo) and it carries metadata (no
 * program of ours writes any). A kick is never on the wire, since metadata
 * never leaves the host, and it survives live-frame page recycling: the
 * kernel resets a recycled page's frame pointers, not its bytes, and the
 * engine rewrites the frame, never the metadata. The frame itself is a
 * template the engine overwrites (mrc_nic.nic.KICK_TEMPLATE: 64 bytes of
 * EtherType 0x88B5, IEEE local experimental, harmless if it ever leaked).
 */
struct nic_kick {
	__u32 qpn;    /* the send QP to serve */
	__u16 op;     /* enum nic_kick_op */
	__u16 arg;    /* NIC_KICK_TIMEOUT: most PSNs to queue (0: NIC_TIMEOUT_MAX);
		       * NIC_KICK_CWND: the new cwnd (packets; 0: the window);
		       * NIC_KICK_EV_REPLACE: the slot, an index in struct nic_sq.evs */
	__u64 age_ns; /* NIC_KICK_TIMEOUT: queue only PSNs last sent this long ago or more;
		       * NIC_KICK_CWND: the new cc.rtt_target_ns;
		       * NIC_KICK_EV_REPLACE: old EV << 16 | new EV */
};

/*
 * What a kick asks. NIC_KICK_TIMEOUT is the daemon's retransmission
 * timeout: no acknowledgement came for the QP's oldest packets for its
 * timeout. Each run of such a kick queues, under the QP's lock, up to arg (at
 * most NIC_TIMEOUT_MAX) of the oldest PSNs from snd_una that are neither
 * acknowledged nor queued already and were last sent age_ns ago or more
 * (cause NIC_RETX_TIMEOUT, each with the EV it was last sent on, which its
 * resend then avoids), and sends nothing: a NIC_KICK_SEND kick after it
 * sends them. Selective acknowledgements mark every PSN that arrived, so
 * such a PSN is lost, silently: the EV it was sent on goes ASSUMED_BAD at
 * once (cause NIC_EVC_TIMEOUT), as after a loss seen in a SACK hole. That is
 * how a blackholed path is found: its packets never draw the SACK that
 * would reveal the hole. Doing it in the program keeps the queue and its
 * bitmaps BPF's alone: user space never writes them.
 */
enum nic_kick_op {
	NIC_KICK_SEND = 0,    /* send what there is: retransmissions first, then new data */
	NIC_KICK_TIMEOUT = 1, /* queue the oldest unacknowledged PSNs, then send */
	NIC_KICK_CWND = 2,    /* set cwnd and cc.rtt_target_ns, then send (mrc-nic extension) */
	NIC_KICK_EV_REPLACE = 3, /* put a new EV in a profile slot (OCP: MRC_CTL_EV_OP_REPLACE_EV) */
};
/*
 * NIC_KICK_EV_REPLACE is how the daemon replaces a failed EV by a fresh one
 * of the same plane while the QP sends (its policy: mrc_nic/evreplace.py).
 * The daemon first creates the new EV's nic_evs entry (GOOD, the old one's
 * plane); the kick then swaps the value in slot arg of struct nic_sq.evs
 * under the QP's lock, if the slot still holds the old value (counted
 * EV_REPLACED; otherwise nothing changes), and sends nothing; the daemon then
 * deletes the old EV's entry. Packets still in flight on the old EV are
 * acknowledged as usual: a SACK echoing an EV that has no entry is
 * feedback for no EV (UNKNOWN_EV), and its PSNs are acked all the same.
 */
/*
 * NIC_KICK_CWND is congestion control's hand on the window. Each run sets,
 * under the QP's lock, cwnd = arg and cc.rtt_target_ns = age_ns (and counts
 * cc.cwnd_sets), then runs the engine as a send kick does. User space never
 * rewrites struct nic_sq while BPF owns it, so this is how the daemon's NSCC
 * changes the window of a QP that is sending. Why the engine runs too: the
 * ACK clock turns one ACK into one packet, never more, so a window that grew
 * is only filled by a kick; run it `growth` times (at least once) and the
 * new room leaves at once. A window that shrank simply sends nothing until
 * enough ACKs come back. Costs the engine nothing per packet: it is one more
 * branch before engine_run, taken by these kicks only.
 */
#ifndef NIC_TIMEOUT_MAX
#define NIC_TIMEOUT_MAX 64
#endif
_Static_assert(sizeof(struct nic_kick) == 16, "struct nic_kick layout changed");

/* ---- Ports -------------------------------------------------------------- */

/* Map nic_port_up (array, NIC_MAX_HOSTS entries of __u32, key = host id):
 * bit p set when the host's port p (plane p) is up. Copied into every SACK,
 * NACK (MRC_ACK.port_bitmap) and PROBE_REPLY (MRC_PROBE.port_bitmap); user
 * space must set it when the host comes up (0 tells peers that every port is
 * down). The send engine sends on plane p only while bit p is set here (for
 * the QP's local host) and in the peer's port bitmap (struct nic_sq.peer_ports).
 *
 * Map nic_ports (array, key = host * NIC_MAX_PLANES + plane, user space):
 * the addresses of the engine's data packets. Map nic_tx_ports (devmap, same
 * key): the host port itself, by ifindex, written from the host's network
 * namespace (the kernel resolves a devmap ifindex in the writer's namespace).
 * The engine sends a packet of plane p out of the port that received the ACK
 * with XDP_TX when that is the port of p, else with bpf_redirect_map into
 * nic_tx_ports (kicks always). Set both before setting the port's bit in
 * nic_port_up. */
struct nic_port {
	__u8 mac[6];    /* the host port's MAC: Ethernet source of data packets */
	__u8 nh_mac[6]; /* the next hop's MAC (the T0 switch port): their destination */
	__u32 ifindex;  /* the port's ifindex in its host's namespace (as put in nic_tx_ports) */
};
_Static_assert(sizeof(struct nic_port) == 16, "struct nic_port layout changed");

/* ---- Events: ring buffer nic_events ------------------------------------- */

/* Every record is 40 bytes and starts with type and qpn; ts (when BPF wrote
 * it) is its last field. struct nic_event is the completion's layout. */
enum nic_event_type {
	NIC_EV_RECV_IMM = 1, /* a WRITE_WITH_IMM message completed, in message order */
	NIC_EV_EV_STATE = 2, /* an EV changed state (struct nic_ev_event) */
	NIC_EV_LOSS = 3,     /* a PSN was declared lost (struct nic_loss_event) */
	NIC_EV_QP_ERR = 4,   /* a send QP went to ERR (struct nic_qp_err_event) */
	NIC_EV_SEND_DONE = 5, /* a WQE completed: snd_una passed its last PSN (struct nic_send_event) */
};

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

/* Why an EV changed state (struct nic_ev_event.cause). SKIP comes and goes
 * without events (it is short-lived and BPF undoes it); the OCP API's EV
 * events likewise report only ASSUMED_BAD and GOOD. */
enum nic_ev_cause {
	NIC_EVC_LOSS = 1,        /* a PSN sent on it was declared lost: -> ASSUMED_BAD */
	NIC_EVC_PROBE_REPLY = 2, /* a PROBE_REPLY came back: ASSUMED_BAD -> GOOD */
	NIC_EVC_TIMEOUT = 3,     /* a PSN sent on it timed out (a timeout kick): -> ASSUMED_BAD */
};

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

/* A fatal NACK, or (syndrome 0, reason 0, ev 0) a local error: the send engine
 * could not read a WQE's source (region missing, or the message outside it);
 * psn is then the PSN it was about to send. */
struct nic_qp_err_event {
	__u32 type;     /* NIC_EV_QP_ERR */
	__u32 qpn;      /* the send QP, now in ERR */
	__u32 psn;      /* BTH.psn of the fatal NACK: the request that failed */
	__u32 ev;       /* its echoed EV */
	__u32 syndrome; /* AETH syndrome (MRC_AETH_NAK_*): the verbs error to complete with */
	__u32 reason;   /* MRC_NACK_* */
	__u64 reserved;
	__u64 ts;
};
_Static_assert(sizeof(struct nic_qp_err_event) == 40, "struct nic_qp_err_event layout changed");

/* A send completion: every packet of a WQE has been acknowledged. Raised in
 * posting order. */
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

/* Completions raised by one packet, gathered under the QP's receive lock
 * and sent to the ring buffer after it, to keep the lock brief. Map
 * nic_cqe_scratch (per-CPU array, 1 entry); not pinned. */
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
};
_Static_assert(sizeof(struct nic_cqe) == 24, "struct nic_cqe layout changed");

/* ---- Counters: map nic_counters (per-CPU array of __u64, NIC_CNT_MAX) --- */

/* One index per outcome. Every packet the program sees adds 1 to exactly one
 * of PASS_*, DROP_*, SACK, NACK_*, PROBE_REPLY, ACK_CONSUMED, ACK_STALE and
 * PROBE_REPLY_CONSUMED, and every kick to one of KICK_SENT, KICK_IDLE and
 * DROP_*; the others (bytes, events, PSNs, the engine's TX_*) are extra. An
 * ACK the engine turns into a data packet is ACK_CONSUMED (or ACK_STALE) and
 * TX_CLOCKED. */
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
	NIC_CNT_DROP_BAD_VA,         /* va - base_va not a multiple of NIC_MR_ELEM_SIZE */
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
	NIC_CNT_TX_BAD_WQE,      /* a WQE's source outside its region: the QP went to ERR */
	NIC_CNT_TX_REDIRECT_ERR, /* no device in nic_tx_ports for the plane: packet dropped */
	NIC_CNT_SEND_DONE,       /* send completions (NIC_EV_SEND_DONE) */
	NIC_CNT_TIMEOUT_KICKS,   /* timeout kicks (NIC_KICK_TIMEOUT) taken */
	NIC_CNT_TIMEOUT_QUEUED,  /* PSNs they queued for retransmission */
	NIC_CNT_LOST_HEAD,       /* PSNs the head scan declared lost (also in LOST) */
	NIC_CNT_CWND_KICKS,      /* NIC_KICK_CWND runs that set a QP's window (then a send kick) */
	NIC_CNT_EV_REPLACED,     /* NIC_KICK_EV_REPLACE runs that put a new EV in a profile slot */
	NIC_CNT_DROP_RX_BUSY,    /* data packet dropped: its QP's receive lock stayed taken */
	NIC_CNT_MAX,
};

#endif /* MRC_NIC_MAPS_H */
