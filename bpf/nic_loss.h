/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_loss.h: loss detection on the sender (docs/nic-program.md, "Loss
 * detection"): the retransmit queue's producer, the loss walk per EV, and
 * the head scan by time. Callers hold sq->lock, except head_losses.
 */
#ifndef MRC_NIC_LOSS_H
#define MRC_NIC_LOSS_H

#include "nic_ev.h"

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
 * The loss walk (docs/nic-program.md, "Loss detection"): the SACK of psn, sent on ev
 * at tx_ts, has arrived; every earlier packet on ev that is still
 * unacknowledged is lost. Follows prev_psn from psn's entry, which must be the
 * transmission the SACK echoes. Lost PSNs are queued and listed in sc.
 */
static __always_inline void loss_walk(struct nic_sq *sq, struct nic_tx_ring *ring,
				      struct nic_ack_scratch *sc, __u32 psn, __u32 ev,
				      __u64 tx_ts, __u64 wnd, __u64 now)
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
		if (wnd && pe->tx_ts + wnd > now)
			break; /* RACK's rule too: not lost before a reorder window has
				* passed (a stalled CPU can hold one packet of a path) */
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
 * The head scan (docs/nic-program.md, "Loss detection"): a SACK echoes a transmission
 * sent at echo_ts; the PSNs of the window last sent more than reo_wnd_ns
 * before it, and neither acknowledged nor queued, are lost. A first pass
 * looks at the head (snd_una on); when all of it is examined, a second one
 * goes on from where the last scan stopped (struct nic_sq.scan_psn), so that
 * the losses of a whole window are found in a few SACKs, not one head's worth
 * per round trip.
 */
static __always_inline __u64 reo_window(struct nic_sq *sq, __u64 echo_ts, __u64 now)
{
	__u64 wnd = sq->reo_wnd_ns, rtt, recent = sq->rtt_recent_ns;
	__u64 learned = sq->reo_learned_ns;

	if (!wnd || !echo_ts || echo_ts > now)
		return 0; /* off, or no timestamp of ours */
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
	/* A late packet seen lately (reo_learn): the paths here can be that
	 * much slower than others without losing anything. Forgotten by a
	 * 2^-NIC_REO_LEARN_SHIFT part per SACK and at least 1 ns, so that a
	 * window below 2^NIC_REO_LEARN_SHIFT ns still goes. */
	if (learned > wnd)
		wnd = learned;
	sq->reo_learned_ns = learned - (learned >> NIC_REO_LEARN_SHIFT) - (learned != 0);
	return wnd;
}

static __always_inline void head_scan(struct nic_sq *sq, struct nic_tx_ring *ring,
				      struct nic_ack_scratch *sc, __u64 echo_ts, __u64 wnd)
{
	__u32 psn = sq->snd_una;
	__u64 before;

	if (!wnd || echo_ts <= wnd)
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

/*
 * A duplicate's SACK (MRC_ACK_F_DUP; sq->lock held): the copy it echoes came
 * after another copy of its PSN, typically an original the head scan had
 * given up on, so the window that condemned it was too short (RACK's DSACK
 * rule, RFC 8985 7.2). If the echoed copy is that original, its round trip
 * says how late it was. If it is the resend (the original came first), its
 * round trip says nothing of the original's delay: then, as RACK does, the
 * window grows by half the QP's base window, at most once per window
 * (a stall makes a burst of duplicates: one step for it, not one each). Up to
 * silent_ns, forgotten slowly (reo_window); with silent_ns 0, nothing is
 * learned.
 */
static __always_inline void reo_learn(struct nic_sq *sq, __u64 echo_ts, __u64 now)
{
	__u64 late, wnd = sq->reo_wnd_ns, learned = sq->reo_learned_ns;

	if (!sq->silent_ns || !echo_ts || echo_ts > now)
		return;
	late = now - echo_ts;
	if (learned > wnd)
		wnd = learned;
	if (sq->rtt_recent_ns > wnd)
		wnd = sq->rtt_recent_ns;
	if (now - sq->reo_grown_ts >= wnd) {
		sq->reo_grown_ts = now;
		if (late < wnd + (sq->reo_wnd_ns >> 1))
			late = wnd + (sq->reo_wnd_ns >> 1);
	}
	if (late > sq->silent_ns)
		late = sq->silent_ns;
	if (late > learned)
		sq->reo_learned_ns = late;
}

/* The head scan's losses: their EVs (suspected, or blamed: ev_overdue), then
 * a loss record each. */
static __always_inline void head_losses(__u32 qpn, __u32 ack_psn, struct nic_ack_scratch *sc,
					__u32 silent_ns, __u64 now)
{
	int i;

	for (i = 0; i < NIC_HEAD_LOST; i++) {
		struct nic_lost *l = &sc->head[i];

		if (i >= sc->n_head)
			break;
		ev_overdue(qpn, l->ev, l->psn, l->tx_ts, silent_ns, now);
		emit_loss(qpn, l->psn, l->ev, l->tx_ts, ack_psn, now);
	}
}


#endif /* MRC_NIC_LOSS_H */
