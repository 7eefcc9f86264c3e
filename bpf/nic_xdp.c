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
 *        ACK (SACK/NACK)   rx_ack()          sender role: TODO, passed to the stack
 *        PROBE             rx_probe()        receiver role: TODO, passed to the stack
 *        PROBE_REPLY       rx_probe_reply()  sender role: TODO, passed to the stack
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
/* Events to the daemon: struct nic_event. */
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
static __always_inline int addrs_match(const struct nic_rq *rq, __be32 saddr, __be32 daddr)
{
	__u32 d = bpf_ntohl(daddr) - NIC_HOST_NET;
	__u32 s = bpf_ntohl(saddr) - NIC_HOST_NET;
	__u32 plane = d >> 8;

	if (plane >= NIC_MAX_PLANES)
		return 0;
	if ((d & 0xff) != rq->local_host + 1)
		return 0;
	return s == ((plane << 8) | (rq->peer_host + 1));
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
	if (!addrs_match(rq, p->ip->saddr, p->ip->daddr))
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

/* ---- Other roles: later stages ------------------------------------------- */

/* TODO(sender role, issue 3): consume SACK/NACK: free acked PSNs, RTT from
 * echo_ts, per-EV ECN/trim state, and clock the next data packet out of this
 * frame. Until then the daemon may read ACKs from a UDP socket. */
static __always_inline int rx_ack(struct xdp_md *ctx, struct mrc_pkt *p)
{
	return pass(NIC_CNT_PASS_DEFERRED);
}

/* TODO(receiver role): answer a PROBE with a PROBE_REPLY (XDP_TX). */
static __always_inline int rx_probe(struct xdp_md *ctx, struct mrc_pkt *p)
{
	return pass(NIC_CNT_PASS_DEFERRED);
}

/* TODO(sender role): a PROBE_REPLY brings an EV back (RTT sample, event). */
static __always_inline int rx_probe_reply(struct xdp_md *ctx, struct mrc_pkt *p)
{
	return pass(NIC_CNT_PASS_DEFERRED);
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
