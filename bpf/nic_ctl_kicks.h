/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_ctl_kicks.h: the kicks that change a send QP rather than send from it
 * (struct nic_kick ops other than SEND, from the daemon): a timeout's
 * retransmissions, a new cwnd and RTT target, an EV replaced in a slot, a QP
 * failed with a reason. Each is a path of its own beside engine_run
 * (nic_engine.h), dispatched by the program's kick handler (nic_xdp.c).
 */
#ifndef MRC_NIC_CTL_KICKS_H
#define MRC_NIC_CTL_KICKS_H

#include "nic_engine.h"

/*
 * A timeout kick (struct nic_kick, NIC_KICK_TIMEOUT): queue up to max of the
 * oldest PSNs in flight that are neither acknowledged nor queued and were
 * last sent age_ns ago or more, each with the EV of its latest transmission
 * (its resend goes out on another), and put those EVs in ASSUMED_BAD (with
 * NIC_TIMEOUT_F_REORDER in the kick's arg, the reorder timer's: leave them
 * be). It sends nothing: the send kick that follows does. A path of its own,
 * not a step of engine_run: inside it the loops would multiply the
 * verifier's work by the engine's branches.
 */
static __always_inline int engine_timeout(const struct engine_req *req, __u32 max, __u64 age_ns,
					  __u32 reorder)
{
	struct nic_timeout_scratch *sc;
	struct nic_tx_ring *ring;
	struct nic_sq *sq;
	__u32 qpn = req->qpn, ring_id, tail0, n, zero = 0;
	__u64 now = bpf_ktime_get_ns();
	int i;

	sq = nic_tx_qps_lookup(&qpn);
	if (!sq)
		return engine_idle(req, NIC_CNT_DROP_UNKNOWN_QP);
	ring_id = sq->ring;
	ring = nic_tx_ring_lookup(&ring_id);
	sc = nic_timeout_scratch_lookup(&zero);
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

	/* The EVs that lost them: ASSUMED_BAD (not DENIED: the operator's). A
	 * reorder kick's PSNs are overdue, not timed out: their EVs are left to
	 * the head scan and the silence rule (docs/nic-program.md, "Blame").
	 * (ev_overdue here, in a loop of NIC_TIMEOUT_MAX, took the verifier past
	 * its 1M instructions.) */
	for (i = 0; i < NIC_TIMEOUT_MAX; i++) {
		if (reorder || i >= n)
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
	struct nic_sq *sq = nic_tx_qps_lookup(&qpn);

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
	struct nic_sq *sq = nic_tx_qps_lookup(&qpn);

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

/*
 * A fail kick (struct nic_kick, NIC_KICK_FAIL): the daemon, whose retry budget
 * for the QP is spent, moves it to ERR under its lock; the QP_ERR record
 * (error = reason, psn = snd_una) goes where a fatal NACK's goes, nic_events
 * and the QP's send CQ, so that the application learns it from its CQ. Sends
 * nothing. A QP already in ERR was reported when it got there: idle.
 */
static __always_inline int engine_fail(const struct engine_req *req, __u32 reason)
{
	__u32 qpn = req->qpn, was, psn;
	struct nic_sq *sq = nic_tx_qps_lookup(&qpn);

	if (!sq)
		return engine_idle(req, NIC_CNT_DROP_UNKNOWN_QP);
	bpf_spin_lock(&sq->lock);
	was = sq->state;
	sq->state = NIC_QPS_ERR;
	psn = sq->snd_una;
	bpf_spin_unlock(&sq->lock);
	if (was == NIC_QPS_ERR)
		return engine_idle(req, NIC_CNT_KICK_IDLE);
	emit_qp_err(qpn, psn & MRC_PSN_MASK, 0, 0, 0, reason, sq->send_cq, bpf_ktime_get_ns());
	count(NIC_CNT_FAIL_KICKS, 1);
	return XDP_DROP;
}

#endif /* MRC_NIC_CTL_KICKS_H */
