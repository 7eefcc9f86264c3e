// SPDX-License-Identifier: Apache-2.0
/*
 * nic_xdp.c: the XDP program on every host port of a lab (docs/fastpath.md).
 * Compiled once per lab (mrc_nic/nic.py, bcc) and attached to every host
 * port with the same fd; everything per QP, region or host lives in the
 * lab-wide maps of nic_maps.h, so the program never needs to know which host
 * or port it runs on.
 *
 * Per packet:
 *   1. parse Ethernet / IPv4 / UDP with a cursor (parse_* below). Anything
 *      that is not IPv4 / UDP / dport 4791 is XDP_PASS (ARP, ICMP, the lab's
 *      test traffic), and so is a RoCE opcode outside MRC's ranges;
 *   2. from UDP dport 4791 on, the packet is MRC: a malformed one is
 *      XDP_DROP, counted by reason (enum nic_counter);
 *   3. dispatch on the BTH opcode, one function per role:
 *        WRITE, WRITE_IMM  rx_data()         receiver: place + SACK/NACK (XDP_TX)
 *        ACK (SACK/NACK)   rx_ack()          sender: free window, EV feedback,
 *                                            losses, retransmit queue (XDP_DROP)
 *        PROBE             rx_probe()        receiver: PROBE_REPLY in place (XDP_TX)
 *        PROBE_REPLY       rx_probe_reply()  sender: RTT, EV back to GOOD (XDP_DROP)
 *
 * The answer to a data packet is built in place: the frame is resized to
 * the 94-byte SACK/NACK (bpf_xdp_adjust_tail) and rewritten whole
 * (bpf_xdp_store_bytes), exactly as mrc_nic/wire.py's sack_packet and
 * nack_packet lay it out, and sent back out of the same port (XDP_TX).
 *
 * Receiver, per data packet (rx_data): checks (lengths, QP, addresses,
 * state), then trimmed -> NACK(TRIMMED*); outside the region -> fatal NACK;
 * beyond the window -> NACK(PSN_OOR_WINDOW); below cum_psn or already in the
 * bitmap -> SACK(DUP), not placed; else the payload is copied into its
 * region element, then, under the QP's receive lock (nic_rx_locks: two
 * atomics, not the bpf_spin_lock helpers, see nic_maps.h), its bit is set,
 * cum_psn moves over the received run, LAST packets record their message,
 * and messages whose LAST PSN cum_psn has passed complete in MSN order
 * (AETH.msn; a WRITE_WITH_IMM completion is a nic_events record, written
 * after the lock, which is held as briefly as possible). The copy stays
 * outside the lock: a first look without it decides whether to copy (see
 * rx_data).
 *
 * Sender, per SACK/NACK (rx_ack): checks (lengths, syndrome and reason agree,
 * send QP known, addresses, state, PSNs never sent), then under the send QP's
 * lock: the cumulative PSN, the SACK bitmap and (SACK) BTH.psn are marked
 * acknowledged and snd_una moves over the acknowledged run; a retryable NACK
 * queues its PSN for retransmission with the EV that lost it; a fatal NACK
 * moves the QP to ERR; a SACK whose transmission is known starts the loss walk
 * (nic_maps.h, "Loss detection"); an ACK whose feedback is taken adds to the
 * QP's congestion signals (struct nic_sq_cc). Then, under the echoed EV's lock, the
 * feedback: counters, RTT, SKIP on ECN or a fabric trim, ASSUMED_BAD on a
 * loss. Events (loss, EV state, QP error) go to nic_events after the locks.
 * Every SACK and NACK ends there: XDP_DROP, counted as ACK_CONSUMED (or
 * ACK_STALE if it changed nothing), unless its QP is served by the send
 * engine (below), which then turns this frame into the next data packet.
 *
 * Send engine (engine_run; nic_maps.h, "The send engine"), one data packet
 * per run at most, run by a kick (BPF_PROG_RUN on a template frame whose XDP
 * metadata is a struct nic_kick; live frames: the packet leaves through the
 * devmap nic_tx_ports) or by an ACK of an engine QP (the ACK clock: XDP_TX on
 * the ACK's port when the EV's plane is that port's, else the devmap). A
 * window kick (NIC_KICK_CWND, congestion control's) sets cwnd first.
 * Outside the QP lock it picks the next usable EVs of the QP's round robin;
 * under the lock it raises completions (WQEs whose last PSN snd_una passed),
 * then takes a queued retransmission, else the next segment of the current
 * WQE if the window and cwnd have room; outside the lock it records the
 * transmission (EV counters under the EV's lock, the PSN -> EV table) and
 * writes the whole frame (headers as wire.data_packet lays them out, the
 * payload copied from the WQE's source region element). The engine is inlined
 * in one place (nic_xdp), after both of its entries (bcc has no BPF-to-BPF
 * calls). Verifier: about 227k instructions processed for the whole program
 * (117k before the engine; the EV search is bounded by ENGINE_EV_TRIES for
 * that reason too: NIC_MAX_QP_EVS steps cost 800k).
 *
 * PROBE (receiver role): answered in place with a PROBE_REPLY (XDP_TX), for
 * a receive QP in RTR/RTS whose peer sent it. PROBE_REPLY (sender role): an
 * RTT sample for the probed EV, and ASSUMED_BAD -> GOOD; consumed.
 *
 * Not checked: the IPv4 header checksum, BTH pkey and TVer, the AckReq bit
 * (every data packet is answered), the ICRC slot (docs/wire-format.md 9).
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>

#include "mrc_wire.h"
#include "nic_maps.h"

/* ---- Maps (pinned by mrc_nic/nic.py under /sys/fs/bpf/mrc-nic/<lab>/) ---- */

/* Receive state per QP, slot = QPN & (NIC_MAX_QPS - 1); see struct nic_rq. */
BPF_ARRAY(nic_rx_qps, struct nic_rq, NIC_MAX_QPS);
/* The owner of each slot of nic_rx_qps (QPN | NIC_RQ_TAG_USED, 0: free). */
BPF_ARRAY(nic_rx_slots, __u32, NIC_MAX_QPS);
/* Every memory region of the lab, NIC_MR_ELEM_SIZE bytes per element, mmapable. */
BPF_F_TABLE("array", __u32, struct nic_mr_elem, nic_mr, NIC_MR_ELEMS, BPF_F_MMAPABLE);
/* Region table, key = region id; see struct nic_region. */
BPF_ARRAY(nic_regions, struct nic_region, NIC_MAX_REGIONS);
/* Receive locks, entry QPN % NIC_RX_LOCKS (not pinned); see nic_maps.h. */
BPF_ARRAY(nic_rx_locks, struct nic_rx_lock, NIC_RX_LOCKS);
/* Port bitmap per host id, copied into every SACK/NACK. */
BPF_ARRAY(nic_port_up, __u32, NIC_MAX_HOSTS);
/* Outcome counters, enum nic_counter, one copy per CPU. */
BPF_PERCPU_ARRAY(nic_counters, __u64, NIC_CNT_MAX);
/* Payload bytes placed, per time bin (struct nic_timeline_bin). */
BPF_PERCPU_ARRAY(nic_rx_timeline, struct nic_timeline_bin, NIC_TIMELINE_BINS);
/* Completions gathered under a QP lock, sent after it (not pinned). */
BPF_PERCPU_ARRAY(nic_cqe_scratch, struct nic_cqe_batch, 1);
/* Send state per QP, key = QPN; see struct nic_sq. */
BPF_HASH(nic_tx_qps, __u32, struct nic_sq, NIC_MAX_QPS);
/* Per-EV state, key = (QPN, EV value); see struct nic_ev. */
BPF_HASH(nic_evs, struct nic_ev_key, struct nic_ev, NIC_MAX_EVS);
/* PSN -> EV tables of the send QPs (struct nic_sq.ring), mmapable. */
BPF_F_TABLE("array", __u32, struct nic_tx_ring, nic_tx_ring, NIC_TX_RINGS, BPF_F_MMAPABLE);
/* What the locked part of rx_ack decided, read after the lock (not pinned). */
struct nic_lost {
	__u32 psn;
	__u32 ev; /* the head scan's: the EV it went on (the walk's are all the echoed EV) */
	__u64 tx_ts;
};
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
BPF_PERCPU_ARRAY(nic_ack_scratch, struct nic_ack_scratch, 1);
/* Events to the daemon: struct nic_event and the other NIC_EV_* records. */
BPF_RINGBUF_OUTPUT(nic_events, NIC_EVENT_PAGES);
/* Send queues of the send QPs (struct nic_sq.ring), mmapable: user space posts WQEs. */
BPF_F_TABLE("array", __u32, struct nic_wq, nic_wq, NIC_TX_RINGS, BPF_F_MMAPABLE);
/* Host port addresses, key = host * NIC_MAX_PLANES + plane: the data packets' MACs. */
BPF_ARRAY(nic_ports, struct nic_port, NIC_MAX_HOSTS * NIC_MAX_PLANES);
/* Host ports as devices (ifindex), same key: where the engine redirects packets. */
BPF_DEVMAP(nic_tx_ports, NIC_MAX_HOSTS * NIC_MAX_PLANES);
/* What the locked part of the engine decided, read after the lock (not pinned). */
struct nic_tx_scratch {
	__u32 what;    /* enum tx_plan */
	__u32 full;    /* new data waited: no room in the window or cwnd */
	__u32 psn;     /* the PSN to send */
	__u32 wqe;     /* its WQE (free-running index) */
	__u32 off;     /* its payload's offset in the message */
	__u32 msn;     /* the WQE's MSN */
	__u32 lost_ev; /* a retransmission: the EV that lost it */
	__u32 second;  /* send on the second EV found (the first lost this PSN) */
	__u32 n_done;  /* completions in done */
	struct nic_send_event done[NIC_MSG_SLOTS];
};
BPF_PERCPU_ARRAY(nic_tx_scratch, struct nic_tx_scratch, 1);
/* A timeout kick's lost PSNs and their EVs, marked after the QP's lock (not pinned). */
struct nic_timeout_scratch {
	__u32 psn[NIC_TIMEOUT_MAX];
	__u32 ev[NIC_TIMEOUT_MAX];
};
BPF_PERCPU_ARRAY(nic_timeout_scratch, struct nic_timeout_scratch, 1);

/* ---- Counters ------------------------------------------------------------ */

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *c = nic_counters.lookup(&idx);

	if (c)
		*c += n;
}

static __always_inline int pass(__u32 reason)
{
	count(reason, 1);
	return XDP_PASS;
}

static __always_inline int drop(__u32 reason)
{
	count(reason, 1);
	return XDP_DROP;
}

/* ---- Parsing ------------------------------------------------------------- */

/* A position in the frame and the end of the frame (ctx->data_end). */
struct cursor {
	void *pos;
	void *end;
};

/*
 * The parse_* helpers share one contract (as xdp-tutorial's
 * parsing_helpers.h): if the whole header lies before the end of the frame,
 * return a pointer to it and move the cursor just past it; otherwise return
 * NULL and leave the cursor where it was. They check bounds only, never
 * field values, except parse_iphdr, which needs IHL to find the header's end.
 */
#define DEFINE_PARSE(name, type)                                              \
	static __always_inline type *parse_##name(struct cursor *c)           \
	{                                                                     \
		type *h = c->pos;                                             \
		if ((void *)(h + 1) > c->end)                                 \
			return NULL;                                          \
		c->pos = h + 1;                                               \
		return h;                                                     \
	}

DEFINE_PARSE(ethhdr, struct ethhdr)
DEFINE_PARSE(udphdr, struct udphdr)
DEFINE_PARSE(bth, struct mrc_bth)
DEFINE_PARSE(reth, struct mrc_reth)
DEFINE_PARSE(immdt, struct mrc_immdt)
DEFINE_PARSE(data_ext, struct mrc_data_ext)
DEFINE_PARSE(aeth, struct mrc_aeth)
DEFINE_PARSE(ack_ext, struct mrc_ack_ext)
DEFINE_PARSE(probe_ext, struct mrc_probe_ext)

/* IPv4 header with its options: NULL also when IHL < 5. */
static __always_inline struct iphdr *parse_iphdr(struct cursor *c)
{
	struct iphdr *ip = c->pos;
	__u32 hlen;

	if ((void *)(ip + 1) > c->end)
		return NULL;
	hlen = ip->ihl * 4;
	if (hlen < sizeof(*ip))
		return NULL;
	if (c->pos + hlen > c->end)
		return NULL;
	c->pos += hlen;
	return ip;
}

/* An MRC packet after the framing checks: headers up to and including BTH. */
struct mrc_pkt {
	struct cursor c; /* just after the BTH */
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	struct mrc_bth *bth;
	__u32 udp_payload; /* UDP length - 8: BTH and everything after it, ICRC included */
	__u32 bth_off;     /* frame offset of the BTH */
};

/* ---- Answers: SACK and NACK ---------------------------------------------- */

/* The whole answer frame, as wire.sack_packet / wire.nack_packet build it. */
struct ack_frame {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct mrc_bth bth;
	struct mrc_aeth aeth;
	struct mrc_ack_ext ack;
	__be32 icrc;
} __attribute__((packed, aligned(2))); /* every header sits at an even offset */
_Static_assert(sizeof(struct ack_frame) ==
		       ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_ACK_HDRS_LEN + MRC_ICRC_LEN,
	       "struct ack_frame is not the 94-byte SACK/NACK");

/* What an answer says besides what it copies from the data packet. */
struct ack_info {
	__u64 sack_bitmap; /* bit i: PSN sack_base + i received */
	__u32 peer_qpn;    /* BTH dest QP: the data sender's QP */
	__u32 cum_psn;
	__u32 sack_base;
	__u32 msn;         /* AETH.msn: messages completed in order */
	__u32 mpr;
	__u32 port_bitmap;
	__u8 syndrome;     /* MRC_AETH_* */
	__u8 reason;       /* MRC_NACK_* */
	__u8 flags;        /* MRC_ACK_F_* */
	__u8 counter;      /* enum nic_counter to add 1 to when it is sent */
};

static __always_inline __u16 ipv4_csum(const void *hdr)
{
	const __u16 *w = hdr;
	__u32 sum = 0;
	int i;

#pragma unroll
	for (i = 0; i < (int)(sizeof(struct iphdr) / 2); i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

/*
 * Turn a received frame around, in place, into an answer of `size` bytes
 * (Ethernet, IPv4 with IHL 5, UDP, then whatever the caller writes after
 * them): the MACs and the addresses swapped, the EV kept as UDP source port
 * (docs/wire-format.md 3), the control class in DSCP. Returns the frame, or
 * NULL when it cannot be resized (counted). The addresses and the EV are
 * read into registers first: resizing invalidates packet pointers, and the
 * new headers overwrite the old ones (IPv4 options of the received packet
 * are not kept). Answering in place instead of building the answer on the
 * stack and storing it with bpf_xdp_store_bytes saves about 60 ns a packet
 * (zeroing, a helper call and a copy: scripts/bench_fastpath.py, part 1).
 */
static __always_inline void *turn_around(struct xdp_md *ctx, struct mrc_pkt *p, __u32 size)
{
	__u8 to_mac[ETH_ALEN], from_mac[ETH_ALEN];
	__be32 to_ip = p->ip->saddr, from_ip = p->ip->daddr;
	__be16 ev = p->udp->source;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	void *end;
	int delta;

	__builtin_memcpy(to_mac, p->eth->h_source, ETH_ALEN);
	__builtin_memcpy(from_mac, p->eth->h_dest, ETH_ALEN);
	/* The program is not loaded with BPF_F_XDP_HAS_FRAGS: every frame it
	 * sees is linear, and data_end - data is its whole length. */
	delta = (int)size - (int)(ctx->data_end - ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta)) {
		count(NIC_CNT_DROP_XDP_ERR, 1);
		return NULL;
	}
	eth = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if ((void *)eth + size > end || size < sizeof(*eth) + sizeof(*ip) + sizeof(*udp)) {
		count(NIC_CNT_DROP_XDP_ERR, 1);
		return NULL;
	}
	ip = (void *)(eth + 1);
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return NULL; /* for the verifier: size covers it */

	__builtin_memcpy(eth->h_dest, to_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, from_mac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = (MRC_DSCP_CONTROL << MRC_DSCP_SHIFT) | MRC_ECN_NOT_ECT;
	ip->tot_len = bpf_htons(size - ETH_HLEN);
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000); /* DF */
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ip->check = 0;
	ip->saddr = from_ip;
	ip->daddr = to_ip;
	ip->check = ipv4_csum(ip);
	udp->source = ev;
	udp->dest = bpf_htons(MRC_UDP_PORT);
	udp->len = bpf_htons(size - ETH_HLEN - sizeof(*ip));
	udp->check = 0;
	return eth;
}

/* Turn the data packet into its answer (a SACK or a NACK) and send it back. */
static __always_inline int answer(struct xdp_md *ctx, struct mrc_pkt *p,
				  struct mrc_data_ext *dext, __u32 psn,
				  const struct ack_info *ai)
{
	__be64 echo_ts = dext->tx_ts; /* copied as is (big endian) */
	__be16 ev = p->udp->source;
	struct ack_frame *f = turn_around(ctx, p, sizeof(*f));

	if (!f)
		return XDP_DROP;
	f->bth.opcode = MRC_OP_ACK;
	f->bth.flags = 0;
	f->bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f->bth.qpn = bpf_htonl(ai->peer_qpn & MRC_BTH_QPN_MASK);
	f->bth.apsn = bpf_htonl(psn & MRC_BTH_PSN_MASK); /* A = 0 */

	f->aeth.smsn = bpf_htonl(((__u32)ai->syndrome << MRC_AETH_SYN_SHIFT) |
				 (ai->msn & MRC_AETH_MSN_MASK));

	f->ack.mpr_cum = bpf_htonl(((ai->mpr << MRC_ACK_MPR_SHIFT) & MRC_ACK_MPR_MASK) |
				   (ai->cum_psn & MRC_ACK_CUM_PSN_MASK));
	f->ack.sack_base = bpf_htonl(ai->sack_base & MRC_ACK_SACK_PSN_MASK);
	f->ack.sack_bitmap = bpf_htonll(ai->sack_bitmap);
	f->ack.echo_ts = echo_ts;
	f->ack.echo_ev = ev;
	f->ack.flags = ai->flags;
	f->ack.nack_reason = ai->reason;
	f->ack.port_bitmap = bpf_htonl(ai->port_bitmap);
	f->icrc = MRC_ICRC_UNUSED;
	count(ai->counter, 1);
	return XDP_TX;
}

/* Whether QP qpn owns its receive slot (nic_maps.h, nic_rx_slots). */
static __always_inline int rx_qp_owns_slot(__u32 qpn)
{
	__u32 slot = qpn & (NIC_MAX_QPS - 1);
	__u32 *owner = nic_rx_slots.lookup(&slot);

	return owner && *owner == (qpn | NIC_RQ_TAG_USED);
}

/* The receive state of QP qpn, or NULL if its slot is free or another QP's. */
static __always_inline struct nic_rq *rx_qp(__u32 qpn)
{
	__u32 slot = qpn & (NIC_MAX_QPS - 1);

	if (!rx_qp_owns_slot(qpn))
		return NULL;
	return nic_rx_qps.lookup(&slot);
}

/* ---- The receive lock (nic_maps.h, nic_rx_locks) ------------------------ */

/* Take QP qpn's receive lock: its word, or NULL when it stayed taken for
 * NIC_RX_LOCK_TRIES tries (counted by the caller's drop). The cmpxchg is a
 * full barrier: nothing of the section moves before it. */
static __always_inline __u64 *rx_lock(__u32 qpn)
{
	__u32 slot = qpn & (NIC_RX_LOCKS - 1);
	struct nic_rx_lock *l = nic_rx_locks.lookup(&slot);
	int i;

	if (!l)
		return NULL;
#pragma clang loop unroll(disable)
	for (i = 0; i < NIC_RX_LOCK_TRIES; i++)
		/* cmpxchg alone: a plain read first (test-and-test-and-set) would
		 * spare the holder's cache line, but its branch doubles the
		 * verifier's walk of the loop, beyond its budget. */
		if (__sync_val_compare_and_swap(&l->word, 0, 1) == 0)
			return &l->word;
	return NULL;
}

/* Release it: a sequentially consistent exchange (BPF_XCHG, a full barrier
 * on x86), so every store of the section is visible before the lock is seen
 * free, and the compiler moves no access of the section past it. */
static __always_inline void rx_unlock(__u64 *word)
{
	__atomic_exchange_n(word, 0, __ATOMIC_SEQ_CST);
}

/* ---- Receive state: the bitmap ring (callers hold the receive lock) ------ */

/* Set bits of v: clang expands this without branches or lookup tables
 * (BPF has no popcount instruction). */
static __always_inline __u32 popcount64(__u64 v)
{
	return __builtin_popcountll(v);
}

#define RING_POS(psn) ((psn) & (NIC_BITMAP_BITS - 1))
#define RING_WORD(psn) (RING_POS(psn) >> 6)
#define RING_BIT(psn) (RING_POS(psn) & 63)

static __always_inline int ring_test(const struct nic_rq *rq, __u32 psn)
{
	return (rq->bitmap[RING_WORD(psn)] >> RING_BIT(psn)) & 1;
}

static __always_inline void ring_set(struct nic_rq *rq, __u32 psn)
{
	rq->bitmap[RING_WORD(psn)] |= 1ULL << RING_BIT(psn);
}

/* Move cum_psn over the run of received PSNs that starts at it, clearing
 * their bits (the bitmap invariant of nic_maps.h). One word per step: the
 * run is at most a window long, so NIC_BITMAP_WORDS + 1 steps suffice.
 * Branch-free inside a step, which keeps the verifier's work linear. */
static __always_inline void ring_advance(struct nic_rq *rq)
{
	__u32 cum = rq->cum_psn;
	int i;

	for (i = 0; i < NIC_BITMAP_WORDS + 1; i++) {
		__u32 w = RING_WORD(cum), b = RING_BIT(cum);
		__u64 word = rq->bitmap[w];
		__u64 bits = word >> b;
		/* The ones below the lowest zero of bits: the received run from cum
		 * on, in this word. bits has a zero at 63 - b or above when b > 0,
		 * and when bits is all ones, (bits + 1) is 0 and run is all ones. */
		__u64 run = (~bits & (bits + 1)) - 1;
		__u32 n = popcount64(run);

		if (n == 0)
			break;
		rq->bitmap[w] = word & ~(run << b);
		cum = (cum + n) & MRC_PSN_MASK;
		if (b + n < 64)
			break;
	}
	rq->cum_psn = cum;
}

/*
 * The SACK bitmap: 64 bits from sack_base. The base is cum_psn, unless the
 * trigger lies 64 or more PSNs beyond it (MPR can be many times 64): then it
 * is the trigger's PSN rounded down to a multiple of 64, so that the SACK
 * reports the trigger's neighbourhood (docs/wire-format.md 6: "The receiver
 * may then move the base"). Bits at or beyond cum_psn + window are masked:
 * their ring positions belong to PSNs of the current window.
 */
static __always_inline void sack_view(const struct nic_rq *rq, __u32 psn, __s32 window,
				      struct ack_info *ai)
{
	__u32 cum = rq->cum_psn, base = cum, w, b;
	__s32 d = MRC_PSN_DIFF(psn, cum), lim;
	__u64 bits;

	if (d >= MRC_SACK_BITS && d < window)
		base = psn & ~(__u32)(MRC_SACK_BITS - 1);
	w = RING_WORD(base);
	b = RING_BIT(base);
	bits = rq->bitmap[w] >> b;
	if (b)
		bits |= rq->bitmap[(w + 1) & (NIC_BITMAP_WORDS - 1)] << (64 - b);
	lim = MRC_PSN_DIFF(cum + window, base);
	if (lim < 64)
		bits &= lim <= 0 ? 0 : (1ULL << lim) - 1;

	ai->cum_psn = cum;
	ai->sack_base = base;
	ai->sack_bitmap = bits;
	ai->msn = rq->msn;
}

/* ---- Receiver: data packets ---------------------------------------------- */

/* What the locked section decided. */
enum rx_verdict {
	RX_PLACED = 0,
	RX_DUP,
	RX_NO_SLOT, /* LAST packet whose MSN is too far ahead: NACK(NO_RESOURCE) */
	RX_BAD_MSN, /* LAST packet of a completed or already recorded message: drop */
};

/* A data packet answered with a NACK and nothing placed: what its locked
 * section counts besides the NACK (rx_data). */
enum rx_nack {
	RX_NACK_NONE = 0, /* not a NACK: placement, or a duplicate */
	RX_NACK_TRIMMED,  /* NACK(TRIMMED*): flagged DUP when the PSN is here */
	RX_NACK_OOR,      /* NACK(PSN_OOR_WINDOW) */
	RX_NACK_OTHER,    /* NACK(NO_RESOURCE) before the copy, remote access */
};

/*
 * Can a LAST packet of message msn be recorded? RX_BAD_MSN (the message is
 * complete, or its slot already holds it) only ever turns into RX_BAD_MSN
 * later: rq->msn only grows, and a slot is freed only when its message
 * completes. So a look without the lock is enough to refuse, before the
 * payload is copied; the lock makes the final check.
 */
static __always_inline enum rx_verdict msg_check(const struct nic_rq *rq, __u32 msn)
{
	__s32 d = MRC_PSN_DIFF(msn, rq->msn); /* MSNs are 24-bit serial numbers too */

	if (d < 0)
		return RX_BAD_MSN;
	if (d >= NIC_MSG_SLOTS)
		return RX_NO_SLOT;
	if (rq->msgs[msn & (NIC_MSG_SLOTS - 1)].flags & NIC_MSG_F_VALID)
		return RX_BAD_MSN;
	return RX_PLACED;
}

/* Record a LAST packet's message in its slot (receive lock held). */
static __always_inline enum rx_verdict record_msg(struct nic_rq *rq, __u32 msn, __u32 psn,
						  __u64 base_va, __u32 len, __u32 imm, int has_imm)
{
	enum rx_verdict v = msg_check(rq, msn);
	struct nic_msg_slot *slot;

	if (v != RX_PLACED)
		return v;
	slot = &rq->msgs[msn & (NIC_MSG_SLOTS - 1)];
	slot->va = base_va;
	slot->last_psn = psn;
	slot->len = len;
	slot->imm = imm;
	slot->flags = NIC_MSG_F_VALID | (has_imm ? NIC_MSG_F_IMM : 0);
	return RX_PLACED;
}

/* Complete, in MSN order, every message whose LAST PSN cum_psn has passed
 * (receive lock held). WRITE_WITH_IMM completions go to batch, sent after the
 * lock is released; batch->done counts every message completed. Branch-free
 * inside a step but for the two exits: each slot is written to the batch,
 * which keeps it only when the message had an immediate. The counts go to
 * memory, not to the caller: the verifier would follow the rest of the
 * program once per distinct count. */
static __always_inline void complete_msgs(struct nic_rq *rq, struct nic_cqe_batch *batch)
{
	__u32 done = 0, n = 0;
	int i;

	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		__u32 msn = rq->msn;
		struct nic_msg_slot *slot = &rq->msgs[msn & (NIC_MSG_SLOTS - 1)];
		struct nic_cqe *cqe = &batch->cqes[n & (NIC_MSG_SLOTS - 1)];
		__u32 has_imm = (slot->flags / NIC_MSG_F_IMM) & 1;

		if (!(slot->flags & NIC_MSG_F_VALID))
			break;
		if (MRC_PSN_DIFF(rq->cum_psn, slot->last_psn) <= 0)
			break;
		cqe->va = slot->va;
		cqe->msn = msn;
		cqe->imm = slot->imm;
		cqe->len = slot->len;
		n += has_imm;
		slot->flags = 0;
		rq->msn = (msn + 1) & MRC_DATA_MSN_MASK;
		done++;
	}
	batch->n = n;
	batch->done = done;
	rq->stats.imm_done += n;
	rq->stats.msgs_done += done;
}

/* Send the completions gathered in batch to the ring buffer. */
static __always_inline void emit_completions(__u32 qpn, struct nic_cqe_batch *batch)
{
	struct nic_event ev = {.type = NIC_EV_RECV_IMM, .qpn = qpn};
	__u32 n = batch->n, sent = 0;
	int i;

	ev.ts = bpf_ktime_get_ns();
	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		struct nic_cqe *cqe = &batch->cqes[i];

		if (i >= n)
			break;
		ev.msn = cqe->msn;
		ev.imm = cqe->imm;
		ev.va = cqe->va;
		ev.len = cqe->len;
		sent += nic_events.ringbuf_output(&ev, sizeof(ev), 0) == 0;
	}
	count(NIC_CNT_EVENTS, sent);
	if (sent < n)
		count(NIC_CNT_EVENTS_LOST, n - sent);
	batch->n = 0;
	batch->done = 0;
}

/* The IPv4 addresses must be the QP's peer (source) and local host
 * (destination) on one plane: host h on plane p is NIC_HOST_NET + p.(h+1).
 * The plane is the destination's third octet; the source must match it. */
static __always_inline int addrs_match(__u32 local_host, __u32 peer_host, __be32 saddr,
				       __be32 daddr)
{
	__u32 d = bpf_ntohl(daddr) - NIC_HOST_NET;
	__u32 s = bpf_ntohl(saddr) - NIC_HOST_NET;
	__u32 plane = d >> 8;

	if (plane >= NIC_MAX_PLANES)
		return 0;
	if ((d & 0xff) != local_host + 1)
		return 0;
	return s == ((plane << 8) | (peer_host + 1));
}

/* Receiver role: a WRITE or WRITE_IMM packet. */
/* A gap of at least NIC_GAP_MIN_NS that ended at `now`, into the QP's gap log. */
static __always_inline void log_gap(struct nic_rq *rq, __u64 now, __u64 gap)
{
	__u64 bin = now >> NIC_GAP_BIN_SHIFT;
	struct nic_gap_bin *g = &rq->gaps[bin & (NIC_GAP_BINS - 1)];

	if ((g->end_ns >> NIC_GAP_BIN_SHIFT) != bin || gap > g->gap_ns) {
		g->end_ns = now;
		g->gap_ns = gap;
	}
}

/* The delivery clock of a receive QP (under its lock): the longest gap, and
 * the long ones by when they ended. */
static __always_inline void note_delivery(struct nic_rq *rq, __u64 now)
{
	struct nic_rq_stats *st = &rq->stats;
	__u64 gap;

	if (!st->first_place_ns)
		st->first_place_ns = now;
	else if (now > st->last_place_ns) {
		gap = now - st->last_place_ns;
		if (gap > st->max_gap_ns) {
			st->max_gap_ns = gap;
			st->max_gap_end_ns = now;
		}
		if (gap >= NIC_GAP_MIN_NS)
			log_gap(rq, now, gap);
	}
	if (now > st->last_place_ns)
		st->last_place_ns = now;
}

/* The bytes of a payload of `total` bytes that belong to the region element
 * starting at payload byte `at` (at < total), at most NIC_MR_ELEM_SIZE. The
 * barriers keep the bounds where the verifier can follow them: the caller
 * checks >= 1, and the copy's length is then 1 .. NIC_MR_ELEM_SIZE. */
static __always_inline __u64 elem_bytes(__u32 total, __u32 at)
{
	__u64 n = total - at;

	asm volatile("" : "+r"(n));
	if (n > NIC_MR_ELEM_SIZE)
		n = NIC_MR_ELEM_SIZE;
	asm volatile("" : "+r"(n));
	return n;
}

/* Bytes placed at `now` into this CPU's copy of the timeline. */
static __always_inline void timeline_add(__u64 now, __u32 bytes)
{
	__u64 bin = now >> NIC_TIMELINE_SHIFT;
	__u32 slot = bin & (NIC_TIMELINE_BINS - 1);
	struct nic_timeline_bin *b = nic_rx_timeline.lookup(&slot);

	if (!b)
		return;
	if (b->bin != bin) {
		b->bin = bin;
		b->bytes = 0;
	}
	b->bytes += bytes;
}

static __always_inline int rx_data(struct xdp_md *ctx, struct mrc_pkt *p)
{
	int has_imm = p->bth->opcode == MRC_OP_WRITE_IMM;
	__u32 hdrs = has_imm ? MRC_WRITE_IMM_HDRS_LEN : MRC_WRITE_HDRS_LEN;
	struct mrc_data_ext *dext;
	struct mrc_reth *reth;
	struct nic_cqe_batch *batch = NULL;
	struct nic_region *rg;
	struct nic_rq *rq;
	struct ack_info ai = {};
	enum rx_verdict verdict = RX_PLACED;
	enum rx_nack nack = RX_NACK_NONE;
	__u64 *lock;
	__u32 qpn, psn, dmalen, rkey, flags_msn, msg_off, payload_len, payload_off;
	__u32 imm = 0, elem = 0, zero = 0, dscp, host;
	__u64 va, off, now = 0;
	__s32 window, d;
	int trimmed, last, fresh = 0;
	__u32 *ports;

	if (p->udp_payload < hdrs + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_SHORT);
	reth = parse_reth(&p->c);
	if (!reth)
		return drop(NIC_CNT_DROP_TRUNCATED);
	if (has_imm) {
		struct mrc_immdt *immdt = parse_immdt(&p->c);

		if (!immdt)
			return drop(NIC_CNT_DROP_TRUNCATED);
		imm = bpf_ntohl(immdt->imm);
	}
	dext = parse_data_ext(&p->c);
	if (!dext)
		return drop(NIC_CNT_DROP_TRUNCATED);

	qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	psn = bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK;
	va = bpf_ntohll(reth->va);
	rkey = bpf_ntohl(reth->rkey);
	dmalen = bpf_ntohl(reth->dmalen);
	flags_msn = bpf_ntohl(dext->flags_msn);
	msg_off = bpf_ntohl(dext->msg_off);
	last = !!(flags_msn & MRC_DATA_F_LAST);
	dscp = p->ip->tos >> MRC_DSCP_SHIFT;
	trimmed = dscp == MRC_DSCP_TRIMMED || dscp == MRC_DSCP_TRIMMED_LASTHOP;
	payload_len = p->udp_payload - hdrs - MRC_ICRC_LEN;
	payload_off = p->bth_off + hdrs;

	if (has_imm && !last)
		return drop(NIC_CNT_DROP_IMM_NOT_LAST);
	/* A trimmed packet lost its payload; RETH.dmalen is the length before. */
	if (!trimmed) {
		if (dmalen != payload_len)
			return drop(NIC_CNT_DROP_BAD_LEN);
		if (payload_len > MRC_PAYLOAD_MAX(MRC_MTU) || payload_len > NIC_SEG_SIZE)
			return drop(NIC_CNT_DROP_TOO_LONG);
	}

	rq = rx_qp(qpn);
	if (!rq)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (!addrs_match(rq->local_host, rq->peer_host, p->ip->saddr, p->ip->daddr))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (rq->state != NIC_QPS_RTR && rq->state != NIC_QPS_RTS)
		return drop(NIC_CNT_DROP_QP_STATE);
	if (rq->mpr == 0 || rq->mpr > NIC_MPR_MAX)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	window = rq->mpr * MRC_MPR_UNIT;

	host = rq->local_host;
	ports = nic_port_up.lookup(&host);
	ai.port_bitmap = ports ? *ports : 0;
	ai.peer_qpn = rq->peer_qpn;
	ai.mpr = rq->mpr;
	ai.syndrome = MRC_AETH_NAK_PSN_SEQ;
	if ((p->ip->tos & MRC_ECN_MASK) == MRC_ECN_CE)
		ai.flags |= MRC_ACK_F_ECN;

	/* Trimmed: nothing to place; ask for the PSN again. */
	if (trimmed) {
		int lasthop = dscp == MRC_DSCP_TRIMMED_LASTHOP;

		ai.reason = lasthop ? MRC_NACK_TRIMMED_LASTHOP : MRC_NACK_TRIMMED;
		ai.counter = lasthop ? NIC_CNT_NACK_TRIMMED_LASTHOP : NIC_CNT_NACK_TRIMMED;
		ai.flags |= MRC_ACK_F_TRIMMED;
		nack = RX_NACK_TRIMMED;
		goto locked;
	}

	/* Where the payload goes. A zero-length WRITE places nothing, and its
	 * va and rkey are not checked (as in IBTA). */
	if (payload_len) {
		__u32 rid = rq->region;

		rg = nic_regions.lookup(&rid);
		if (!rg || !rg->n_elems || rg->rkey != rkey || va < rg->base_va)
			goto remote_access;
		off = va - rg->base_va;
		if (off & (NIC_MR_ELEM_SIZE - 1))
			return drop(NIC_CNT_DROP_BAD_VA);
		off /= NIC_MR_ELEM_SIZE;
		if (off + (payload_len - 1) / NIC_MR_ELEM_SIZE >= rg->n_elems)
			goto remote_access; /* its last element is beyond the region */
		elem = rg->first_elem + (__u32)off;
	}

	/*
	 * A first look without the lock decides whether to copy the payload, so
	 * the copy stays outside the lock. A PSN seen below cum_psn or with its
	 * bit set is a duplicate for good (cum_psn only grows, a bit is only
	 * cleared when cum_psn passes it). A PSN seen beyond the window may have
	 * come inside it meanwhile: it is NACKed anyway, the sender resends. A
	 * PSN seen fresh may turn out a duplicate under the lock if another CPU
	 * placed it meanwhile: both copies hold the same bytes.
	 */
	d = MRC_PSN_DIFF(psn, rq->cum_psn);
	if (d >= window) {
		ai.reason = MRC_NACK_PSN_OOR_WINDOW;
		ai.counter = NIC_CNT_NACK_OOR;
		nack = RX_NACK_OOR;
		goto locked;
	}
	fresh = d >= 0 && !ring_test(rq, psn);
	if (fresh && last) {
		verdict = msg_check(rq, flags_msn & MRC_DATA_MSN_MASK);
		if (verdict == RX_BAD_MSN)
			return drop(NIC_CNT_DROP_BAD_MSN);
		if (verdict == RX_NO_SLOT) {
			/* As PSN_OOR_WINDOW: the sender resends once messages complete. */
			ai.reason = MRC_NACK_NO_RESOURCE;
			ai.counter = NIC_CNT_NACK_NO_RESOURCE;
			nack = RX_NACK_OTHER;
			goto locked;
		}
	}

	if (fresh && payload_len) {
		int k;

		/* Element by element: a payload of NIC_SEG_SIZE fills several. */
		for (k = 0; k < NIC_SEG_ELEMS; k++) {
			__u32 at = k * NIC_MR_ELEM_SIZE, elem_k = elem + k;
			struct nic_mr_elem *dst;
			__u64 len;

			if (at >= payload_len)
				break;
			dst = nic_mr.lookup(&elem_k);
			if (!dst)
				goto remote_access; /* region reaches past nic_mr: misconfigured */
			len = elem_bytes(payload_len, at);
			if (len < 1)
				return drop(NIC_CNT_DROP_BAD_LEN);
			if (bpf_xdp_load_bytes(ctx, payload_off + at, dst, len))
				return drop(NIC_CNT_DROP_TRUNCATED);
		}
	}

	batch = nic_cqe_scratch.lookup(&zero);
	if (!batch)
		return drop(NIC_CNT_DROP_XDP_ERR); /* cannot happen: a 1-entry array */
	batch->n = 0;
	batch->done = 0;
	if (fresh) /* only new data moves the delivery clock: a duplicate is no progress */
		now = bpf_ktime_get_ns();
	goto locked;

remote_access:
	/* Fatal for the QP (docs/wire-format.md 6): the daemon moves it to ERR
	 * when it sees the counter or the NACK's sender completes with an error. */
	ai.syndrome = MRC_AETH_NAK_REM_ACCESS;
	ai.reason = MRC_NACK_UNEXP_EVENT;
	ai.counter = NIC_CNT_NACK_REM_ACCESS;
	nack = RX_NACK_OTHER;

locked:
	/* The one place that takes the receive lock: its spin is a loop the
	 * verifier walks once per place (nic_maps.h, NIC_RX_LOCK_TRIES). */
	lock = rx_lock(qpn);
	if (!lock)
		return drop(NIC_CNT_DROP_RX_BUSY);
	if (!rx_qp_owns_slot(qpn)) { /* deleted or set up again since rx_qp */
		rx_unlock(lock);
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	}
	if (nack != RX_NACK_NONE) {
		if (nack == RX_NACK_TRIMMED) {
			d = MRC_PSN_DIFF(psn, rq->cum_psn);
			if (d < 0 || (d < window && ring_test(rq, psn)))
				ai.flags |= MRC_ACK_F_DUP; /* a retransmission of a PSN we have */
			rq->stats.trimmed_pkts++;
		}
		if (nack == RX_NACK_OOR)
			rq->stats.oor_pkts++;
		sack_view(rq, psn, window, &ai);
		rq->stats.data_pkts++;
		rq->stats.nacks++;
		rx_unlock(lock);
		return answer(ctx, p, dext, psn, &ai);
	}
	d = MRC_PSN_DIFF(psn, rq->cum_psn);
	if (!fresh || d < 0 || ring_test(rq, psn)) {
		verdict = RX_DUP;
	} else {
		verdict = RX_PLACED;
		if (last)
			verdict = record_msg(rq, flags_msn & MRC_DATA_MSN_MASK, psn,
					     va - msg_off, msg_off + dmalen, imm, has_imm);
		if (verdict == RX_PLACED) {
			ring_set(rq, psn);
			if (d == 0)
				ring_advance(rq);
			complete_msgs(rq, batch);
			rq->stats.placed_pkts++;
			rq->stats.placed_bytes += payload_len;
			note_delivery(rq, now);
		}
	}
	if (verdict != RX_BAD_MSN) {
		rq->stats.data_pkts++;
		if (verdict == RX_NO_SLOT)
			rq->stats.nacks++;
		else
			rq->stats.sacks++;
		if (verdict == RX_DUP)
			rq->stats.dup_pkts++;
		sack_view(rq, psn, window, &ai);
	}
	rx_unlock(lock);

	switch (verdict) {
	case RX_BAD_MSN:
		return drop(NIC_CNT_DROP_BAD_MSN);
	case RX_NO_SLOT:
		ai.reason = MRC_NACK_NO_RESOURCE;
		ai.counter = NIC_CNT_NACK_NO_RESOURCE;
		return answer(ctx, p, dext, psn, &ai);
	case RX_DUP:
		ai.flags |= MRC_ACK_F_DUP;
		count(NIC_CNT_DUP, 1);
		break;
	default:
		count(NIC_CNT_PLACED, 1);
		count(NIC_CNT_PLACED_BYTES, payload_len);
		timeline_add(now, payload_len);
		if (batch->done) {
			count(NIC_CNT_MSG_DONE, batch->done);
			if (batch->n)
				emit_completions(qpn, batch);
		}
		break;
	}
	ai.syndrome = MRC_AETH_ACK;
	ai.reason = MRC_NACK_NONE;
	ai.counter = NIC_CNT_SACK;
	return answer(ctx, p, dext, psn, &ai);
}

/* ---- Receiver role: PROBE -> PROBE_REPLY --------------------------------- */

/* The whole PROBE_REPLY frame, as wire.probe_reply builds it. */
struct probe_frame {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct mrc_bth bth;
	struct mrc_probe_ext probe;
	__be32 icrc;
} __attribute__((packed, aligned(2)));
_Static_assert(sizeof(struct probe_frame) ==
		       ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_PROBE_HDRS_LEN + MRC_ICRC_LEN,
	       "struct probe_frame is not the 74-byte PROBE_REPLY");

/* Both probe packets are exactly BTH MRC_PROBE ICRC. */
static __always_inline int probe_len_ok(struct mrc_pkt *p)
{
	if (p->udp_payload < MRC_PROBE_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_SHORT);
	if (p->udp_payload > MRC_PROBE_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_BAD_LEN);
	return -1;
}

/*
 * A PROBE for one of our receive QPs, from its peer: answer it in place,
 * exactly as the SACK answers data (addresses swapped, the EV kept as source
 * port, control class), echoing tx_ts, ev and the probe number (BTH.psn), with
 * the ECN the probe saw and our port bitmap. The receive state is not
 * touched: probes use no data PSN.
 */
static __always_inline int rx_probe(struct xdp_md *ctx, struct mrc_pkt *p)
{
	struct probe_frame *f;
	struct mrc_probe_ext *pe;
	struct nic_rq *rq;
	__u32 qpn, host, *ports, port_bitmap;
	__be32 apsn;
	__be64 tx_ts;
	__be16 ev;
	__u8 flags = 0;
	int verdict = probe_len_ok(p);

	if (verdict >= 0)
		return verdict;
	pe = parse_probe_ext(&p->c);
	if (!pe)
		return drop(NIC_CNT_DROP_TRUNCATED);
	qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	rq = rx_qp(qpn);
	if (!rq)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (!addrs_match(rq->local_host, rq->peer_host, p->ip->saddr, p->ip->daddr))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (rq->state != NIC_QPS_RTR && rq->state != NIC_QPS_RTS)
		return drop(NIC_CNT_DROP_QP_STATE);
	host = rq->local_host;
	ports = nic_port_up.lookup(&host);
	port_bitmap = ports ? *ports : 0;
	/* What the reply echoes, before turn_around overwrites it. */
	apsn = p->bth->apsn & bpf_htonl(MRC_BTH_PSN_MASK); /* A = 0 */
	tx_ts = pe->tx_ts;
	ev = pe->ev;
	if ((p->ip->tos & MRC_ECN_MASK) == MRC_ECN_CE)
		flags = MRC_ACK_F_ECN;

	f = turn_around(ctx, p, sizeof(*f));
	if (!f)
		return XDP_DROP;
	f->bth.opcode = MRC_OP_PROBE_REPLY;
	f->bth.flags = 0;
	f->bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f->bth.qpn = bpf_htonl(rq->peer_qpn & MRC_BTH_QPN_MASK);
	f->bth.apsn = apsn;
	__builtin_memset(&f->probe, 0, sizeof(f->probe));
	f->probe.tx_ts = tx_ts;
	f->probe.ev = ev;
	f->probe.flags = flags;
	f->probe.port_bitmap = bpf_htonl(port_bitmap);
	f->icrc = MRC_ICRC_UNUSED;
	count(NIC_CNT_PROBE_REPLY, 1);
	return XDP_TX;
}

/* ---- Sender role: the send QP's rings (callers hold sq->lock) ------------ */

#define BM_TEST(bm, psn) (((bm)[RING_WORD(psn)] >> RING_BIT(psn)) & 1)
#define BM_SET(bm, psn) ((bm)[RING_WORD(psn)] |= 1ULL << RING_BIT(psn))

/* The cumulative PSN: acknowledge [snd_una, cum), cum at most snd_nxt,
 * clearing the three rings there (their invariant) and moving snd_una to cum.
 * Returns how many of them were not acknowledged yet. One word per step; each
 * step starts from snd_una as stored, not from a register carried over: the
 * verifier then sees one state per step instead of following each step's
 * branches into the next ones (it did, and hit its 1M-instruction limit). */
static __always_inline __u32 sq_cum_ack(struct nic_sq *sq, __u32 cum)
{
	__u32 newly = 0;
	int i;

	for (i = 0; i < NIC_BITMAP_WORDS + 1; i++) {
		__u32 una = sq->snd_una, w = RING_WORD(una), b = RING_BIT(una);
		__s32 left = MRC_PSN_DIFF(cum, una);
		__u32 k = 64 - b;
		__u64 mask;

		if (left <= 0)
			break;
		if (k > (__u32)left)
			k = left;
		mask = k >= 64 ? ~0ULL : ((1ULL << k) - 1) << b;
		newly += popcount64(mask & ~sq->acked[w]);
		sq->acked[w] &= ~mask;
		sq->echoed[w] &= ~mask;
		sq->retx[w] &= ~mask;
		sq->snd_una = (una + k) & MRC_PSN_MASK;
	}
	return newly;
}

/* Move snd_una over the acknowledged run that starts at it, clearing the
 * run's bits in the three rings (as ring_advance does for the receiver). */
static __always_inline void sq_advance(struct nic_sq *sq)
{
	__u32 una = sq->snd_una;
	int i;

	for (i = 0; i < NIC_BITMAP_WORDS + 1; i++) {
		__u32 w = RING_WORD(una), b = RING_BIT(una);
		__u64 bits = sq->acked[w] >> b;
		__u64 run = (~bits & (bits + 1)) - 1;
		__u32 n = popcount64(run);

		if (n == 0)
			break;
		sq->acked[w] &= ~(run << b);
		sq->echoed[w] &= ~(run << b);
		sq->retx[w] &= ~(run << b);
		una = (una + n) & MRC_PSN_MASK;
		if (b + n < 64)
			break;
	}
	sq->snd_una = una;
}

/* A SACK bitmap (bit i: PSN base + i received), any base: the bits inside
 * [snd_una, snd_nxt) are marked acknowledged. Returns how many were new. */
static __always_inline __u32 sq_sack_bits(struct nic_sq *sq, __u32 base, __u64 bits)
{
	__s32 off = MRC_PSN_DIFF(base, sq->snd_una), lim;
	__u32 w, w1, b, newly;
	__u64 lo, hi;

	if (off < 0) {
		if (off <= -64)
			return 0;
		bits >>= -off;
		base = sq->snd_una;
	}
	lim = MRC_PSN_DIFF(sq->snd_nxt, base);
	if (lim <= 0)
		return 0;
	if (lim < 64)
		bits &= (1ULL << lim) - 1;
	w = RING_WORD(base);
	b = RING_BIT(base);
	w1 = (w + 1) & (NIC_BITMAP_WORDS - 1);
	lo = bits << b;
	hi = b ? bits >> (64 - b) : 0;
	newly = popcount64(lo & ~sq->acked[w]) + popcount64(hi & ~sq->acked[w1]);
	sq->acked[w] |= lo;
	sq->acked[w1] |= hi;
	return newly;
}

/* Queue a PSN for retransmission with the EV it was lost on. 0 if the queue
 * is full (counted; the daemon's timeout will resend it). */
static __always_inline int sq_queue(struct nic_sq *sq, __u32 psn, __u32 ev, __u8 cause,
				    __u8 reason)
{
	struct nic_retx *r;

	if (sq->retx_tail - sq->retx_head >= NIC_RETX_SLOTS) {
		sq->stats.retx_overflow++;
		return 0;
	}
	r = &sq->retxq[sq->retx_tail & (NIC_RETX_SLOTS - 1)];
	r->psn = psn;
	r->ev = ev;
	r->cause = cause;
	r->nack_reason = reason;
	sq->retx_tail++;
	BM_SET(sq->retx, psn);
	sq->stats.retx_queued++;
	return 1;
}

/*
 * The loss walk (nic_maps.h, "Loss detection"): the SACK of psn, sent on ev
 * at tx_ts, has arrived; every earlier packet on ev that is still
 * unacknowledged is lost. Follows prev_psn from psn's entry, which must be the
 * transmission the SACK echoes. Lost PSNs are queued and listed in sc.
 */
static __always_inline void loss_walk(struct nic_sq *sq, struct nic_tx_ring *ring,
				      struct nic_ack_scratch *sc, __u32 psn, __u32 ev,
				      __u64 tx_ts)
{
	struct nic_tx_pkt *e = &ring->pkts[RING_POS(psn)];
	__u32 n = 0;
	int i;

	if (e->psn != psn || e->ev != ev || e->tx_ts != tx_ts)
		return; /* not the transmission this SACK echoes (or not recorded) */
	for (i = 0; i < NIC_LOSS_WALK_MAX; i++) {
		struct nic_tx_pkt *pe;
		__u32 prev = e->prev_psn & MRC_PSN_MASK;

		if (!(e->flags & NIC_TX_F_PREV))
			break;
		if (MRC_PSN_DIFF(prev, sq->snd_una) < 0 || MRC_PSN_DIFF(prev, sq->snd_nxt) >= 0)
			break; /* acknowledged by the cumulative PSN, or not sent */
		pe = &ring->pkts[RING_POS(prev)];
		if (pe->psn != prev || pe->ev != ev || pe->tx_ts > e->tx_ts)
			break; /* resent since, on another EV or later */
		if (BM_TEST(sq->acked, prev) || BM_TEST(sq->retx, prev))
			break; /* an earlier walk (or NACK) has been here */
		if (!sq_queue(sq, prev, ev, NIC_RETX_LOST, 0))
			break;
		sc->lost[i].psn = prev;
		sc->lost[i].tx_ts = pe->tx_ts;
		n++;
		e = pe;
	}
	sq->stats.lost_pkts += n;
	sc->n_lost = n;
}

/*
 * One pass of the head scan over at most NIC_HEAD_SCAN PSNs from *at: the
 * unacknowledged, unqueued ones whose latest transmission left before
 * `before` are lost (queued, listed in sc.head). Retransmissions sent lately
 * are passed over: later first transmissions may be old. With skip_retx,
 * every retransmission is (the cursor pass: what was resent is the first
 * pass's and the loss walk's). Returns 1 where no later PSN can be found
 * lost now: at a first transmission sent too recently (they leave in PSN
 * order, so the rest are newer), at snd_nxt, or with the queue full; *at is
 * where it stopped.
 */
static __always_inline int head_pass(struct nic_sq *sq, struct nic_tx_ring *ring,
				     struct nic_ack_scratch *sc, __u32 *at, __u64 before,
				     int skip_retx)
{
	__u32 psn = *at, n = sc->n_head;
	int i, done = 0;

	for (i = 0; i < NIC_HEAD_SCAN; i++, psn = (psn + 1) & MRC_PSN_MASK) {
		struct nic_tx_pkt *e = &ring->pkts[RING_POS(psn)];
		struct nic_lost *l;

		if (MRC_PSN_DIFF(psn, sq->snd_nxt) >= 0 || e->psn != psn) {
			done = 1; /* beyond what was sent, or not recorded */
			break;
		}
		if (BM_TEST(sq->acked, psn) || BM_TEST(sq->retx, psn))
			continue;
		if (e->flags & NIC_TX_F_RETX && (skip_retx || e->tx_ts >= before))
			continue;
		if (e->tx_ts >= before || !sq_queue(sq, psn, e->ev, NIC_RETX_LOST, 0)) {
			done = 1;
			break;
		}
		l = &sc->head[n & (NIC_HEAD_LOST - 1)];
		l->psn = psn;
		l->ev = e->ev;
		l->tx_ts = e->tx_ts;
		n++;
	}
	sq->stats.lost_pkts += n - sc->n_head;
	sc->n_head = n;
	*at = psn;
	return done;
}

/*
 * The head scan (nic_maps.h, "Loss detection"): a SACK echoes a transmission
 * sent at echo_ts; the PSNs of the window last sent more than reo_wnd_ns
 * before it, and neither acknowledged nor queued, are lost. A first pass
 * looks at the head (snd_una on); when all of it is examined, a second one
 * goes on from where the last scan stopped (struct nic_sq.scan_psn), so that
 * the losses of a whole window are found in a few SACKs, not one head's worth
 * per round trip.
 */
static __always_inline void head_scan(struct nic_sq *sq, struct nic_tx_ring *ring,
				      struct nic_ack_scratch *sc, __u64 echo_ts, __u64 now)
{
	__u32 psn = sq->snd_una;
	__u64 before, wnd = sq->reo_wnd_ns, rtt, recent = sq->rtt_recent_ns;

	if (!wnd || !echo_ts || echo_ts > now)
		return; /* off, or no timestamp of ours */
	/* Queues grow the RTT and the differences between paths with it: the
	 * window is at least the QP's largest recent round trip, this SACK's
	 * included. A SACK that came back fast through an empty queue must not
	 * condemn a packet still waiting in a full one. A sample counts for at
	 * most NIC_RTT_RECENT_CAP reorder windows: it is forgotten per SACK, not
	 * per second, so a hiccup's sample must not switch the scan off for
	 * hundreds of SACKs (or for good, if no more come). */
	rtt = now - echo_ts;
	if (rtt > NIC_RTT_RECENT_CAP * wnd)
		rtt = NIC_RTT_RECENT_CAP * wnd;
	if (rtt >= recent)
		recent = rtt;
	else
		recent -= (recent - rtt) >> NIC_RTT_RECENT_SHIFT;
	sq->rtt_recent_ns = recent > 0xffffffffULL ? 0xffffffff : (__u32)recent;
	if (recent > wnd)
		wnd = recent;
	if (echo_ts <= wnd)
		return;
	before = echo_ts - wnd;
	if (!head_pass(sq, ring, sc, &psn, before, 0)) {
		if (MRC_PSN_DIFF(sq->scan_psn, psn) > 0 &&
		    MRC_PSN_DIFF(sq->scan_psn, sq->snd_nxt) <= 0)
			psn = sq->scan_psn;
		head_pass(sq, ring, sc, &psn, before, 1);
	}
	sq->scan_psn = psn;
}

/* ---- Sender role: EV feedback (callers hold ev->lock) -------------------- */

static __always_inline void ev_rtt(struct nic_ev *ev, __u64 now, __u64 tx_ts)
{
	__u64 sample;

	if (!tx_ts || tx_ts > now)
		return; /* no timestamp, or not ours */
	sample = now - tx_ts;
	ev->rtt_last = sample;
	if (!ev->rtt_min || sample < ev->rtt_min)
		ev->rtt_min = sample;
	ev->srtt = ev->srtt ? (7 * ev->srtt + sample) / 8 : sample;
	ev->stats.rtt_samples++;
}

/* The state after an expired SKIP is GOOD (it expires lazily). */
static __always_inline __u32 ev_state_now(const struct nic_ev *ev, __u64 now)
{
	if (ev->state == NIC_EVS_SKIP && now >= ev->skip_until)
		return NIC_EVS_GOOD;
	return ev->state;
}

/* Skip a GOOD (or SKIP) EV for NIC_SKIP_NS; worse states stay. */
static __always_inline __u32 ev_skip(struct nic_ev *ev, __u32 state, __u64 now)
{
	if (state != NIC_EVS_GOOD && state != NIC_EVS_SKIP)
		return state;
	ev->skip_until = now + NIC_SKIP_NS;
	ev->stats.skips++;
	return NIC_EVS_SKIP;
}

/* ---- Sender role: events -------------------------------------------------- */

/* Every event record is 40 bytes (nic_maps.h); the counters say if it fit. */
static __always_inline void emit(void *rec)
{
	if (nic_events.ringbuf_output(rec, sizeof(struct nic_event), 0) == 0)
		count(NIC_CNT_EVENTS, 1);
	else
		count(NIC_CNT_EVENTS_LOST, 1);
}

static __always_inline void emit_ev_state(__u32 qpn, __u32 ev, __u32 old, __u32 new,
					  __u32 cause, __u32 psn, __u64 now)
{
	struct nic_ev_event e = {
		.type = NIC_EV_EV_STATE,
		.qpn = qpn,
		.ev = ev,
		.old_state = old,
		.new_state = new,
		.cause = cause,
		.psn = psn,
		.ts = now,
	};

	emit(&e);
}

/*
 * A PSN sent on EV `value` of QP qpn was lost silently (the head scan, a
 * timeout): the EV becomes ASSUMED_BAD (a DENIED one stays so), with an event
 * when its state changes. Called after the QP's lock; takes the EV's.
 */
static __always_inline void ev_lost_silently(__u32 qpn, __u32 value, __u32 cause, __u32 psn,
					     __u32 queued, __u64 now)
{
	struct nic_ev_key key = {.qpn = qpn, .ev = value};
	struct nic_ev *ev = value ? nic_evs.lookup(&key) : NULL;
	__u32 old, st;

	if (!ev)
		return;
	bpf_spin_lock(&ev->lock);
	old = ev->state;
	st = ev_state_now(ev, now);
	ev->stats.lost_pkts++;
	ev->stats.retx_queued += queued;
	if (st != NIC_EVS_DENIED)
		st = NIC_EVS_ASSUMED_BAD;
	ev->state = st;
	bpf_spin_unlock(&ev->lock);
	if (old != st)
		emit_ev_state(qpn, value, old, st, cause, psn, now);
}

/* The head scan's losses: their EVs, then a loss record each. */
static __always_inline void head_losses(__u32 qpn, __u32 ack_psn, struct nic_ack_scratch *sc,
					__u64 now)
{
	int i;

	for (i = 0; i < NIC_HEAD_LOST; i++) {
		struct nic_lost *l = &sc->head[i];
		struct nic_loss_event e = {.type = NIC_EV_LOSS, .qpn = qpn};

		if (i >= sc->n_head)
			break;
		ev_lost_silently(qpn, l->ev, NIC_EVC_LOSS, l->psn, 1, now);
		e.psn = l->psn;
		e.ev = l->ev;
		e.tx_ts = l->tx_ts;
		e.ack_psn = ack_psn;
		e.ts = now;
		emit(&e);
	}
}

/* ---- Sender role: SACK and NACK ------------------------------------------ */

enum ack_kind {
	ACK_SACK = 1,
	ACK_RETRY, /* retryable NACK: resend BTH.psn */
	ACK_FATAL, /* NACK(UNEXP_EVENT): the QP goes to ERR */
};

enum ack_verdict {
	ACK_DONE = 0,
	ACK_RANGE,  /* acknowledges PSNs never sent: drop */
	ACK_CONFIG, /* more in flight than the window: the QP is misconfigured */
};

/* The syndrome and the reason must agree (docs/wire-format.md, NACK reasons). */
static __always_inline int ack_kind(__u32 syndrome, __u32 reason)
{
	switch (syndrome) {
	case MRC_AETH_ACK:
		return reason == MRC_NACK_NONE ? ACK_SACK : 0;
	case MRC_AETH_NAK_PSN_SEQ:
		switch (reason) {
		case MRC_NACK_TRIMMED:
		case MRC_NACK_TRIMMED_LASTHOP:
		case MRC_NACK_NO_BITMAP:
		case MRC_NACK_NO_PKT_BUFFER:
		case MRC_NACK_NO_RESOURCE:
		case MRC_NACK_PSN_OOR_WINDOW:
			return ACK_RETRY;
		}
		return 0;
	case MRC_AETH_NAK_INV_REQ:
	case MRC_AETH_NAK_REM_ACCESS:
	case MRC_AETH_NAK_REM_OP:
		return reason == MRC_NACK_UNEXP_EVENT ? ACK_FATAL : 0;
	}
	return 0;
}

/* What runs the send engine: a kick, or an ACK of an engine QP (nic_xdp). */
struct engine_req {
	__u32 qpn;   /* the send QP */
	__u32 plane; /* an ACK: the plane of the port it came in on; a kick: NIC_MAX_PLANES */
	__u32 kick;  /* 1: a kick (BPF_PROG_RUN), 0: an ACK */
};

/* nic_rx's verdict when the send engine must run for req (not an XDP action). */
#define ENGINE_RUN 0x100

/*
 * Send engine hook. An ACK ends here once processed. For a QP the send engine
 * serves, the engine runs next and may turn this frame into the next data
 * packet (docs/fastpath.md, "Clock"). Otherwise the ACK is consumed: XDP_DROP,
 * since nothing in the stack wants it.
 */
static __always_inline int ack_done(struct mrc_pkt *p, struct engine_req *req, __u32 qpn,
				    __u32 engine, __u32 changed)
{
	count(changed ? NIC_CNT_ACK_CONSUMED : NIC_CNT_ACK_STALE, 1);
	if (!engine)
		return XDP_DROP;
	req->qpn = qpn;
	req->plane = (bpf_ntohl(p->ip->daddr) - NIC_HOST_NET) >> 8; /* checked by addrs_match */
	req->kick = 0;
	return ENGINE_RUN;
}

/*
 * Congestion signals (struct nic_sq_cc; sq->lock held), for an ACK whose
 * feedback is taken: n PSNs it newly acknowledged, by NSCC's case (ECN or
 * not, RTT below the target or not), and trims. A few adds on the ACK path.
 */
static __always_inline void cc_account(struct nic_sq *sq, int kind, __u32 reason, __u32 flags,
				       __u32 n, __u64 echo_ts, __u64 now)
{
	struct nic_sq_cc *cc = &sq->cc;
	__u64 target = cc->rtt_target_ns, rtt;
	int ecn = flags & MRC_ACK_F_ECN;

	if (kind != ACK_SACK) {
		cc->trims += reason == MRC_NACK_TRIMMED;
		cc->trims_lasthop += reason == MRC_NACK_TRIMMED_LASTHOP;
		return;
	}
	cc->acks++;
	cc->ecn_acks += !!ecn;
	if (!echo_ts || echo_ts > now) { /* no RTT sample: low delay, no headroom */
		if (ecn)
			cc->pkts_ecn_lo += n;
		else
			cc->pkts_lo += n;
		return;
	}
	rtt = now - echo_ts;
	cc->rtt_samples++;
	cc->rtt_sum_ns += rtt;
	if (!cc->rtt_min_ns || rtt < cc->rtt_min_ns)
		cc->rtt_min_ns = rtt;
	if (rtt >= target) {
		if (ecn)
			cc->pkts_ecn_hi += n;
		else
			cc->pkts_hi += n;
	} else if (ecn) {
		cc->pkts_ecn_lo += n;
	} else {
		cc->pkts_lo += n;
		cc->headroom += (__u64)n * (target - rtt);
	}
}

static __always_inline int rx_ack(struct xdp_md *ctx, struct mrc_pkt *p, struct engine_req *req)
{
	struct nic_ack_scratch *sc;
	struct mrc_ack_ext *ack;
	struct mrc_aeth *aeth;
	struct nic_tx_ring *ring;
	struct nic_sq *sq;
	struct nic_ev *ev;
	struct nic_ev_key key = {};
	__u32 qpn, psn, cum, base, syndrome, reason, flags, echo_ev, ports, ring_id, zero = 0;
	__u32 old = 0, st = 0, i, n;
	__u64 bits, echo_ts, now;
	__s32 inflight;
	int kind, skip = 0;

	if (p->udp_payload < MRC_ACK_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_SHORT);
	if (p->udp_payload > MRC_ACK_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_BAD_LEN);
	aeth = parse_aeth(&p->c);
	if (!aeth)
		return drop(NIC_CNT_DROP_TRUNCATED);
	ack = parse_ack_ext(&p->c);
	if (!ack)
		return drop(NIC_CNT_DROP_TRUNCATED);

	syndrome = bpf_ntohl(aeth->smsn) >> MRC_AETH_SYN_SHIFT;
	reason = ack->nack_reason;
	kind = ack_kind(syndrome, reason);
	if (!kind)
		return drop(NIC_CNT_DROP_BAD_ACK);
	qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	psn = bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK;
	cum = bpf_ntohl(ack->mpr_cum) & MRC_ACK_CUM_PSN_MASK;
	base = bpf_ntohl(ack->sack_base) & MRC_ACK_SACK_PSN_MASK;
	bits = bpf_ntohll(ack->sack_bitmap);
	echo_ts = bpf_ntohll(ack->echo_ts);
	echo_ev = bpf_ntohs(ack->echo_ev);
	flags = ack->flags;
	ports = bpf_ntohl(ack->port_bitmap);

	sq = nic_tx_qps.lookup(&qpn);
	if (!sq)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (!addrs_match(sq->local_host, sq->peer_host, p->ip->saddr, p->ip->daddr))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (sq->state != NIC_QPS_RTS && sq->state != NIC_QPS_SQD)
		return drop(NIC_CNT_DROP_QP_STATE);
	if (sq->mpr == 0 || sq->mpr > NIC_MPR_MAX)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	ring_id = sq->ring;
	ring = nic_tx_ring.lookup(&ring_id);
	if (!ring)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	sc = nic_ack_scratch.lookup(&zero);
	if (!sc)
		return drop(NIC_CNT_DROP_XDP_ERR); /* cannot happen: a 1-entry array */
	key.qpn = qpn;
	key.ev = echo_ev;
	ev = nic_evs.lookup(&key);
	now = bpf_ktime_get_ns();
	sc->verdict = ACK_DONE;
	sc->newly = 0;
	sc->fb = 0;
	sc->queued = 0;
	sc->fatal = 0;
	sc->n_lost = 0;
	sc->n_head = 0;

	bpf_spin_lock(&sq->lock);
	inflight = MRC_PSN_DIFF(sq->snd_nxt, sq->snd_una);
	if (inflight < 0 || inflight > (__s32)(sq->mpr * MRC_MPR_UNIT)) {
		sc->verdict = ACK_CONFIG;
		goto unlock;
	}
	if (MRC_PSN_DIFF(psn, sq->snd_nxt) >= 0 || MRC_PSN_DIFF(cum, sq->snd_nxt) > 0) {
		sc->verdict = ACK_RANGE;
		goto unlock;
	}
	if (kind == ACK_SACK)
		sq->stats.sacks++;
	else
		sq->stats.nacks++;

	/* Feedback: once per transmission of BTH.psn (the echoed bit). */
	if (MRC_PSN_DIFF(psn, sq->snd_una) < 0) {
		sq->stats.stale_acks++;
	} else if (BM_TEST(sq->echoed, psn)) {
		sq->stats.dup_acks++;
	} else {
		BM_SET(sq->echoed, psn);
		sc->fb = 1;
		sq->peer_ports = ports;
	}

	/* Acknowledgements: the cumulative PSN, the bitmap, a SACK's own PSN. */
	n = sq_cum_ack(sq, cum);
	n += sq_sack_bits(sq, base, bits);
	if (kind == ACK_SACK && MRC_PSN_DIFF(psn, sq->snd_una) >= 0 &&
	    !BM_TEST(sq->acked, psn)) {
		BM_SET(sq->acked, psn);
		n++;
	}
	sq_advance(sq);
	sq->stats.acked_pkts += n;
	sc->newly = n;
	if (sc->fb)
		cc_account(sq, kind, reason, flags, n, echo_ts, now);

	if (kind == ACK_RETRY) {
		/* Resend it, unless it has been acknowledged or queued meanwhile. */
		if (MRC_PSN_DIFF(psn, sq->snd_una) >= 0 && !BM_TEST(sq->acked, psn) &&
		    !BM_TEST(sq->retx, psn))
			sc->queued = sq_queue(sq, psn, echo_ev, NIC_RETX_NACK, reason);
	} else if (kind == ACK_FATAL) {
		sq->state = NIC_QPS_ERR;
		sq->stats.fatal_nacks++;
		sc->fatal = 1;
	} else if (sc->fb) {
		loss_walk(sq, ring, sc, psn, echo_ev, echo_ts);
		head_scan(sq, ring, sc, echo_ts, now);
	}
unlock:
	bpf_spin_unlock(&sq->lock);

	if (sc->verdict == ACK_CONFIG)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	if (sc->verdict == ACK_RANGE)
		return drop(NIC_CNT_DROP_ACK_RANGE);
	n = sc->n_lost;
	if (n > NIC_LOSS_WALK_MAX)
		n = NIC_LOSS_WALK_MAX;

	/* The echoed EV's feedback. */
	if (sc->fb && ev) {
		bpf_spin_lock(&ev->lock);
		old = ev->state;
		st = ev_state_now(ev, now);
		switch (reason) {
		case MRC_NACK_NONE:
			ev->stats.acks++;
			ev_rtt(ev, now, echo_ts);
			break;
		case MRC_NACK_TRIMMED:
			ev->stats.nack_trimmed++;
			skip = 1;
			break;
		case MRC_NACK_TRIMMED_LASTHOP:
			ev->stats.nack_trimmed_lasthop++;
			break;
		case MRC_NACK_PSN_OOR_WINDOW:
			ev->stats.nack_oor++;
			break;
		case MRC_NACK_UNEXP_EVENT:
			ev->stats.nack_fatal++;
			break;
		default:
			ev->stats.nack_no_resource++;
			break;
		}
		if (flags & MRC_ACK_F_ECN) {
			ev->stats.ecn_marks++;
			skip = 1;
		}
		if (skip)
			st = ev_skip(ev, st, now);
		ev->stats.retx_queued += sc->queued + n;
		if (n) {
			ev->stats.lost_pkts += n;
			if (st != NIC_EVS_DENIED)
				st = NIC_EVS_ASSUMED_BAD;
		}
		ev->state = st;
		bpf_spin_unlock(&ev->lock);
	} else if (sc->fb) {
		count(NIC_CNT_UNKNOWN_EV, 1);
	}

	/* Events, after the locks. */
	if (sc->fatal) {
		struct nic_qp_err_event e = {
			.type = NIC_EV_QP_ERR,
			.qpn = qpn,
			.psn = psn,
			.ev = echo_ev,
			.syndrome = syndrome,
			.reason = reason,
			.ts = now,
		};

		emit(&e);
	}
	if (n && old != st && st == NIC_EVS_ASSUMED_BAD)
		emit_ev_state(qpn, echo_ev, old, st, NIC_EVC_LOSS, sc->lost[0].psn, now);
	for (i = 0; i < NIC_LOSS_WALK_MAX; i++) {
		struct nic_loss_event e = {.type = NIC_EV_LOSS, .qpn = qpn, .ev = echo_ev};

		if (i >= n)
			break;
		e.psn = sc->lost[i].psn;
		e.tx_ts = sc->lost[i].tx_ts;
		e.ack_psn = psn;
		e.ts = now;
		emit(&e);
	}

	if (sc->n_head)
		head_losses(qpn, psn, sc, now);

	count(NIC_CNT_ACKED, sc->newly);
	count(NIC_CNT_LOST, n + sc->n_head);
	count(NIC_CNT_LOST_HEAD, sc->n_head);
	count(NIC_CNT_RETX_QUEUED, sc->queued + n + sc->n_head);
	return ack_done(p, req, qpn, sq->engine, sc->fb | sc->newly | sc->queued | sc->fatal);
}

/* ---- Sender role: PROBE_REPLY --------------------------------------------- */

/*
 * A PROBE_REPLY for one of our send QPs, from its peer: the probed EV's path
 * works both ways. An RTT sample for it, and an ASSUMED_BAD EV is GOOD again
 * (with an event). Whether and when to probe is the daemon's; so are DENIED
 * and UNKNOWN EVs, which a reply does not change. Consumed (XDP_DROP).
 */
static __always_inline int rx_probe_reply(struct xdp_md *ctx, struct mrc_pkt *p)
{
	struct mrc_probe_ext *pe;
	struct nic_ev_key key = {};
	struct nic_sq *sq;
	struct nic_ev *ev;
	__u32 qpn, old, st;
	__u64 now, tx_ts;
	int verdict = probe_len_ok(p);

	if (verdict >= 0)
		return verdict;
	pe = parse_probe_ext(&p->c);
	if (!pe)
		return drop(NIC_CNT_DROP_TRUNCATED);
	qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	sq = nic_tx_qps.lookup(&qpn);
	if (!sq)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (!addrs_match(sq->local_host, sq->peer_host, p->ip->saddr, p->ip->daddr))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (sq->state != NIC_QPS_RTS && sq->state != NIC_QPS_SQD)
		return drop(NIC_CNT_DROP_QP_STATE);
	key.qpn = qpn;
	key.ev = bpf_ntohs(pe->ev);
	ev = nic_evs.lookup(&key);
	if (!ev) {
		count(NIC_CNT_UNKNOWN_EV, 1);
		count(NIC_CNT_PROBE_REPLY_CONSUMED, 1);
		return XDP_DROP;
	}
	tx_ts = bpf_ntohll(pe->tx_ts);
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&ev->lock);
	old = ev->state;
	st = ev_state_now(ev, now);
	ev->stats.probe_replies++;
	ev_rtt(ev, now, tx_ts);
	if (st == NIC_EVS_ASSUMED_BAD)
		st = NIC_EVS_GOOD;
	if (pe->flags & MRC_ACK_F_ECN) {
		ev->stats.ecn_marks++;
		st = ev_skip(ev, st, now);
	}
	ev->state = st;
	bpf_spin_unlock(&ev->lock);

	if (old == NIC_EVS_ASSUMED_BAD && st != NIC_EVS_ASSUMED_BAD)
		emit_ev_state(qpn, key.ev, old, st, NIC_EVC_PROBE_REPLY,
			      bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK, now);
	count(NIC_CNT_PROBE_REPLY_CONSUMED, 1);
	return XDP_DROP;
}

/* ---- The send engine ------------------------------------------------------- */

/* The loopback device: BPF_PROG_RUN's ingress device in every namespace (the
 * kernel's LOOPBACK_IFINDEX). No NIC program is attached to lo, so a frame
 * that arrives "from lo" is a test run. */
#define LOOPBACK_IFINDEX 1

/* Retransmit queue entries one engine run may pop: stale ones (acknowledged
 * meanwhile) are skipped, up to this many; the rest wait for the next run. */
#define ENGINE_RETX_POPS 8

/*
 * How long an EV stays with the CPU that last sent on it, in ns. The loss
 * walk (nic_maps.h) relies on the packets of one EV reaching the wire in the
 * order the engine recorded them. On one CPU they do. But the ports of a QP
 * run on several CPUs, and a packet waits in a per-CPU bulk queue (XDP_TX's
 * or the devmap's) until the end of the NAPI poll or kick batch that made it:
 * a packet recorded later on another CPU can reach the wire first, and the
 * walk would take the earlier one for lost (measured here: tens of false
 * losses per 32 MiB, every EV ASSUMED_BAD within seconds). So an EV another
 * CPU sent on less than this long ago is skipped. A poll or batch is at most
 * 64 frames, a few us each: 200 us covers it with room.
 */
#ifndef ENGINE_EV_HOLD_NS
#define ENGINE_EV_HOLD_NS 200000
#endif

/* EVs one engine run looks at, at most. A run that finds none usable moves
 * the cursor past them, so that a long run of unusable EVs (a plane down in a
 * profile ordered by plane) costs a few idle runs, not a walk of the whole
 * profile per packet (and not the verifier's work of NIC_MAX_QP_EVS steps). */
#define ENGINE_EV_TRIES 32

/* Frame bytes before the payload of a WRITE / WRITE_IMM packet. */
#define DATA_HDRS_LEN (ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_WRITE_HDRS_LEN)         /* 86 */
#define DATA_IMM_HDRS_LEN (ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_WRITE_IMM_HDRS_LEN) /* 90 */
/* The frame of a full WRITE packet: the size a frame is grown to first. */
#define DATA_FRAME_FULL (DATA_HDRS_LEN + NIC_SEG_SIZE + MRC_ICRC_LEN)

enum tx_plan {
	TX_NONE = 0,
	TX_NEW,  /* the next segment of WQE wqe_sent */
	TX_RETX, /* a PSN from the retransmit queue */
};

#define BM_CLEAR(bm, psn) ((bm)[RING_WORD(psn)] &= ~(1ULL << RING_BIT(psn)))

/* The headers of a data packet, as wire.data_packet lays them out: immdt is
 * sent only on the last packet of a WRITE_WITH_IMM; otherwise dext follows
 * reth directly (engine_run stores the two parts separately). */
struct data_hdrs {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct mrc_bth bth;
	struct mrc_reth reth;
	struct mrc_immdt immdt;
	struct mrc_data_ext dext;
} __attribute__((packed, aligned(2)));
_Static_assert(sizeof(struct data_hdrs) == DATA_IMM_HDRS_LEN, "struct data_hdrs size");
_Static_assert(__builtin_offsetof(struct data_hdrs, immdt) == DATA_HDRS_LEN - 16,
	       "struct data_hdrs: immdt must follow reth");

/* Is a frame a kick (struct nic_kick)? Fills req if so, and returns 1 + its
 * op (enum nic_kick_op) and *arg; 0 if it is not a kick. */
static __always_inline int kick_of(struct xdp_md *ctx, struct engine_req *req, __u32 *arg,
				   __u64 *age_ns)
{
	void *data = (void *)(long)ctx->data;
	struct nic_kick *k = (void *)(long)ctx->data_meta;

	if (ctx->ingress_ifindex != LOOPBACK_IFINDEX)
		return 0;
	if ((void *)(k + 1) > data)
		return 0; /* no metadata: an ordinary test run */
	req->qpn = k->qpn & MRC_BTH_QPN_MASK;
	req->plane = NIC_MAX_PLANES;
	req->kick = 1;
	*arg = k->arg;
	*age_ns = k->age_ns;
	if (k->op == NIC_KICK_TIMEOUT || k->op == NIC_KICK_CWND || k->op == NIC_KICK_EV_REPLACE)
		return 1 + k->op;
	return 1 + NIC_KICK_SEND;
}

/* A kick that sent nothing counts once; an ACK was counted already. */
static __always_inline int engine_idle(const struct engine_req *req, __u32 reason)
{
	if (req->kick)
		count(reason, 1);
	return XDP_DROP;
}

/* May a packet leave on this EV now, from this CPU? GOOD, or SKIP whose time
 * is over, on a plane up at both ends (planes: the local and the peer's port
 * bitmaps), and not held by another CPU (ENGINE_EV_HOLD_NS). Read without the
 * EV's lock: a stale view costs one packet on a worse EV (or, in a race of
 * two CPUs for one EV, the order the hold protects, rarely). */
static __always_inline int ev_usable(const struct nic_ev *e, __u64 now, __u32 planes, __u32 cpu)
{
	__u32 st = e->state, plane = e->plane;

	if (plane >= NIC_MAX_PLANES || !((planes >> plane) & 1))
		return 0;
	if (e->last_tx_cpu != cpu && e->stats.tx_pkts &&
	    (__s64)(now - e->last_tx_ts) < ENGINE_EV_HOLD_NS)
		return 0;
	if (st == NIC_EVS_GOOD)
		return 1;
	return st == NIC_EVS_SKIP && now >= e->skip_until;
}

/* One usable EV: its state, value, position in the profile. */
struct ev_pick {
	struct nic_ev *e;
	__u32 ev;
	__u32 idx;
};

/*
 * The next usable EVs of the QP's round robin, from the cursor (sq->ev_next)
 * on: p1, the first; with want 2, p2, a second one, on another plane than
 * `avoid` if one is usable within the search (else just the next usable EV).
 * Returns how many were found. avoid is the plane of a lost packet that is to
 * be resent (NIC_MAX_PLANES: none): the loss may be the plane's (a blackholed
 * switch or link takes every EV it carries), so its other EVs are the next
 * ones lost. Read without the lock; the cursor moves under it when a packet
 * is sent (see engine_run), or here past ENGINE_EV_TRIES unusable EVs. Two
 * CPUs serving one QP at the same moment may pick the same EV: the round
 * robin is exact on one CPU, approximate across (ENGINE_EV_HOLD_NS keeps the
 * order that matters).
 */
static __always_inline __u32 pick_evs(struct nic_sq *sq, __u32 qpn, __u32 want, __u32 planes,
				      __u32 avoid, __u64 now, struct ev_pick *p1,
				      struct ev_pick *p2)
{
	struct nic_ev_key key = {.qpn = qpn};
	__u32 n = sq->n_evs, start, found = 0, cpu = bpf_get_smp_processor_id();
	int i;

	if (n == 0 || n > NIC_MAX_QP_EVS)
		return 0;
	start = *(volatile __u32 *)&sq->ev_next % n;
	for (i = 0; i < ENGINE_EV_TRIES; i++) {
		__u32 idx = start + i;
		struct nic_ev *e;

		if (i >= n)
			break;
		if (idx >= n)
			idx -= n;
		key.ev = sq->evs[idx & (NIC_MAX_QP_EVS - 1)];
		e = nic_evs.lookup(&key);
		if (!e || !ev_usable(e, now, planes, cpu))
			continue;
		if (found == 0) {
			p1->e = e;
			p1->ev = key.ev;
			p1->idx = idx;
			found = 1;
			if (want < 2 || (avoid < NIC_MAX_PLANES && e->plane != avoid))
				break; /* p1 will do, whatever is resent */
			continue;
		}
		/* p2: the next usable EV as a fallback, replaced by one off `avoid` */
		if (found == 1 || e->plane != avoid) {
			p2->e = e;
			p2->ev = key.ev;
			p2->idx = idx;
			found = 2;
		}
		if (avoid >= NIC_MAX_PLANES || e->plane != avoid)
			break;
	}
	if (!found && n > ENGINE_EV_TRIES)
		sq->ev_next = (start + ENGINE_EV_TRIES) % n;
	return found;
}

/* The plane of the EV that lost the next queued retransmission, read without
 * the lock (a stale view costs one retransmission on a worse plane), or
 * NIC_MAX_PLANES when no retransmission is queued or its EV is gone. */
static __always_inline __u32 retx_plane(struct nic_sq *sq, __u32 qpn)
{
	__u32 head = *(volatile __u32 *)&sq->retx_head;
	struct nic_ev_key key = {.qpn = qpn};
	struct nic_ev *e;

	if (head == *(volatile __u32 *)&sq->retx_tail)
		return NIC_MAX_PLANES;
	key.ev = sq->retxq[head & (NIC_RETX_SLOTS - 1)].ev;
	e = key.ev ? nic_evs.lookup(&key) : NULL;
	return e ? e->plane : NIC_MAX_PLANES;
}

/* Payload bytes of the segment at byte `off` of a WQE of `len` bytes: a full
 * packet's NIC_SEG_SIZE, or what is left (0 for a zero-length WRITE). */
static __always_inline __u32 segment_len(__u32 len, __u32 off)
{
	__u32 seg = len > off ? len - off : 0;

	return seg > NIC_SEG_SIZE ? NIC_SEG_SIZE : seg;
}

/* PSNs acknowledged above snd_una (sq->lock held): the acked ring's bits. */
static __always_inline __u32 sq_acked_count(const struct nic_sq *sq)
{
	__u32 n = 0;
	int i;

#pragma unroll
	for (i = 0; i < NIC_BITMAP_WORDS; i++)
		n += popcount64(sq->acked[i]);
	return n;
}

/* Completions (sq->lock held): every WQE whose last PSN snd_una has passed,
 * in posting order, gathered in sc (wr_id and len are read now: user space
 * may reuse the slot as soon as wqe_done passes it). */
static __always_inline void engine_complete(struct nic_sq *sq, const struct nic_wq *wq,
					    struct nic_tx_scratch *sc, __u32 qpn)
{
	__u32 n = 0;
	int i;

	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		__u32 k = sq->wqe_done, slot = k & (NIC_MSG_SLOTS - 1);
		__u32 last = sq->wqe_last_psn[slot] & MRC_PSN_MASK;
		struct nic_send_event *e = &sc->done[i];

		if (k == sq->wqe_sent)
			break;
		if (MRC_PSN_DIFF(sq->snd_una, last) <= 0)
			break;
		e->type = NIC_EV_SEND_DONE;
		e->qpn = qpn;
		e->msn = (sq->snd_msn - (sq->wqe_sent - k)) & MRC_DATA_MSN_MASK;
		e->last_psn = last;
		e->wr_id = wq->wqes[slot].wr_id;
		e->len = wq->wqes[slot].len;
		e->wqe = k;
		sq->wqe_done = k + 1;
		n++;
	}
	sq->tx_stats.wqes_done += n;
	sc->n_done = n;
}

/*
 * What to send (sq->lock held), into sc: a queued retransmission first (the
 * protocol of nic_maps.h: skip it if acknowledged or out of [snd_una,
 * snd_nxt), else clear its retx and echoed bits), else, for a QP in RTS, the
 * next segment of WQE wqe_sent if the window and cwnd have room: PSN snd_nxt,
 * and the WQE is done with when this is its last segment.
 */
static __always_inline void engine_plan(struct nic_sq *sq, const struct nic_wq *wq,
					const struct nic_tx_ring *ring, struct nic_tx_scratch *sc)
{
	__u32 window = sq->mpr * MRC_MPR_UNIT, cwnd = sq->cwnd;
	__u32 k, slot, len, off, seg, psn;
	__s32 range;
	int i;

	for (i = 0; i < ENGINE_RETX_POPS; i++) {
		__u32 h = sq->retx_head;
		const struct nic_retx *r = &sq->retxq[h & (NIC_RETX_SLOTS - 1)];
		const struct nic_tx_pkt *t;

		if (h == sq->retx_tail)
			break;
		psn = r->psn & MRC_PSN_MASK;
		t = &ring->pkts[RING_POS(psn)];
		sq->retx_head = h + 1;
		if (MRC_PSN_DIFF(psn, sq->snd_una) < 0 || MRC_PSN_DIFF(psn, sq->snd_nxt) >= 0 ||
		    BM_TEST(sq->acked, psn) || t->psn != psn ||
		    t->wqe - sq->wqe_done > sq->wqe_sent - sq->wqe_done) {
			sq->tx_stats.retx_stale++;
			continue;
		}
		BM_CLEAR(sq->retx, psn);
		BM_CLEAR(sq->echoed, psn);
		sc->what = TX_RETX;
		sc->psn = psn;
		sc->lost_ev = r->ev;
		sc->wqe = t->wqe;
		sc->off = t->msg_off;
		sc->msn = (sq->snd_msn - (sq->wqe_sent - t->wqe)) & MRC_DATA_MSN_MASK;
		sq->tx_stats.retx_pkts++;
		return;
	}
	if (sq->state != NIC_QPS_RTS)
		return;
	k = sq->wqe_sent;
	if (*(volatile __u32 *)&wq->posted == k)
		return; /* nothing posted */
	range = MRC_PSN_DIFF(sq->snd_nxt, sq->snd_una);
	if (range < 0 || range >= (__s32)window ||
	    (cwnd && cwnd < window && (__u32)range - sq_acked_count(sq) >= cwnd)) {
		sc->full = 1;
		sq->tx_stats.window_full++;
		return;
	}
	slot = k & (NIC_MSG_SLOTS - 1);
	len = wq->wqes[slot].len;
	off = sq->wqe_off;
	seg = segment_len(len, off);
	psn = sq->snd_nxt & MRC_PSN_MASK;
	sq->snd_nxt = (psn + 1) & MRC_PSN_MASK;
	sc->what = TX_NEW;
	sc->psn = psn;
	sc->wqe = k;
	sc->off = off;
	sc->msn = sq->snd_msn & MRC_DATA_MSN_MASK;
	if (off + seg >= len) { /* its last segment */
		sq->wqe_last_psn[slot] = psn;
		sq->wqe_sent = k + 1;
		sq->wqe_off = 0;
		sq->snd_msn = (sq->snd_msn + 1) & MRC_DATA_MSN_MASK;
	} else {
		sq->wqe_off = off + seg;
	}
	sq->tx_stats.data_pkts++;
	sq->tx_stats.data_bytes += seg;
}

/* A WQE whose source cannot be read: the QP goes to ERR (a local error). */
static __always_inline int engine_bad_wqe(const struct engine_req *req, struct nic_sq *sq,
					  __u32 psn, __u64 now)
{
	struct nic_qp_err_event e = {
		.type = NIC_EV_QP_ERR,
		.qpn = req->qpn,
		.psn = psn,
		.ts = now,
	};

	bpf_spin_lock(&sq->lock);
	sq->state = NIC_QPS_ERR;
	bpf_spin_unlock(&sq->lock);
	emit(&e);
	count(NIC_CNT_TX_BAD_WQE, 1);
	return engine_idle(req, NIC_CNT_KICK_IDLE);
}

/*
 * The send engine: at most one data packet of QP req->qpn, built in this
 * frame. Returns XDP_TX or XDP_REDIRECT with the packet, else XDP_DROP.
 */
/*
 * A timeout kick (struct nic_kick, NIC_KICK_TIMEOUT): queue up to max of the
 * oldest PSNs in flight that are neither acknowledged nor queued and were
 * last sent age_ns ago or more, each with the EV of its latest transmission
 * (its resend goes out on another), and put those EVs in ASSUMED_BAD. It
 * sends nothing: the send kick that follows does. A path of its own, not a
 * step of engine_run: inside it the loops would multiply the verifier's
 * work by the engine's branches.
 */
static __always_inline int engine_timeout(const struct engine_req *req, __u32 max, __u64 age_ns)
{
	struct nic_timeout_scratch *sc;
	struct nic_tx_ring *ring;
	struct nic_sq *sq;
	__u32 qpn = req->qpn, ring_id, tail0, n, zero = 0;
	__u64 now = bpf_ktime_get_ns();
	int i;

	sq = nic_tx_qps.lookup(&qpn);
	if (!sq)
		return engine_idle(req, NIC_CNT_DROP_UNKNOWN_QP);
	ring_id = sq->ring;
	ring = nic_tx_ring.lookup(&ring_id);
	sc = nic_timeout_scratch.lookup(&zero);
	if (!ring || !sc)
		return engine_idle(req, NIC_CNT_DROP_QP_CONFIG);
	if (max == 0 || max > NIC_TIMEOUT_MAX)
		max = NIC_TIMEOUT_MAX;
	bpf_spin_lock(&sq->lock);
	tail0 = sq->retx_tail;
	/* Branch-free but for the exits, and nothing carried from one step to
	 * the next but i: what a step did is in the map value, which the
	 * verifier does not track, so its states stay the same whether a PSN
	 * was queued or not (one path, not 2^NIC_TIMEOUT_MAX). Each step writes
	 * the slot at retx_tail; only a PSN to queue moves retx_tail over it. */
	for (i = 0; i < NIC_TIMEOUT_MAX; i++) {
		__u32 psn = (sq->snd_una + i) & MRC_PSN_MASK;
		const struct nic_tx_pkt *t = &ring->pkts[RING_POS(psn)];
		__u32 w = RING_WORD(psn), b = RING_BIT(psn), known, q, at;
		struct nic_retx *r;

		if (MRC_PSN_DIFF(psn, sq->snd_nxt) >= 0 || sq->retx_tail - tail0 >= max)
			break;
		if (sq->retx_tail - sq->retx_head >= NIC_RETX_SLOTS) {
			sq->stats.retx_overflow++;
			break;
		}
		known = t->psn == psn; /* the ring entry is this PSN's: its EV and age are known */
		if (known && now - t->tx_ts < age_ns)
			break; /* this one and every later one were sent too recently */
		q = (~(sq->acked[w] | sq->retx[w]) >> b) & 1; /* neither acked nor queued */
		r = &sq->retxq[sq->retx_tail & (NIC_RETX_SLOTS - 1)];
		r->psn = psn;
		r->ev = known ? t->ev : 0;
		r->cause = NIC_RETX_TIMEOUT;
		r->nack_reason = 0;
		at = (sq->retx_tail - tail0) & (NIC_TIMEOUT_MAX - 1);
		sc->psn[at] = psn;
		sc->ev[at] = r->ev;
		sq->retx[w] |= (__u64)q << b;
		sq->retx_tail += q;
		sq->stats.retx_queued += q;
		sq->stats.lost_pkts += q;
	}
	n = sq->retx_tail - tail0;
	bpf_spin_unlock(&sq->lock);

	/* The EVs that lost them: ASSUMED_BAD (not DENIED: the operator's). */
	for (i = 0; i < NIC_TIMEOUT_MAX; i++) {
		if (i >= n)
			break;
		ev_lost_silently(qpn, sc->ev[i], NIC_EVC_TIMEOUT, sc->psn[i], 0, now);
	}
	count(NIC_CNT_TIMEOUT_KICKS, 1);
	count(NIC_CNT_TIMEOUT_QUEUED, n);
	count(NIC_CNT_RETX_QUEUED, n);
	count(NIC_CNT_LOST, n);
	return XDP_DROP;
}

/*
 * A window kick (struct nic_kick, NIC_KICK_CWND): congestion control's new
 * cwnd and RTT target, set under the QP's lock; the engine runs after it
 * (nic_xdp), so the kick also sends. A QP that is not there is engine_run's
 * to count.
 */
static __always_inline void engine_cwnd(const struct engine_req *req, __u32 cwnd, __u64 target)
{
	__u32 qpn = req->qpn;
	struct nic_sq *sq = nic_tx_qps.lookup(&qpn);

	if (!sq)
		return;
	bpf_spin_lock(&sq->lock);
	sq->cwnd = cwnd;
	sq->cc.rtt_target_ns = target;
	sq->cc.cwnd_sets++;
	bpf_spin_unlock(&sq->lock);
	count(NIC_CNT_CWND_KICKS, 1);
}

/*
 * An EV replacement (struct nic_kick, NIC_KICK_EV_REPLACE): slot `slot` of the
 * QP's EV profile goes from EV `evs >> 16` to EV `evs & 0xFFFF`, under the
 * QP's lock, if it still holds the old one. Sends nothing; a kick that
 * changed nothing (a QP gone, a slot that moved on) is idle.
 */
static __always_inline int engine_ev_replace(const struct engine_req *req, __u32 slot, __u64 evs)
{
	__u32 qpn = req->qpn, old = (evs >> 16) & 0xFFFF, fresh = evs & 0xFFFF, done = 0;
	struct nic_sq *sq = nic_tx_qps.lookup(&qpn);

	if (!sq)
		return engine_idle(req, NIC_CNT_DROP_UNKNOWN_QP);
	if (slot >= NIC_MAX_QP_EVS || fresh == 0)
		return engine_idle(req, NIC_CNT_KICK_IDLE);
	bpf_spin_lock(&sq->lock);
	if (slot < sq->n_evs && sq->evs[slot & (NIC_MAX_QP_EVS - 1)] == old) {
		sq->evs[slot & (NIC_MAX_QP_EVS - 1)] = fresh;
		done = 1;
	}
	bpf_spin_unlock(&sq->lock);
	if (!done)
		return engine_idle(req, NIC_CNT_KICK_IDLE);
	count(NIC_CNT_EV_REPLACED, 1);
	return XDP_DROP;
}

static __always_inline int engine_run(struct xdp_md *ctx, const struct engine_req *req)
{
	struct nic_tx_scratch *sc;
	struct nic_sq *sq;
	struct nic_wq *wq;
	struct nic_tx_ring *ring;
	struct nic_tx_pkt *t;
	struct nic_port *port;
	struct nic_region *rg;
	struct nic_mr_elem *src;
	const struct nic_wqe *w;
	struct ev_pick p1 = {}, p2 = {};
	struct data_hdrs f = {};
	struct nic_ev *e;
	__u32 qpn = req->qpn, zero = 0, ring_id, host, planes, found = 0, want, work, i, n;
	__u32 psn, wqe, off, len, seg, last, retx, ev, plane, prev, has_prev, hdrs, total, rid;
	__u32 key, cpu, icrc = MRC_ICRC_UNUSED, *up, avoid = NIC_MAX_PLANES;
	__u64 now, tx_ts, elem;
	__u32 src_elem = 0;
	int verdict, delta;

	sq = nic_tx_qps.lookup(&qpn);
	if (!sq)
		return engine_idle(req, NIC_CNT_DROP_UNKNOWN_QP);
	if (!sq->engine || sq->mpr == 0 || sq->mpr > NIC_MPR_MAX)
		return engine_idle(req, NIC_CNT_DROP_QP_CONFIG);
	if (sq->state != NIC_QPS_RTS && sq->state != NIC_QPS_SQD)
		return engine_idle(req, NIC_CNT_DROP_QP_STATE);
	ring_id = sq->ring;
	ring = nic_tx_ring.lookup(&ring_id);
	wq = nic_wq.lookup(&ring_id);
	sc = nic_tx_scratch.lookup(&zero);
	if (!ring || !wq || !sc)
		return engine_idle(req, NIC_CNT_DROP_QP_CONFIG);
	host = sq->local_host;
	up = nic_port_up.lookup(&host);
	planes = (up ? *up : 0) & sq->peer_ports;
	now = bpf_ktime_get_ns();

	/* A first look without the lock: is there anything to send? Only then
	 * are EVs looked for and the frame grown (to the common size: a full
	 * WRITE), so that a frame that cannot grow changes no state. */
	work = sq->retx_head != sq->retx_tail ||
	       (sq->state == NIC_QPS_RTS && *(volatile __u32 *)&wq->posted != sq->wqe_sent);
	if (work) {
		/* A retransmission first: p2 in case p1 is on the plane that lost it. */
		want = sq->retx_head != sq->retx_tail ? 2 : 1;
		if (want == 2)
			avoid = retx_plane(sq, qpn);
		found = pick_evs(sq, qpn, want, planes, avoid, now, &p1, &p2);
		if (!found)
			count(NIC_CNT_TX_NO_EV, 1);
	}
	if (found) {
		delta = (int)DATA_FRAME_FULL - (int)bpf_xdp_get_buff_len(ctx);
		if (delta && bpf_xdp_adjust_tail(ctx, delta)) {
			count(NIC_CNT_DROP_XDP_ERR, 1);
			found = 0;
		}
	}

	sc->what = TX_NONE;
	sc->full = 0;
	sc->second = 0;
	sc->n_done = 0;
	bpf_spin_lock(&sq->lock);
	engine_complete(sq, wq, sc, qpn);
	if (found) {
		engine_plan(sq, wq, ring, sc);
		/* The EV: the first one found, unless a retransmission was lost on
		 * it or on its plane (p2: on another plane if one is usable). The
		 * round robin goes on after the EV used, or stays on the first one
		 * found when it was passed over. */
		if (sc->what == TX_RETX && found > 1 &&
		    (p1.ev == sc->lost_ev || (p1.e->plane == avoid && p2.e->plane != avoid)))
			sc->second = 1;
		if (sc->what != TX_NONE)
			sq->ev_next = sc->second ? p1.idx : p1.idx + 1;
	}
	bpf_spin_unlock(&sq->lock);

	n = sc->n_done;
	if (n > NIC_MSG_SLOTS)
		n = NIC_MSG_SLOTS;
	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		if (i >= n)
			break;
		sc->done[i].ts = now;
		emit(&sc->done[i]);
	}
	count(NIC_CNT_SEND_DONE, n);
	if (sc->full)
		count(NIC_CNT_TX_WINDOW_FULL, 1);
	if (sc->what == TX_NONE)
		return engine_idle(req, NIC_CNT_KICK_IDLE);

	retx = sc->what == TX_RETX;
	e = p1.e;
	ev = p1.ev;
	if (sc->second) {
		e = p2.e;
		ev = p2.ev;
	}
	if (!e)
		return engine_idle(req, NIC_CNT_KICK_IDLE); /* cannot happen: found >= 1 */
	plane = e->plane;
	if (plane >= NIC_MAX_PLANES)
		return engine_idle(req, NIC_CNT_KICK_IDLE); /* cannot happen: ev_usable checked it */
	psn = sc->psn;
	wqe = sc->wqe;
	off = sc->off;

	/* The segment: from the WQE (immutable until it completes, which needs
	 * this PSN acknowledged) and its source region element. */
	w = &wq->wqes[wqe & (NIC_MSG_SLOTS - 1)];
	len = w->len;
	seg = segment_len(len, off);
	last = off + seg >= len;
	if (seg) {
		rid = w->src_region;
		rg = nic_regions.lookup(&rid);
		if (!rg || !rg->n_elems || (w->src_off & (NIC_MR_ELEM_SIZE - 1)))
			return engine_bad_wqe(req, sq, psn, now);
		elem = ((__u64)w->src_off + off) / NIC_MR_ELEM_SIZE;
		if (elem + (seg - 1) / NIC_MR_ELEM_SIZE >= rg->n_elems)
			return engine_bad_wqe(req, sq, psn, now);
		src_elem = rg->first_elem + (__u32)elem;
	}

	/* Record the transmission before the packet leaves (nic_maps.h). */
	tx_ts = bpf_ktime_get_ns();
	cpu = bpf_get_smp_processor_id();
	bpf_spin_lock(&e->lock);
	has_prev = e->stats.tx_pkts != 0;
	prev = e->last_tx_psn;
	e->last_tx_psn = psn;
	e->last_tx_cpu = cpu;
	e->last_tx_ts = tx_ts;
	e->stats.tx_pkts++;
	e->stats.tx_bytes += seg;
	e->stats.retx_pkts += retx;
	bpf_spin_unlock(&e->lock);
	t = &ring->pkts[RING_POS(psn)];
	t->tx_ts = tx_ts;
	t->psn = psn;
	t->prev_psn = has_prev ? prev : 0;
	t->ev = ev;
	t->flags = (has_prev ? NIC_TX_F_PREV : 0) | (retx ? NIC_TX_F_RETX : 0);
	t->len = seg;
	t->wqe = wqe;
	t->msg_off = off;

	/* The frame. */
	key = host * NIC_MAX_PLANES + plane;
	port = nic_ports.lookup(&key);
	if (port) {
		__builtin_memcpy(f.eth.h_source, port->mac, ETH_ALEN);
		__builtin_memcpy(f.eth.h_dest, port->nh_mac, ETH_ALEN);
	}
	hdrs = (w->opcode == MRC_OP_WRITE_IMM && last) ? DATA_IMM_HDRS_LEN : DATA_HDRS_LEN;
	total = hdrs + seg + MRC_ICRC_LEN;
	f.eth.h_proto = bpf_htons(ETH_P_IP);
	f.ip.version = 4;
	f.ip.ihl = 5;
	f.ip.tos = ((retx ? MRC_DSCP_TRIMMABLE_RETX : MRC_DSCP_TRIMMABLE) << MRC_DSCP_SHIFT) |
		   MRC_ECN_ECT0;
	f.ip.tot_len = bpf_htons(total - ETH_HLEN);
	f.ip.frag_off = bpf_htons(0x4000); /* DF */
	f.ip.ttl = 64;
	f.ip.protocol = IPPROTO_UDP;
	f.ip.saddr = bpf_htonl(NIC_HOST_NET + (plane << 8) + host + 1);
	f.ip.daddr = bpf_htonl(NIC_HOST_NET + (plane << 8) + sq->peer_host + 1);
	f.ip.check = ipv4_csum(&f.ip);
	f.udp.source = bpf_htons(ev);
	f.udp.dest = bpf_htons(MRC_UDP_PORT);
	f.udp.len = bpf_htons(total - ETH_HLEN - sizeof(struct iphdr));
	f.bth.opcode = hdrs == DATA_IMM_HDRS_LEN ? MRC_OP_WRITE_IMM : MRC_OP_WRITE;
	f.bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f.bth.qpn = bpf_htonl(sq->peer_qpn & MRC_BTH_QPN_MASK);
	f.bth.apsn = bpf_htonl(MRC_BTH_ACK_MASK | psn);
	f.reth.va = bpf_htonll(w->remote_va + off);
	f.reth.rkey = bpf_htonl(w->rkey);
	f.reth.dmalen = bpf_htonl(seg);
	f.immdt.imm = bpf_htonl(w->imm);
	f.dext.flags_msn = bpf_htonl((last ? MRC_DATA_F_LAST : 0) | sc->msn);
	f.dext.msg_off = bpf_htonl(off);
	f.dext.tx_ts = bpf_htonll(tx_ts);

	delta = (int)total - (int)bpf_xdp_get_buff_len(ctx);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return engine_idle(req, NIC_CNT_DROP_XDP_ERR); /* lost: loss detection resends it */
	/* BTH .. ImmDt, then MRC_DATA where it goes (over the ImmDt slot of a WRITE). */
	if (bpf_xdp_store_bytes(ctx, 0, &f, DATA_HDRS_LEN - 16 + sizeof(f.immdt)) ||
	    bpf_xdp_store_bytes(ctx, hdrs - sizeof(f.dext), &f.dext, sizeof(f.dext)) ||
	    bpf_xdp_store_bytes(ctx, hdrs + seg, &icrc, MRC_ICRC_LEN))
		return engine_idle(req, NIC_CNT_DROP_XDP_ERR);
	for (i = 0; i < NIC_SEG_ELEMS; i++) { /* the payload, element by element */
		__u32 at = i * NIC_MR_ELEM_SIZE, src_k = src_elem + i;
		__u64 n_bytes;

		if (at >= seg)
			break;
		src = nic_mr.lookup(&src_k);
		if (!src)
			return engine_bad_wqe(req, sq, psn, now);
		n_bytes = elem_bytes(seg, at);
		if (n_bytes < 1)
			return engine_idle(req, NIC_CNT_DROP_XDP_ERR);
		if (bpf_xdp_store_bytes(ctx, hdrs + at, src, n_bytes))
			return engine_idle(req, NIC_CNT_DROP_XDP_ERR);
	}

	count(retx ? NIC_CNT_TX_RETX : NIC_CNT_TX_DATA, 1);
	count(NIC_CNT_TX_BYTES, seg);
	if (!req->kick && plane == req->plane) {
		count(NIC_CNT_TX_CLOCKED, 1);
		return XDP_TX;
	}
	verdict = nic_tx_ports.redirect_map(key, XDP_DROP);
	if (verdict != XDP_REDIRECT) {
		count(NIC_CNT_TX_REDIRECT_ERR, 1);
		return engine_idle(req, NIC_CNT_KICK_IDLE);
	}
	count(req->kick ? NIC_CNT_KICK_SENT : NIC_CNT_TX_CLOCKED, 1);
	return XDP_REDIRECT;
}

/* ---- Entry point --------------------------------------------------------- */

/* Every received packet: parse, dispatch on the opcode (see the top). */
static __always_inline int nic_rx(struct xdp_md *ctx, struct engine_req *req)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct mrc_pkt p = {.c = {.pos = data, .end = data_end}};
	__u32 ip_len, hlen, udp_len;
	__u8 opcode;

	/* Framing: anything that is not MRC over IPv4 goes to the stack. A
	 * packet cut before its UDP header cannot be told to be MRC. */
	p.eth = parse_ethhdr(&p.c);
	if (!p.eth || p.eth->h_proto != bpf_htons(ETH_P_IP))
		return pass(NIC_CNT_PASS_NOT_MRC);
	p.ip = parse_iphdr(&p.c);
	if (!p.ip || p.ip->version != 4 || p.ip->protocol != IPPROTO_UDP)
		return pass(NIC_CNT_PASS_NOT_MRC);
	if (p.ip->frag_off & bpf_htons(0x3fff)) /* MF or an offset: not reassembled here */
		return pass(NIC_CNT_PASS_NOT_MRC);
	p.udp = parse_udphdr(&p.c);
	if (!p.udp || p.udp->dest != bpf_htons(MRC_UDP_PORT))
		return pass(NIC_CNT_PASS_NOT_MRC);

	/* MRC from here: lengths must agree. Bytes after the IPv4 packet
	 * (Ethernet padding) are ignored. */
	hlen = p.ip->ihl * 4;
	ip_len = bpf_ntohs(p.ip->tot_len);
	udp_len = bpf_ntohs(p.udp->len);
	if ((void *)p.ip + ip_len > data_end)
		return drop(NIC_CNT_DROP_TRUNCATED);
	if (ip_len < hlen + sizeof(struct udphdr) || udp_len != ip_len - hlen)
		return drop(NIC_CNT_DROP_BAD_LEN);
	p.udp_payload = udp_len - sizeof(struct udphdr);
	p.bth_off = ETH_HLEN + hlen + sizeof(struct udphdr);
	if (p.udp_payload < sizeof(struct mrc_bth))
		return drop(NIC_CNT_DROP_SHORT);
	p.bth = parse_bth(&p.c);
	if (!p.bth)
		return drop(NIC_CNT_DROP_TRUNCATED);

	opcode = p.bth->opcode;
	switch (opcode) {
	case MRC_OP_WRITE:
	case MRC_OP_WRITE_IMM:
		return rx_data(ctx, &p);
	case MRC_OP_ACK:
		return rx_ack(ctx, &p, req);
	case MRC_OP_PROBE:
		return rx_probe(ctx, &p);
	case MRC_OP_PROBE_REPLY:
		return rx_probe_reply(ctx, &p);
	}
	/* MRC's ranges: RC (transport bits 000) and manufacturer-specific. */
	if (opcode < 0x20 || opcode >= MRC_OP_VENDOR_FIRST)
		return drop(NIC_CNT_DROP_BAD_OPCODE);
	return pass(NIC_CNT_PASS_OTHER_OPCODE);
}

/*
 * The program. A kick (nic_maps.h, struct nic_kick) runs the send engine
 * directly; a received packet goes through nic_rx, whose ACK path may ask
 * for the engine too. The engine is inlined in this one place.
 */
int nic_xdp(struct xdp_md *ctx)
{
	struct engine_req req = {};
	__u32 arg = 0;
	__u64 age_ns = 0;
	int verdict, kick = kick_of(ctx, &req, &arg, &age_ns);

	if (kick == 1 + NIC_KICK_TIMEOUT)
		return engine_timeout(&req, arg, age_ns);
	if (kick == 1 + NIC_KICK_EV_REPLACE)
		return engine_ev_replace(&req, arg, age_ns);
	if (kick == 1 + NIC_KICK_CWND)
		engine_cwnd(&req, arg, age_ns);
	if (kick)
		verdict = ENGINE_RUN;
	else
		verdict = nic_rx(ctx, &req);
	if (verdict != ENGINE_RUN)
		return verdict;
	return engine_run(ctx, &req);
}
