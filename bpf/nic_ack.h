/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_ack.h: the sender's SACK/NACK handling (rx_ack): acknowledgements on
 * the send QP's rings, congestion signals, loss detection, then the echoed
 * EV's feedback and the events; and PROBE_REPLY (rx_probe_reply).
 */
#ifndef MRC_NIC_ACK_H
#define MRC_NIC_ACK_H

#include "nic_answers.h"
#include "nic_loss.h"

/* ---- Sender role: the send QP's rings (callers hold sq->lock) ------------ */

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
	ACK_STALE_FATAL, /* fatal NACK of a PSN not outstanding: drop, the QP lives */
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
 * The ACK clock for a SACK that acknowledged n > 1 PSNs (the receiver
 * coalesced its answers): this frame becomes a kick of the QP, broadcast to
 * the host's fan-out devmap for min(n, NIC_FANOUT_MAX), whose entries are the
 * host's doorbell device, so that the NIC end of the doorbell runs the engine
 * once per copy: up to n packets for n acknowledged, where the frame alone
 * gives one. ENGINE_RUN (the engine in this frame, as for one PSN) when the
 * host has no fan-out maps. docs/nic-program.md, "ACK coalescing".
 */
static __always_inline int ack_fanout(struct xdp_md *ctx, __u32 qpn, __u32 host, __u32 n)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct nic_kick *k = (void *)(eth + 1);
	__u32 key;

	if (n > NIC_FANOUT_MAX)
		n = NIC_FANOUT_MAX;
	if (n < 2 || host >= NIC_MAX_HOSTS || (void *)(k + 1) > data_end)
		return ENGINE_RUN;
	key = host * NIC_FANOUT_MAX + n - 1;
	/* The copies are made after the program returns: the frame may change now. */
	if (nic_fanout_broadcast(&key) != XDP_REDIRECT)
		return ENGINE_RUN;
	eth->h_proto = bpf_htons(NIC_KICK_ETHERTYPE);
	k->qpn = qpn;
	k->op = NIC_KICK_SEND;
	k->arg = 0;
	k->age_ns = 0;
	count(NIC_CNT_ACK_FANOUT, 1);
	return XDP_REDIRECT;
}

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

/* An ACK's fields, host order. */
struct ack_pkt {
	__u64 bits;    /* MRC_ACK.sack_bitmap */
	__u64 echo_ts; /* the echoed transmission's tx_ts */
	__u32 qpn, psn, cum, base, syndrome, reason, flags, echo_ev, ports;
	__u32 mpr; /* the MPR the receiver advertises (dynamic MPR; 0: none) */
	int kind; /* enum ack_kind */
};

/* Parse AETH MRC_ACK (exact length) and check that syndrome and reason agree. */
static __always_inline int ack_parse(struct mrc_pkt *p, struct ack_pkt *a)
{
	struct mrc_ack_ext *ack;
	struct mrc_aeth *aeth;

	if (p->udp_payload < MRC_ACK_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_SHORT);
	if (p->udp_payload > MRC_ACK_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_BAD_LEN);
	if (parse_aeth(&p->c, p->end, &aeth) || parse_ack_ext(&p->c, p->end, &ack))
		return drop(NIC_CNT_DROP_TRUNCATED);

	a->syndrome = bpf_ntohl(aeth->smsn) >> MRC_AETH_SYN_SHIFT;
	a->reason = ack->nack_reason;
	a->kind = ack_kind(a->syndrome, a->reason);
	if (!a->kind)
		return drop(NIC_CNT_DROP_BAD_ACK);
	a->qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	a->psn = bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK;
	a->cum = bpf_ntohl(ack->mpr_cum) & MRC_ACK_CUM_PSN_MASK;
	a->mpr = (bpf_ntohl(ack->mpr_cum) & MRC_ACK_MPR_MASK) >> MRC_ACK_MPR_SHIFT;
	a->base = bpf_ntohl(ack->sack_base) & MRC_ACK_SACK_PSN_MASK;
	a->bits = bpf_ntohll(ack->sack_bitmap);
	a->echo_ts = bpf_ntohll(ack->echo_ts);
	a->echo_ev = bpf_ntohs(ack->echo_ev);
	a->flags = ack->flags;
	a->ports = bpf_ntohl(ack->port_bitmap);
	return PKT_GO;
}

/* Under sq->lock: the window checks, the acknowledgements, the congestion
 * signals, then a NACK's retransmission or QP error, or the loss detection
 * a fresh SACK starts. What it decided goes to sc. */
static __always_inline void ack_locked(struct nic_sq *sq, struct nic_tx_ring *ring,
				       struct nic_ack_scratch *sc, const struct ack_pkt *a,
				       __u64 now)
{
	__s32 inflight = MRC_PSN_DIFF(sq->snd_nxt, sq->snd_una);
	__u32 n;

	if (inflight < 0 || inflight > (__s32)(sq->mpr * MRC_MPR_UNIT)) {
		sc->verdict = ACK_CONFIG;
		return;
	}
	if (MRC_PSN_DIFF(a->psn, sq->snd_nxt) >= 0 || MRC_PSN_DIFF(a->cum, sq->snd_nxt) > 0) {
		sc->verdict = ACK_RANGE;
		return;
	}
	/* A receiver NACKs fatally only a packet it did not place, so a fatal
	 * NACK must name a PSN still outstanding; anything else is a ghost. */
	if (a->kind == ACK_FATAL &&
	    (MRC_PSN_DIFF(a->psn, sq->snd_una) < 0 || BM_TEST(sq->acked, a->psn))) {
		sc->verdict = ACK_STALE_FATAL;
		return;
	}
	if (a->kind == ACK_SACK)
		sq->stats.sacks++;
	else
		sq->stats.nacks++;

	/* Feedback: once per transmission of BTH.psn (the echoed bit). */
	if (MRC_PSN_DIFF(a->psn, sq->snd_una) < 0) {
		sq->stats.stale_acks++;
	} else if (BM_TEST(sq->echoed, a->psn)) {
		sq->stats.dup_acks++;
	} else {
		BM_SET(sq->echoed, a->psn);
		sc->fb = 1;
		sq->peer_ports = a->ports;
		sq->peer_ports_ns = now;
		sq->peer_mpr = a->mpr; /* dynamic MPR: the engine's window follows it */
	}

	/* Acknowledgements: the cumulative PSN, the bitmap, a SACK's own PSN. */
	n = sq_cum_ack(sq, a->cum);
	n += sq_sack_bits(sq, a->base, a->bits);
	if (a->kind == ACK_SACK && MRC_PSN_DIFF(a->psn, sq->snd_una) >= 0 &&
	    !BM_TEST(sq->acked, a->psn)) {
		BM_SET(sq->acked, a->psn);
		n++;
	}
	sq_advance(sq);
	sq->stats.acked_pkts += n;
	sc->newly = n;
	if (sc->fb)
		cc_account(sq, a->kind, a->reason, a->flags, n, a->echo_ts, now);

	if (a->kind == ACK_RETRY) {
		/* Resend it, unless it has been acknowledged or queued meanwhile. */
		if (MRC_PSN_DIFF(a->psn, sq->snd_una) >= 0 && !BM_TEST(sq->acked, a->psn) &&
		    !BM_TEST(sq->retx, a->psn))
			sc->queued = sq_queue(sq, a->psn, a->echo_ev, NIC_RETX_NACK, a->reason);
	} else if (a->kind == ACK_FATAL) {
		sq->state = NIC_QPS_ERR;
		sq->stats.fatal_nacks++;
		sc->fatal = 1;
	} else if (sc->fb) {
		__u64 wnd = reo_window(sq, a->echo_ts, now);

		loss_walk(sq, ring, sc, a->psn, a->echo_ev, a->echo_ts, wnd, now);
		head_scan(sq, ring, sc, a->echo_ts, wnd);
	}
	/* Last: its branches then cost the verifier once, not once per path above. */
	if (a->flags & MRC_ACK_F_DUP)
		reo_learn(sq, a->echo_ts, now);
}

/* The echoed EV's feedback, under its lock: counters, an RTT sample, SKIP on
 * a fabric trim or ECN, ASSUMED_BAD after the walk's n losses. Its state
 * before and after go to *old and *st. */
static __always_inline void ack_ev_feedback(struct nic_ev *ev, const struct ack_pkt *a,
					    __u32 queued, __u32 n, __u64 oldest, __u32 silent_ns,
					    __u64 now, __u32 *old, __u32 *st)
{
	int skip = 0;

	bpf_spin_lock(&ev->lock);
	*old = ev->state;
	*st = ev_state_now(ev, now);
	switch (a->reason) {
	case MRC_NACK_NONE:
		ev->stats.acks++;
		ev_rtt(ev, now, a->echo_ts);
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
	if (a->flags & MRC_ACK_F_ECN) {
		ev->stats.ecn_marks++;
		skip = 1;
	}
	if (skip)
		*st = ev_skip(ev, *st, now);
	ev->stats.retx_queued += queued + n;
	if (n && silent_ns) {
		/* Suspected, not blamed: here too a CPU that stalls can hold one
		 * packet of a path behind a later one (docs/nic-program.md, "Blame").
		 * ev_answered blames it when the next answer on it is not the hole. */
		if (!ev->suspect_ts || oldest < ev->suspect_ts)
			ev->suspect_ts = oldest;
	} else if (n) {
		ev->stats.lost_pkts += n;
		if (*st != NIC_EVS_DENIED)
			*st = NIC_EVS_ASSUMED_BAD;
		ev->good_probes = 0; /* a loss starts the count of good probes again */
	}
	ev->state = *st;
	bpf_spin_unlock(&ev->lock);
}

/* After the locks: the ACK's events (QP error, also to the QP's send CQ; EV
 * state, losses) and counters. */
static __always_inline void ack_report(const struct nic_sq *sq, const struct ack_pkt *a,
				       struct nic_ack_scratch *sc, __u32 n, __u32 old, __u32 st,
				       __u64 now)
{
	__u32 i;

	/* n <= NIC_LOSS_WALK_MAX (the caller's clamp): hidden from clang, so
	 * that it keeps the loop's own bound, which the verifier needs. */
	asm volatile("" : "+r"(n));
	if (sc->fatal)
		emit_qp_err(a->qpn, a->psn, a->echo_ev, a->syndrome, a->reason, NIC_ERR_NONE,
			    sq->send_cq, now);
	if (n && old != st && st == NIC_EVS_ASSUMED_BAD)
		emit_ev_state(a->qpn, a->echo_ev, old, st, NIC_EVC_LOSS, sc->lost[0].psn, now);
	for (i = 0; i < NIC_LOSS_WALK_MAX; i++) {
		if (i >= n)
			break;
		emit_loss(a->qpn, sc->lost[i].psn, a->echo_ev, sc->lost[i].tx_ts, a->psn, now);
	}
	if (sc->n_head)
		head_losses(a->qpn, a->psn, sc, sq->silent_ns, now);

	count(NIC_CNT_ACKED, sc->newly);
	count(NIC_CNT_LOST, n + sc->n_head);
	count(NIC_CNT_LOST_HEAD, sc->n_head);
	count(NIC_CNT_RETX_QUEUED, sc->queued + n + sc->n_head);
}

/* Sender role: a SACK or NACK for one of our send QPs. */
static __always_inline int rx_ack(struct xdp_md *ctx, struct mrc_pkt *p, struct engine_req *req)
{
	struct ack_pkt a = {};
	struct nic_ack_scratch *sc;
	struct nic_tx_ring *ring;
	struct nic_ev_key key = {};
	struct nic_sq *sq;
	struct nic_ev *ev;
	__u32 ring_id, zero = 0, old = 0, st = 0, n;
	__u64 now, oldest;
	int verdict = ack_parse(p, &a);

	if (verdict != PKT_GO)
		return verdict;
	verdict = tx_qp_check(p, a.qpn, &sq);
	if (verdict != PKT_GO)
		return verdict;
	if (sq->auth && pkt_icrc(ctx, p) != ack_mac(sq->auth_key, a.qpn, a.psn, a.cum, a.base,
						    a.bits, a.syndrome, a.reason, a.flags,
						    a.echo_ev, a.ports))
		return drop(NIC_CNT_DROP_AUTH);
	if (sq->mpr == 0 || sq->mpr > NIC_MPR_MAX)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	ring_id = sq->ring;
	ring = nic_tx_ring_lookup(&ring_id);
	if (!ring)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	sc = nic_ack_scratch_lookup(&zero);
	if (!sc)
		return drop(NIC_CNT_DROP_XDP_ERR); /* cannot happen: a 1-entry array */
	key.qpn = a.qpn;
	key.ev = a.echo_ev;
	ev = nic_evs_lookup(&key);
	now = bpf_ktime_get_ns();
	sc->verdict = ACK_DONE;
	sc->newly = 0;
	sc->fb = 0;
	sc->queued = 0;
	sc->fatal = 0;
	sc->n_lost = 0;
	sc->n_head = 0;

	bpf_spin_lock(&sq->lock);
	ack_locked(sq, ring, sc, &a, now);
	bpf_spin_unlock(&sq->lock);

	if (sc->verdict == ACK_CONFIG)
		return drop(NIC_CNT_DROP_QP_CONFIG);
	if (sc->verdict == ACK_RANGE)
		return drop(NIC_CNT_DROP_ACK_RANGE);
	if (sc->verdict == ACK_STALE_FATAL)
		return drop(NIC_CNT_DROP_NACK_STALE);
	n = sc->n_lost;
	if (n > NIC_LOSS_WALK_MAX)
		n = NIC_LOSS_WALK_MAX;
	oldest = n >= 1 ? sc->lost[n - 1].tx_ts : 0; /* the walk goes back in time */
	/* Every answer echoing a suspected EV, stale ones too: a late original's
	 * SACK comes after its resend's (docs/nic-program.md, "Blame"). Before
	 * this answer's own walk suspects it. */
	if (ev)
		ev_answered(a.qpn, ev, a.echo_ev, a.psn, a.echo_ts, a.kind == ACK_SACK,
			    sq->reo_wnd_ns, now);
	if (sc->fb && ev)
		ack_ev_feedback(ev, &a, sc->queued, n, oldest, sq->silent_ns, now, &old, &st);
	else if (sc->fb)
		count(NIC_CNT_UNKNOWN_EV, 1);
	if (n && sq->silent_ns)
		count(NIC_CNT_LOST_SUSPECT, n);
	ack_report(sq, &a, sc, n, old, st, now);
	verdict = ack_done(p, req, a.qpn, sq->engine, sc->fb | sc->newly | sc->queued | sc->fatal);
	if (verdict == ENGINE_RUN && sc->newly > 1)
		return ack_fanout(ctx, a.qpn, sq->local_host, sc->newly);
	return verdict;
}

/* ---- Sender role: PROBE_REPLY --------------------------------------------- */

/*
 * One more good PROBE_REPLY for an ASSUMED_BAD EV (ev->lock held): is it the
 * `need`-th since the EV went bad (nic_sq.probe_good; 0 and 1: the first)?
 * Then the count starts again. A loss on the EV resets it (ack_ev_feedback,
 * ev_lost), so the replies counted are those since its latest loss.
 */
static __always_inline int probe_good_enough(struct nic_ev *ev, __u32 need)
{
	__u32 n = ev->good_probes + 1;

	if (n < need) {
		ev->good_probes = n;
		return 0;
	}
	ev->good_probes = 0;
	return 1;
}

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

	if (verdict != PKT_GO)
		return verdict;
	if (parse_probe_ext(&p->c, p->end, &pe))
		return drop(NIC_CNT_DROP_TRUNCATED);
	qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	if (qpn == MRC_EP_QPN) /* to one of our endpoint probes (nic_answers.h) */
		return rx_ep_probe_reply(p, pe);
	if (pe->flags & MRC_PROBE_F_REVERSE) /* for a receive QP's reverse EV (nic_answers.h) */
		return rx_rev_probe_reply(ctx, p, pe);
	verdict = tx_qp_check(p, qpn, &sq);
	if (verdict != PKT_GO)
		return verdict;
	if (sq->auth && !probe_mac_ok(ctx, p, pe, sq->auth_key))
		return drop(NIC_CNT_DROP_AUTH);
	key.qpn = qpn;
	key.ev = bpf_ntohs(pe->ev);
	ev = nic_evs_lookup(&key);
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
	if (st == NIC_EVS_ASSUMED_BAD && probe_good_enough(ev, sq->probe_good))
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

#endif /* MRC_NIC_ACK_H */
