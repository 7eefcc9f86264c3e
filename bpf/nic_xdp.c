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
 * region element, then, under the QP's bpf_spin_lock, its bit is set,
 * cum_psn moves over the received run, LAST packets record their message,
 * and messages whose LAST PSN cum_psn has passed complete in MSN order
 * (AETH.msn; a WRITE_WITH_IMM completion is a nic_events record, written
 * after the lock since no helper may run under it). The copy stays outside
 * the lock: a first look without it decides whether to copy (see rx_data).
 *
 * Sender, per SACK/NACK (rx_ack): checks (lengths, syndrome and reason agree,
 * send QP known, addresses, state, PSNs never sent), then under the send QP's
 * lock: the cumulative PSN, the SACK bitmap and (SACK) BTH.psn are marked
 * acknowledged and snd_una moves over the acknowledged run; a retryable NACK
 * queues its PSN for retransmission with the EV that lost it; a fatal NACK
 * moves the QP to ERR; a SACK whose transmission is known starts the loss walk
 * (nic_maps.h, "Loss detection"). Then, under the echoed EV's lock, the
 * feedback: counters, RTT, SKIP on ECN or a fabric trim, ASSUMED_BAD on a
 * loss. Events (loss, EV state, QP error) go to nic_events after the locks.
 * Every SACK and NACK ends there: XDP_DROP, counted as ACK_CONSUMED (or
 * ACK_STALE if it changed nothing). Nothing in the stack wants it; the send
 * engine will turn this frame into the next data packet instead (ack_done).
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

/* Receive state per QP, key = QPN; see struct nic_rq. */
BPF_HASH(nic_rx_qps, __u32, struct nic_rq, NIC_MAX_QPS);
/* Every memory region of the lab, NIC_MR_ELEM_SIZE bytes per element, mmapable. */
BPF_F_TABLE("array", __u32, struct nic_mr_elem, nic_mr, NIC_MR_ELEMS, BPF_F_MMAPABLE);
/* Region table, key = region id; see struct nic_region. */
BPF_ARRAY(nic_regions, struct nic_region, NIC_MAX_REGIONS);
/* Port bitmap per host id, copied into every SACK/NACK. */
BPF_ARRAY(nic_port_up, __u32, NIC_MAX_HOSTS);
/* Outcome counters, enum nic_counter, one copy per CPU. */
BPF_PERCPU_ARRAY(nic_counters, __u64, NIC_CNT_MAX);
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
	__u32 reserved;
	__u64 tx_ts;
};
struct nic_ack_scratch {
	__u32 verdict; /* enum ack_verdict */
	__u32 newly;   /* PSNs newly acknowledged */
	__u32 fb;      /* feedback taken for the echoed EV */
	__u32 queued;  /* the NACKed PSN was queued */
	__u32 fatal;   /* the QP went to ERR */
	__u32 n_lost;  /* entries of lost */
	struct nic_lost lost[NIC_LOSS_WALK_MAX];
};
BPF_PERCPU_ARRAY(nic_ack_scratch, struct nic_ack_scratch, 1);
/* Events to the daemon: struct nic_event and the other NIC_EV_* records. */
BPF_RINGBUF_OUTPUT(nic_events, NIC_EVENT_PAGES);

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
 * Turn the data packet into its answer and send it back (XDP_TX). Everything
 * the answer copies (addresses, EV, PSN, tx_ts) is read from the packet into
 * the stack frame first: resizing the frame invalidates packet pointers.
 * IPv4 options of the data packet are not kept (the answer has IHL 5).
 */
static __always_inline int answer(struct xdp_md *ctx, struct mrc_pkt *p,
				  struct mrc_data_ext *dext, __u32 psn,
				  const struct ack_info *ai)
{
	struct ack_frame f = {};
	int delta;

	__builtin_memcpy(f.eth.h_dest, p->eth->h_source, ETH_ALEN);
	__builtin_memcpy(f.eth.h_source, p->eth->h_dest, ETH_ALEN);
	f.eth.h_proto = bpf_htons(ETH_P_IP);

	f.ip.version = 4;
	f.ip.ihl = 5;
	f.ip.tos = (MRC_DSCP_CONTROL << MRC_DSCP_SHIFT) | MRC_ECN_NOT_ECT;
	f.ip.tot_len = bpf_htons(sizeof(f) - ETH_HLEN);
	f.ip.id = 0;
	f.ip.frag_off = bpf_htons(0x4000); /* DF */
	f.ip.ttl = 64;
	f.ip.protocol = IPPROTO_UDP;
	f.ip.saddr = p->ip->daddr;
	f.ip.daddr = p->ip->saddr;
	f.ip.check = ipv4_csum(&f.ip);

	/* The answer keeps the EV it answers as source port (docs/wire-format.md 3). */
	f.udp.source = p->udp->source;
	f.udp.dest = bpf_htons(MRC_UDP_PORT);
	f.udp.len = bpf_htons(sizeof(f) - ETH_HLEN - sizeof(struct iphdr));
	f.udp.check = 0;

	f.bth.opcode = MRC_OP_ACK;
	f.bth.flags = 0;
	f.bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f.bth.qpn = bpf_htonl(ai->peer_qpn & MRC_BTH_QPN_MASK);
	f.bth.apsn = bpf_htonl(psn & MRC_BTH_PSN_MASK); /* A = 0 */

	f.aeth.smsn = bpf_htonl(((__u32)ai->syndrome << MRC_AETH_SYN_SHIFT) |
				(ai->msn & MRC_AETH_MSN_MASK));

	f.ack.mpr_cum = bpf_htonl(((ai->mpr << MRC_ACK_MPR_SHIFT) & MRC_ACK_MPR_MASK) |
				  (ai->cum_psn & MRC_ACK_CUM_PSN_MASK));
	f.ack.sack_base = bpf_htonl(ai->sack_base & MRC_ACK_SACK_PSN_MASK);
	f.ack.sack_bitmap = bpf_htonll(ai->sack_bitmap);
	f.ack.echo_ts = dext->tx_ts; /* copied as is (big endian) */
	f.ack.echo_ev = p->udp->source;
	f.ack.flags = ai->flags;
	f.ack.nack_reason = ai->reason;
	f.ack.port_bitmap = bpf_htonl(ai->port_bitmap);
	f.icrc = MRC_ICRC_UNUSED;

	delta = (int)sizeof(f) - (int)bpf_xdp_get_buff_len(ctx);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return drop(NIC_CNT_DROP_XDP_ERR);
	if (bpf_xdp_store_bytes(ctx, 0, &f, sizeof(f)))
		return drop(NIC_CNT_DROP_XDP_ERR);
	count(ai->counter, 1);
	return XDP_TX;
}

/* ---- Receive state: the bitmap ring (callers hold rq->lock) -------------- */

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

/* Record a LAST packet's message in its slot (rq->lock held). */
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
 * (rq->lock held). WRITE_WITH_IMM completions go to batch, sent after the
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
static __always_inline int rx_data(struct xdp_md *ctx, struct mrc_pkt *p)
{
	int has_imm = p->bth->opcode == MRC_OP_WRITE_IMM;
	__u32 hdrs = has_imm ? MRC_WRITE_IMM_HDRS_LEN : MRC_WRITE_HDRS_LEN;
	struct mrc_data_ext *dext;
	struct mrc_reth *reth;
	struct nic_cqe_batch *batch;
	struct nic_region *rg;
	struct nic_rq *rq;
	struct ack_info ai = {};
	enum rx_verdict verdict;
	__u32 qpn, psn, dmalen, rkey, flags_msn, msg_off, payload_len, payload_off;
	__u32 imm = 0, elem = 0, zero = 0, dscp, host;
	__u64 va, off;
	__s32 window, d;
	int trimmed, last, fresh;
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
		if (payload_len > MRC_PAYLOAD_MAX(MRC_MTU) || payload_len > NIC_MR_ELEM_SIZE)
			return drop(NIC_CNT_DROP_TOO_LONG);
	}

	rq = nic_rx_qps.lookup(&qpn);
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
		bpf_spin_lock(&rq->lock);
		d = MRC_PSN_DIFF(psn, rq->cum_psn);
		if (d < 0 || (d < window && ring_test(rq, psn)))
			ai.flags |= MRC_ACK_F_DUP; /* a retransmission of a PSN we have */
		sack_view(rq, psn, window, &ai);
		rq->stats.data_pkts++;
		rq->stats.trimmed_pkts++;
		rq->stats.nacks++;
		bpf_spin_unlock(&rq->lock);
		return answer(ctx, p, dext, psn, &ai);
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
		if (off >= rg->n_elems)
			goto remote_access;
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
		bpf_spin_lock(&rq->lock);
		sack_view(rq, psn, window, &ai);
		rq->stats.data_pkts++;
		rq->stats.oor_pkts++;
		rq->stats.nacks++;
		bpf_spin_unlock(&rq->lock);
		return answer(ctx, p, dext, psn, &ai);
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
			bpf_spin_lock(&rq->lock);
			sack_view(rq, psn, window, &ai);
			rq->stats.data_pkts++;
			rq->stats.nacks++;
			bpf_spin_unlock(&rq->lock);
			return answer(ctx, p, dext, psn, &ai);
		}
	}

	if (fresh && payload_len) {
		struct nic_mr_elem *dst = nic_mr.lookup(&elem);
		__u64 len = payload_len;

		if (!dst)
			goto remote_access; /* region reaches past nic_mr: misconfigured */
		/* Bounds the verifier can follow: 1 <= len <= NIC_MR_ELEM_SIZE. */
		asm volatile("" : "+r"(len));
		if (len > NIC_MR_ELEM_SIZE)
			return drop(NIC_CNT_DROP_TOO_LONG);
		asm volatile("" : "+r"(len));
		if (len < 1)
			return drop(NIC_CNT_DROP_BAD_LEN);
		if (bpf_xdp_load_bytes(ctx, payload_off, dst, len))
			return drop(NIC_CNT_DROP_TRUNCATED);
	}

	batch = nic_cqe_scratch.lookup(&zero);
	if (!batch)
		return drop(NIC_CNT_DROP_XDP_ERR); /* cannot happen: a 1-entry array */
	batch->n = 0;
	batch->done = 0;

	bpf_spin_lock(&rq->lock);
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
	bpf_spin_unlock(&rq->lock);

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

remote_access:
	/* Fatal for the QP (docs/wire-format.md 6): the daemon moves it to ERR
	 * when it sees the counter or the NACK's sender completes with an error. */
	ai.syndrome = MRC_AETH_NAK_REM_ACCESS;
	ai.reason = MRC_NACK_UNEXP_EVENT;
	ai.counter = NIC_CNT_NACK_REM_ACCESS;
	bpf_spin_lock(&rq->lock);
	sack_view(rq, psn, window, &ai);
	rq->stats.data_pkts++;
	rq->stats.nacks++;
	bpf_spin_unlock(&rq->lock);
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
	struct probe_frame f = {};
	struct mrc_probe_ext *pe;
	struct nic_rq *rq;
	__u32 qpn, host, *ports;
	int verdict = probe_len_ok(p), delta;

	if (verdict >= 0)
		return verdict;
	pe = parse_probe_ext(&p->c);
	if (!pe)
		return drop(NIC_CNT_DROP_TRUNCATED);
	qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	rq = nic_rx_qps.lookup(&qpn);
	if (!rq)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (!addrs_match(rq->local_host, rq->peer_host, p->ip->saddr, p->ip->daddr))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (rq->state != NIC_QPS_RTR && rq->state != NIC_QPS_RTS)
		return drop(NIC_CNT_DROP_QP_STATE);
	host = rq->local_host;
	ports = nic_port_up.lookup(&host);

	__builtin_memcpy(f.eth.h_dest, p->eth->h_source, ETH_ALEN);
	__builtin_memcpy(f.eth.h_source, p->eth->h_dest, ETH_ALEN);
	f.eth.h_proto = bpf_htons(ETH_P_IP);
	f.ip.version = 4;
	f.ip.ihl = 5;
	f.ip.tos = (MRC_DSCP_CONTROL << MRC_DSCP_SHIFT) | MRC_ECN_NOT_ECT;
	f.ip.tot_len = bpf_htons(sizeof(f) - ETH_HLEN);
	f.ip.frag_off = bpf_htons(0x4000); /* DF */
	f.ip.ttl = 64;
	f.ip.protocol = IPPROTO_UDP;
	f.ip.saddr = p->ip->daddr;
	f.ip.daddr = p->ip->saddr;
	f.ip.check = ipv4_csum(&f.ip);
	f.udp.source = p->udp->source;
	f.udp.dest = bpf_htons(MRC_UDP_PORT);
	f.udp.len = bpf_htons(sizeof(f) - ETH_HLEN - sizeof(struct iphdr));
	f.bth.opcode = MRC_OP_PROBE_REPLY;
	f.bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f.bth.qpn = bpf_htonl(rq->peer_qpn & MRC_BTH_QPN_MASK);
	f.bth.apsn = p->bth->apsn & bpf_htonl(MRC_BTH_PSN_MASK); /* A = 0 */
	f.probe.tx_ts = pe->tx_ts;
	f.probe.ev = pe->ev;
	if ((p->ip->tos & MRC_ECN_MASK) == MRC_ECN_CE)
		f.probe.flags = MRC_ACK_F_ECN;
	f.probe.port_bitmap = bpf_htonl(ports ? *ports : 0);
	f.icrc = MRC_ICRC_UNUSED;

	delta = (int)sizeof(f) - (int)bpf_xdp_get_buff_len(ctx);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return drop(NIC_CNT_DROP_XDP_ERR);
	if (bpf_xdp_store_bytes(ctx, 0, &f, sizeof(f)))
		return drop(NIC_CNT_DROP_XDP_ERR);
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

/*
 * Send engine hook. An ACK ends here once processed. The engine will turn
 * this frame into the next data packet when the ACK freed window or queued a
 * retransmission (docs/fastpath.md, "Clock"); until then the ACK is consumed:
 * XDP_DROP, since nothing in the stack wants it.
 */
static __always_inline int ack_done(struct xdp_md *ctx, const struct nic_ack_scratch *sc,
				    __u32 changed)
{
	count(changed ? NIC_CNT_ACK_CONSUMED : NIC_CNT_ACK_STALE, 1);
	return XDP_DROP;
}

static __always_inline int rx_ack(struct xdp_md *ctx, struct mrc_pkt *p)
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

	count(NIC_CNT_ACKED, sc->newly);
	count(NIC_CNT_LOST, n);
	count(NIC_CNT_RETX_QUEUED, sc->queued + n);
	return ack_done(ctx, sc, sc->fb | sc->newly | sc->queued | sc->fatal);
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

/* ---- Entry point --------------------------------------------------------- */

int nic_xdp(struct xdp_md *ctx)
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
		return rx_ack(ctx, &p);
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
