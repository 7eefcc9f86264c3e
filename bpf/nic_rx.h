/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_rx.h: the receiver's data placement (rx_data): checks, the payload copy
 * into its region, then under the QP's receive lock the bitmap ring,
 * cum_psn, message completion and counters; the answer goes last.
 */
#ifndef MRC_NIC_RX_H
#define MRC_NIC_RX_H

#include "nic_answers.h"
#include "nic_events.h"

/* ---- The receive lock (nic_rx_locks; docs/nic-program.md, "Receive lock") */

/* Take QP qpn's receive lock: its word, or NULL when it stayed taken for
 * NIC_RX_LOCK_TRIES tries (counted by the caller's drop). The cmpxchg is a
 * full barrier: nothing of the section moves before it. */
static __always_inline __u64 *rx_lock(__u32 qpn)
{
	__u32 slot = qpn & (NIC_RX_LOCKS - 1);
	struct nic_rx_lock *l = nic_rx_locks_lookup(&slot);
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

/* ---- The bitmap ring (callers hold the receive lock) --------------------- */

static __always_inline int ring_test(const struct nic_rq *rq, __u32 psn)
{
	return (rq->bitmap[RING_WORD(psn)] >> RING_BIT(psn)) & 1;
}

static __always_inline void ring_set(struct nic_rq *rq, __u32 psn)
{
	rq->bitmap[RING_WORD(psn)] |= 1ULL << RING_BIT(psn);
}

/* Move cum_psn over the run of received PSNs that starts at it, clearing
 * their bits (the bitmap invariant of struct nic_rq). One word per step: the
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
 * may then move the base"), but not while answers are held (ACK coalescing):
 * the held packets lie in the 64 from cum_psn, and this answer must report
 * them (the trigger itself is acknowledged by its BTH.psn; its neighbours
 * were answered when they came, being too far to be held). Bits at or beyond
 * cum_psn + window are masked: their ring positions belong to PSNs of the
 * current window.
 */
static __always_inline void sack_view(const struct nic_rq *rq, __u32 psn, __s32 window,
				      struct ack_info *ai)
{
	__u32 cum = rq->cum_psn, base = cum, w, b;
	__s32 d = MRC_PSN_DIFF(psn, cum), lim;
	__u64 bits;

	if (d >= MRC_SACK_BITS && d < window && !rq->ack_held)
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
static __always_inline enum rx_verdict msg_check(const struct nic_rq *rq, __u32 msn,
						 int has_imm)
{
	__s32 d = MRC_PSN_DIFF(msn, rq->msn); /* MSNs are 24-bit serial numbers too */

	if (d < 0)
		return RX_BAD_MSN;
	if (d >= NIC_MSG_SLOTS)
		return RX_NO_SLOT;
	/* max_wimm_dest: the responder holds that many WRITE_WITH_IMMs incomplete */
	if (has_imm && rq->max_wimm_dest && rq->wimm_held >= rq->max_wimm_dest)
		return RX_NO_SLOT;
	if (rq->msgs[msn & (NIC_MSG_SLOTS - 1)].flags & NIC_MSG_F_VALID)
		return RX_BAD_MSN;
	return RX_PLACED;
}

/* Record a LAST packet's message in its slot (receive lock held). */
static __always_inline enum rx_verdict record_msg(struct nic_rq *rq, __u32 msn, __u32 psn,
						  __u64 base_va, __u32 len, __u32 imm, int has_imm)
{
	enum rx_verdict v = msg_check(rq, msn, has_imm);
	struct nic_msg_slot *slot;

	if (v != RX_PLACED)
		return v;
	slot = &rq->msgs[msn & (NIC_MSG_SLOTS - 1)];
	slot->va = base_va;
	slot->last_psn = psn;
	slot->len = len;
	slot->imm = imm;
	slot->flags = NIC_MSG_F_VALID | (has_imm ? NIC_MSG_F_IMM : 0);
	rq->wimm_held += has_imm ? 1 : 0;
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
	rq->wimm_held -= n <= rq->wimm_held ? n : rq->wimm_held;
	rq->stats.imm_done += n;
	rq->stats.msgs_done += done;
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


/* Bytes placed at `now` into this CPU's copy of the timeline. */
static __always_inline void timeline_add(__u64 now, __u32 bytes)
{
	__u64 bin = now >> NIC_TIMELINE_SHIFT;
	__u32 slot = bin & (NIC_TIMELINE_BINS - 1);
	struct nic_timeline_bin *b = nic_rx_timeline_lookup(&slot);

	if (!b)
		return;
	if (b->bin != bin) {
		b->bin = bin;
		b->bytes = 0;
	}
	b->bytes += bytes;
}

/* ---- rx_data, step by step ---------------------------------------------- */

/* A step's "fatal NACK" (remote access), besides PKT_GO or a verdict. */
#define RX_REMOTE_ACCESS (-2)

/* A data packet's fields, host order. */
struct rx_pkt {
	struct mrc_data_ext *dext; /* the answer echoes its tx_ts */
	__u64 va;
	__u32 qpn, psn, dmalen, rkey, flags_msn, msg_off, imm;
	__u32 payload_len, payload_off, dscp;
	int has_imm, last, trimmed;
	int ackreq; /* BTH AckReq: the sender wants this packet answered at once */
};

/* What rx_data decided before the lock, for the locked section. */
struct rx_plan {
	struct nic_cqe_batch *batch; /* completions of a placement, sent after the lock */
	__u64 now;                   /* a fresh PSN: when it was placed (the delivery clock) */
	__u32 region;                /* the region it is placed in (nic_regions, nic_mems) */
	__u32 elem;                  /* the payload's first region element */
	__u32 in_off;                /* where in that element it starts */
	int fresh;                   /* the PSN looked new: its payload was copied */
	int hold;                    /* placed, its answer coalesced (ack_hold) */
	enum rx_nack nack;
};

/* Parse RETH (ImmDt) MRC_DATA and check the lengths. */
static __always_inline int rx_parse(struct mrc_pkt *p, struct rx_pkt *d)
{
	__u32 hdrs = d->has_imm ? MRC_WRITE_IMM_HDRS_LEN : MRC_WRITE_HDRS_LEN;
	struct mrc_reth *reth;

	if (p->udp_payload < hdrs + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_SHORT);
	if (parse_reth(&p->c, p->end, &reth))
		return drop(NIC_CNT_DROP_TRUNCATED);
	if (d->has_imm) {
		struct mrc_immdt *immdt;

		if (parse_immdt(&p->c, p->end, &immdt))
			return drop(NIC_CNT_DROP_TRUNCATED);
		d->imm = bpf_ntohl(immdt->imm);
	}
	if (parse_data_ext(&p->c, p->end, &d->dext))
		return drop(NIC_CNT_DROP_TRUNCATED);

	d->qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	d->psn = bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK;
	d->ackreq = !!(p->bth->apsn & bpf_htonl(MRC_BTH_ACK_MASK));
	d->va = bpf_ntohll(reth->va);
	d->rkey = bpf_ntohl(reth->rkey);
	d->dmalen = bpf_ntohl(reth->dmalen);
	d->flags_msn = bpf_ntohl(d->dext->flags_msn);
	d->msg_off = bpf_ntohl(d->dext->msg_off);
	d->last = !!(d->flags_msn & MRC_DATA_F_LAST);
	d->dscp = p->ip->tos >> MRC_DSCP_SHIFT;
	d->trimmed = d->dscp == MRC_DSCP_TRIMMED || d->dscp == MRC_DSCP_TRIMMED_LASTHOP;
	d->payload_len = p->udp_payload - hdrs - MRC_ICRC_LEN;
	d->payload_off = p->bth_off + hdrs;

	if (d->has_imm && !d->last)
		return drop(NIC_CNT_DROP_IMM_NOT_LAST);
	/* A trimmed packet lost its payload; RETH.dmalen is the length before. */
	if (!d->trimmed) {
		if (d->dmalen != d->payload_len)
			return drop(NIC_CNT_DROP_BAD_LEN);
		if (d->payload_len > MRC_PAYLOAD_MAX(MRC_MTU) || d->payload_len > NIC_SEG_SIZE)
			return drop(NIC_CNT_DROP_TOO_LONG);
	}
	return PKT_GO;
}

/* The region the payload goes to, into *region, its element the payload
 * starts at, into *elem, and the byte in it, into *in_off: placement is byte-granular, any va and length inside
 * the MR. A zero-length WRITE places nothing, and its va and rkey are not
 * checked (as in IBTA). The region must take WRITEs and be of the QP's host
 * and protection domain: an rkey of another PD is as wrong as a forged one. */
static __always_inline int rx_region(const struct nic_rq *rq, const struct rx_pkt *d, __u32 *region,
				     __u32 *elem, __u32 *in_off)
{
	__u32 rid = rq->region, owner = 0;
	struct nic_region *rg;
	__u64 off;

	if (!d->payload_len)
		return PKT_GO;
	if (rid == NIC_REGION_BY_RKEY) { /* an application's QP: the rkey names the MR */
		rid = d->rkey & (NIC_MAX_REGIONS - 1);
		owner = rq->local_host + 1;
	}
	rg = nic_regions_lookup(&rid);
	if (!rg || !rg->n_elems || rg->rkey != d->rkey || d->va < rg->base_va || rg->owner != owner ||
	    rg->pd != rq->pd || !rg->remote_write)
		return RX_REMOTE_ACCESS;
	off = d->va - rg->base_va;
	if (off < rg->head || off + d->payload_len > (__u64)rg->n_elems * NIC_MR_ELEM_SIZE - rg->tail)
		return RX_REMOTE_ACCESS; /* a byte outside the MR */
	*region = rid;
	*elem = rg->first_elem + (__u32)(off / NIC_MR_ELEM_SIZE);
	*in_off = (__u32)(off % NIC_MR_ELEM_SIZE);
	return PKT_GO;
}

/* A payload that starts inside an element: into the copy buffer whole, then
 * into its elements piece by piece, each written through a dynptr over its
 * element (the helper checks the piece's offset and length at run time; a
 * plain copy to element + offset is refused by the verifier, which bounds
 * offset and length apart). Outside the lock. */
static __always_inline int rx_copy_unaligned(struct xdp_md *ctx, const struct rx_pkt *d,
					     __u32 region, __u32 elem, __u32 in_off)
{
	struct nic_copy_buf *buf;
	__u32 zero = 0, k;
	__u64 len = payload_bytes(d->payload_len);

	if (len < 1)
		return drop(NIC_CNT_DROP_BAD_LEN);
	buf = nic_copy_scratch_lookup(&zero);
	if (!buf)
		return drop(NIC_CNT_DROP_XDP_ERR); /* cannot happen: a 1-entry array */
	if (bpf_xdp_load_bytes(ctx, d->payload_off, buf->bytes, len))
		return drop(NIC_CNT_DROP_TRUNCATED);
	for (k = 0; k <= NIC_SEG_ELEMS; k++) {
		__u32 in = 0, at = 0, elem_k = elem + k;
		__u64 n = copy_piece(d->payload_len, in_off, k, &in, &at);
		struct nic_mr_elem *dst;
		struct bpf_dynptr dp;

		if (!n)
			break;
		dst = nic_mem_lookup(&region, &elem_k);
		if (!dst)
			return RX_REMOTE_ACCESS; /* no memory, or too little: misconfigured */
		if (bpf_dynptr_from_mem(dst, sizeof(*dst), 0, &dp) ||
		    bpf_dynptr_write(&dp, in, buf->bytes + piece_at(at), n, 0))
			return drop(NIC_CNT_DROP_XDP_ERR);
	}
	return PKT_GO;
}

/* Copy the payload into its region, element by element (a payload of
 * NIC_SEG_SIZE fills several): straight from the packet when it starts on
 * an element, through the copy buffer when it does not. Outside the lock. */
static __always_inline int rx_copy(struct xdp_md *ctx, const struct rx_pkt *d, __u32 region,
				   __u32 elem, __u32 in_off)
{
	int k;

	if (in_off)
		return rx_copy_unaligned(ctx, d, region, elem, in_off);
	for (k = 0; k < NIC_SEG_ELEMS; k++) {
		__u32 at = k * NIC_MR_ELEM_SIZE, elem_k = elem + k;
		struct nic_mr_elem *dst;
		__u64 len;

		if (at >= d->payload_len)
			break;
		dst = nic_mem_lookup(&region, &elem_k);
		if (!dst)
			return RX_REMOTE_ACCESS; /* no memory, or too little: misconfigured */
		len = elem_bytes(d->payload_len, at);
		if (len < 1)
			return drop(NIC_CNT_DROP_BAD_LEN);
		if (bpf_xdp_load_bytes(ctx, d->payload_off + at, dst, len))
			return drop(NIC_CNT_DROP_TRUNCATED);
	}
	return PKT_GO;
}

/* An answer that is a NACK: its reason and the counter it adds to. */
static __always_inline void rx_nack(struct ack_info *ai, struct rx_plan *plan, enum rx_nack nack,
				    __u8 reason, __u8 counter)
{
	ai->reason = reason;
	ai->counter = counter;
	plan->nack = nack;
}

/*
 * Everything before the lock: a NACK without placement (trimmed, remote
 * access, beyond the window, no message slot), else the payload copy of a
 * PSN that looks new. A first look without the lock is enough to decide
 * whether to copy: a PSN below cum_psn or with its bit set stays a duplicate
 * (cum_psn only grows); a PSN beyond the window is NACKed, and the sender
 * resends; a fresh-looking PSN placed meanwhile by another CPU is a
 * duplicate under the lock, and both copies hold the same bytes.
 */
static __always_inline int rx_prepare(struct xdp_md *ctx, const struct rx_pkt *d,
				      const struct nic_rq *rq, __s32 window, struct ack_info *ai,
				      struct rx_plan *plan)
{
	__s32 dist = MRC_PSN_DIFF(d->psn, rq->cum_psn);
	enum rx_verdict verdict;
	__u32 zero = 0;
	int ret;

	/* No sender's window reaches that far (its snd_una <= our cum_psn): a
	 * PSN never sent, not worth an answer. */
	if (dist >= NIC_BITMAP_BITS)
		return drop(NIC_CNT_DROP_DATA_RANGE);
	if (d->trimmed) { /* nothing to place: ask for the PSN again */
		int lasthop = d->dscp == MRC_DSCP_TRIMMED_LASTHOP;

		ai->flags |= MRC_ACK_F_TRIMMED;
		rx_nack(ai, plan, RX_NACK_TRIMMED,
			lasthop ? MRC_NACK_TRIMMED_LASTHOP : MRC_NACK_TRIMMED,
			lasthop ? NIC_CNT_NACK_TRIMMED_LASTHOP : NIC_CNT_NACK_TRIMMED);
		return PKT_GO;
	}
	if (dist >= window) {
		rx_nack(ai, plan, RX_NACK_OOR, MRC_NACK_PSN_OOR_WINDOW, NIC_CNT_NACK_OOR);
		return PKT_GO;
	}
	plan->fresh = dist >= 0 && !ring_test(rq, d->psn);
	/* As RC: only a request that passed every other check (addresses,
	 * state, a PSN in the window and new) is checked for access, and its
	 * access error is fatal; a duplicate is acknowledged, never placed. */
	if (plan->fresh) {
		ret = rx_region(rq, d, &plan->region, &plan->elem, &plan->in_off);
		if (ret != PKT_GO)
			goto failed;
	}
	if (plan->fresh && d->last) {
		verdict = msg_check(rq, d->flags_msn & MRC_DATA_MSN_MASK, d->has_imm);
		if (verdict == RX_BAD_MSN)
			return drop(NIC_CNT_DROP_BAD_MSN);
		if (verdict == RX_NO_SLOT) { /* as PSN_OOR_WINDOW: resent once messages complete */
			rx_nack(ai, plan, RX_NACK_OTHER, MRC_NACK_NO_RESOURCE,
				NIC_CNT_NACK_NO_RESOURCE);
			return PKT_GO;
		}
	}
	if (plan->fresh && d->payload_len) {
		ret = rx_copy(ctx, d, plan->region, plan->elem, plan->in_off);
		if (ret != PKT_GO)
			goto failed;
	}
	plan->batch = nic_cqe_scratch_lookup(&zero);
	if (!plan->batch)
		return drop(NIC_CNT_DROP_XDP_ERR); /* cannot happen: a 1-entry array */
	plan->batch->n = 0;
	plan->batch->done = 0;
	if (plan->fresh) /* only new data moves the delivery clock: a duplicate is no progress */
		plan->now = bpf_ktime_get_ns();
	return PKT_GO;

failed:
	if (ret != RX_REMOTE_ACCESS)
		return ret;
	/* Fatal for the QP (docs/wire-format.md 6): the daemon moves it to ERR. */
	ai->syndrome = MRC_AETH_NAK_REM_ACCESS;
	rx_nack(ai, plan, RX_NACK_OTHER, MRC_NACK_UNEXP_EVENT, NIC_CNT_NACK_REM_ACCESS);
	return PKT_GO;
}

/* Under the lock, a NACK decided before it: its counters and SACK view. */
static __always_inline void rx_locked_nack(struct nic_rq *rq, const struct rx_pkt *d,
					   __s32 window, struct ack_info *ai, enum rx_nack nack)
{
	__s32 dist;

	if (nack == RX_NACK_TRIMMED) {
		dist = MRC_PSN_DIFF(d->psn, rq->cum_psn);
		if (dist < 0 || (dist < window && ring_test(rq, d->psn)))
			ai->flags |= MRC_ACK_F_DUP; /* a retransmission of a PSN we have */
		rq->stats.trimmed_pkts++;
	}
	if (nack == RX_NACK_OOR)
		rq->stats.oor_pkts++;
	rq->ack_held = 0; /* the NACK carries cum_psn: it answers the held packets too */
	sack_view(rq, d->psn, window, ai);
	rq->stats.data_pkts++;
	rq->stats.nacks++;
}

/*
 * ACK coalescing (receive lock held; docs/nic-program.md, "ACK coalescing"):
 * may the answer to this placed packet wait for a later one? In or out of
 * order alike (per-packet spraying reorders every flow; the bitmap says
 * what arrived), as long as a SACK based at cum_psn reports it (less than
 * MRC_SACK_BITS past it), for a packet that is not LAST, not ECN-marked and
 * without AckReq, while fewer than ack_every - 1 answers are held and the
 * first held one is younger than ack_delay_ns. Every answer carries cum_psn
 * and the bitmap from it, which cover the held packets; any answer ends the run.
 */
static __always_inline int ack_hold(struct nic_rq *rq, const struct rx_pkt *d,
				    const struct ack_info *ai, __s32 dist, __u64 now)
{
	__u32 every = rq->ack_every ? rq->ack_every : NIC_ACK_EVERY;
	__u32 delay = rq->ack_delay_ns ? rq->ack_delay_ns : NIC_ACK_DELAY_NS;
	__u32 held = rq->ack_held;

	if (every > 1 && dist >= 0 && dist < MRC_SACK_BITS && !d->last && !d->ackreq &&
	    !(ai->flags & MRC_ACK_F_ECN) && held + 1 < every &&
	    (held == 0 || now - rq->ack_held_ns < delay)) {
		if (held == 0)
			rq->ack_held_ns = now;
		rq->ack_held = held + 1;
		return 1;
	}
	return 0; /* the caller ends the run */
}

/* Under the lock, the rest: a duplicate, or the placement (bit, cum_psn,
 * message, completions, counters, delivery clock). */
static __always_inline enum rx_verdict rx_locked_place(struct nic_rq *rq, const struct rx_pkt *d,
						       __s32 window, struct ack_info *ai,
						       struct rx_plan *plan)
{
	__s32 dist = MRC_PSN_DIFF(d->psn, rq->cum_psn);
	enum rx_verdict verdict;

	if (!plan->fresh || dist < 0 || ring_test(rq, d->psn)) {
		verdict = RX_DUP;
	} else {
		verdict = RX_PLACED;
		if (d->last)
			verdict = record_msg(rq, d->flags_msn & MRC_DATA_MSN_MASK, d->psn,
					     d->va - d->msg_off, d->msg_off + d->dmalen, d->imm,
					     d->has_imm);
		if (verdict == RX_PLACED) {
			ring_set(rq, d->psn);
			if (dist == 0)
				ring_advance(rq);
			complete_msgs(rq, plan->batch);
			rq->stats.placed_pkts++;
			rq->stats.placed_bytes += d->payload_len;
			note_delivery(rq, plan->now);
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
		sack_view(rq, d->psn, window, ai);
		plan->hold = verdict == RX_PLACED && ack_hold(rq, d, ai, dist, plan->now);
		if (!plan->hold)
			rq->ack_held = 0;
	}
	return verdict;
}

/* After the lock: the verdict's counters and events (to the QP's receive CQ, if
 * it has one), then the answer. */
static __always_inline int rx_finish(struct xdp_md *ctx, struct mrc_pkt *p, const struct rx_pkt *d,
				     const struct nic_rq *rq, struct ack_info *ai,
				     struct rx_plan *plan, enum rx_verdict verdict)
{
	switch (verdict) {
	case RX_BAD_MSN:
		return drop(NIC_CNT_DROP_BAD_MSN);
	case RX_NO_SLOT:
		ai->reason = MRC_NACK_NO_RESOURCE;
		ai->counter = NIC_CNT_NACK_NO_RESOURCE;
		return answer(ctx, p, d->dext, d->psn, ai);
	case RX_DUP:
		ai->flags |= MRC_ACK_F_DUP;
		count(NIC_CNT_DUP, 1);
		break;
	default:
		count(NIC_CNT_PLACED, 1);
		count(NIC_CNT_PLACED_BYTES, d->payload_len);
		timeline_add(plan->now, d->payload_len);
		if (plan->batch->done) {
			count(NIC_CNT_MSG_DONE, plan->batch->done);
			if (plan->batch->n)
				emit_completions(d->qpn, rq->recv_cq, plan->batch);
		}
		if (plan->hold) { /* a later answer's cum_psn acknowledges it */
			count(NIC_CNT_ACK_HELD, 1);
			return XDP_DROP;
		}
		break;
	}
	ai->syndrome = MRC_AETH_ACK;
	ai->reason = MRC_NACK_NONE;
	ai->counter = NIC_CNT_SACK;
	return answer(ctx, p, d->dext, d->psn, ai);
}

/* Receiver role: a WRITE or WRITE_IMM packet. */
static __always_inline int rx_data(struct xdp_md *ctx, struct mrc_pkt *p)
{
	struct rx_pkt d = {.has_imm = p->bth->opcode == MRC_OP_WRITE_IMM};
	struct rx_plan plan = {.nack = RX_NACK_NONE};
	struct ack_info ai = {};
	enum rx_verdict verdict;
	struct nic_rq *rq;
	__s32 window;
	__u64 *lock;
	int ret;

	ret = rx_parse(p, &d);
	if (ret != PKT_GO)
		return ret;
	ret = rx_qp_check(p, d.qpn, &rq);
	if (ret != PKT_GO)
		return ret;
	if (rq->mpr == 0 || rq->mpr > NIC_MPR_MAX)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	/* A trimmed header lost its MAC with its tail: it can only cause a NACK. */
	if (rq->auth && !d.trimmed &&
	    pkt_icrc(ctx, p) != data_mac(rq->auth_key, p->bth->opcode, d.qpn, d.psn, d.va, d.rkey,
					 d.dmalen, d.flags_msn, d.msg_off, d.imm))
		return drop(NIC_CNT_DROP_AUTH);
	ai.auth = rq->auth;
	ai.key[0] = rq->auth_key[0];
	ai.key[1] = rq->auth_key[1];
	window = rq->mpr * MRC_MPR_UNIT;
	ai.port_bitmap = host_ports(rq->local_host);
	ai.peer_qpn = rq->peer_qpn;
	ai.mpr = rq->dyn_mpr ? rq->mpr : 0; /* dynamic MPR: advertised only when enabled */
	ai.syndrome = MRC_AETH_NAK_PSN_SEQ;
	if ((p->ip->tos & MRC_ECN_MASK) == MRC_ECN_CE)
		ai.flags |= MRC_ACK_F_ECN;
	ret = rx_prepare(ctx, &d, rq, window, &ai, &plan);
	if (ret != PKT_GO)
		return ret;

	/* The one place that takes the receive lock: the verifier walks its
	 * spin loop once per place (NIC_RX_LOCK_TRIES). */
	lock = rx_lock(d.qpn);
	if (!lock)
		return drop(NIC_CNT_DROP_RX_BUSY);
	if (!rx_qp_owns_slot(d.qpn)) { /* deleted or set up again since rx_qp */
		rx_unlock(lock);
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	}
	if (plan.nack != RX_NACK_NONE) {
		rx_locked_nack(rq, &d, window, &ai, plan.nack);
		rx_unlock(lock);
		return answer(ctx, p, d.dext, d.psn, &ai);
	}
	verdict = rx_locked_place(rq, &d, window, &ai, &plan);
	rx_unlock(lock);
	return rx_finish(ctx, p, &d, rq, &ai, &plan, verdict);
}

#endif /* MRC_NIC_RX_H */
