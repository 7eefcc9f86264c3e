/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_ev.h: the EV state machine's BPF half (docs/nic-program.md, "EV
 * states"): RTT samples, SKIP, and ASSUMED_BAD after a silent loss.
 */
#ifndef MRC_NIC_EV_H
#define MRC_NIC_EV_H

#include "nic_events.h"

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


/*
 * A PSN sent on EV `value` of QP qpn was lost silently (the head scan, a
 * timeout): the EV becomes ASSUMED_BAD (a DENIED one stays so), with an event
 * when its state changes. Called after the QP's lock; takes the EV's.
 */
static __always_inline void ev_lost_silently(__u32 qpn, __u32 value, __u32 cause, __u32 psn,
					     __u32 queued, __u64 now)
{
	struct nic_ev_key key = {.qpn = qpn, .ev = value};
	struct nic_ev *ev = value ? nic_evs_lookup(&key) : NULL;
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
	ev->good_probes = 0; /* a loss starts the count of good probes again */
	ev->state = st;
	bpf_spin_unlock(&ev->lock);
	if (old != st)
		emit_ev_state(qpn, value, old, st, cause, psn, now);
}

/*
 * A PSN sent on EV `value` at tx_ts is overdue (the head scan; the walk's
 * are ack_ev_feedback's): later packets of the QP were answered, it was not. Late is not lost
 * (docs/nic-program.md, "Blame"): the EV is suspected (its oldest overdue
 * transmission kept in suspect_ts) and blamed as a silent loss only once it
 * has been suspected for silent_ns with no answer on it (cause TIMEOUT: MRC's
 * rule); ev_answered blames it sooner when a later packet of it is answered
 * first. silent_ns 0: blamed at once (cause LOSS). Returns 1 if blamed.
 * Called after the QP's lock; takes the EV's.
 */
static __always_inline int ev_overdue(__u32 qpn, __u32 value, __u32 psn, __u64 tx_ts,
				      __u32 silent_ns, __u64 now)
{
	struct nic_ev_key key = {.qpn = qpn, .ev = value};
	struct nic_ev *ev = value ? nic_evs_lookup(&key) : NULL;
	__u32 old, st, blame;

	if (!ev)
		return 0;
	bpf_spin_lock(&ev->lock);
	old = ev->state;
	st = ev_state_now(ev, now);
	ev->stats.retx_queued++;
	if (!ev->suspect_ts || tx_ts < ev->suspect_ts)
		ev->suspect_ts = tx_ts;
	blame = now - ev->suspect_ts >= silent_ns; /* always, with silent_ns 0 */
	if (blame) {
		ev->stats.lost_pkts++;
		ev->suspect_ts = 0;
		ev->good_probes = 0;
		if (st != NIC_EVS_DENIED)
			st = NIC_EVS_ASSUMED_BAD;
	}
	ev->state = st;
	bpf_spin_unlock(&ev->lock);
	if (silent_ns)
		count(blame ? NIC_CNT_SUSPECT_BLAMED : NIC_CNT_LOST_SUSPECT, 1);
	if (old != st)
		emit_ev_state(qpn, value, old, st, silent_ns ? NIC_EVC_TIMEOUT : NIC_EVC_LOSS, psn,
			      now);
	return blame;
}

/*
 * An answer (SACK or NACK, fresh or stale) echoing EV `value`'s transmission
 * of echo_ts, for an EV under suspicion: the suspect itself or an earlier
 * packet of the EV came, so the path delivers, late (cleared); or a packet
 * sent on it more than skew_ns after the suspect came first, and one path
 * does not reorder, so the suspect was lost on it (blamed, cause LOSS). Only
 * a SACK blames: a trimmed header may overtake queued data. Packets sent
 * within skew_ns (the QP's reorder window) of each other may swap on one
 * path here (two CPUs forward it): such an answer decides nothing. Takes the
 * EV's lock.
 */
static __always_inline void ev_answered(__u32 qpn, struct nic_ev *ev, __u32 value, __u32 psn,
					__u64 echo_ts, int sack, __u64 skew_ns, __u64 now)
{
	__u32 old, st;
	int blame, had;

	if (!echo_ts || !*(volatile __u64 *)&ev->suspect_ts)
		return;
	bpf_spin_lock(&ev->lock);
	old = ev->state;
	st = ev_state_now(ev, now);
	if (echo_ts > ev->suspect_ts && (!sack || echo_ts - ev->suspect_ts <= skew_ns)) {
		bpf_spin_unlock(&ev->lock);
		return;
	}
	had = ev->suspect_ts != 0;
	blame = had && echo_ts > ev->suspect_ts;
	ev->suspect_ts = 0;
	if (blame) {
		ev->stats.lost_pkts++;
		ev->good_probes = 0;
		if (st != NIC_EVS_DENIED)
			st = NIC_EVS_ASSUMED_BAD;
	}
	ev->state = st;
	bpf_spin_unlock(&ev->lock);
	if (had)
		count(blame ? NIC_CNT_SUSPECT_BLAMED : NIC_CNT_SUSPECT_CLEARED, 1);
	if (old != st && st == NIC_EVS_ASSUMED_BAD)
		emit_ev_state(qpn, value, old, st, NIC_EVC_LOSS, psn, now);
}

#endif /* MRC_NIC_EV_H */
