/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_events.h: the one place each event record (nic_structs.h, "Events") is
 * built and written to the ring buffer nic_events, counted in EVENTS or
 * EVENTS_LOST, or to a completion queue's ring (nic_cq_rings), counted in
 * CQ_EVENTS or CQ_OVERRUN. Called after the locks: a ring-buffer write under
 * a lock would hold it longer.
 */
#ifndef MRC_NIC_EVENTS_H
#define MRC_NIC_EVENTS_H

#include "nic_common.h"

/* Every event record is 40 bytes (nic_structs.h); the counters say if it fit. */
static __always_inline void emit(void *rec)
{
	if (nic_events_output(rec, sizeof(struct nic_event)) == 0)
		count(NIC_CNT_EVENTS, 1);
	else
		count(NIC_CNT_EVENTS_LOST, 1);
}

/* The ring buffer of CQ cq (index + 1 in nic_cq_rings), or NULL if that index
 * has none. Looked up once per batch of records, and only when there is one. */
static __always_inline void *cq_ring(__u32 cq)
{
	__u32 idx = cq - 1;

	return nic_cq_rings_lookup(&idx);
}

/* n records (1 .. NIC_MSG_SLOTS, back to back at recs) into CQ cq's ring, as
 * one ring record: one helper call and no loop per batch (a write per record
 * took the verifier past its 1M budget: the engine's and the receiver's many
 * paths each walked the loop again). A full ring, or none, loses them and
 * never waits: an application that polls too slowly must not hold the NIC up. */
static __always_inline void cq_write(__u32 cq, void *recs, __u32 n)
{
	void *ring = cq_ring(cq);

	if (n > NIC_MSG_SLOTS)
		n = NIC_MSG_SLOTS;
	if (ring && n && bpf_ringbuf_output(ring, recs, n * sizeof(struct nic_event), 0) == 0) {
		count(NIC_CNT_CQ_EVENTS, n);
		return;
	}
	count(NIC_CNT_CQ_OVERRUN, n);
	if (ring) { /* full: the CQ's own record of it, which puts the CQ in error */
		__u32 idx = cq - 1;
		__u64 *lost = nic_cq_lost_lookup(&idx);

		if (lost)
			__sync_fetch_and_add(lost, n);
	}
}

/* NIC_EV_EV_STATE: EV ev of QP qpn went from old to new. To nic_events (the
 * lab's event log) and, where it happens, to the EV event queue of the QP's
 * host (nic_host_ctl.ev_event_cq, a CQ ring its daemon drains: every change
 * reaches it, however soon the next one follows; a full ring counts the lost
 * records in nic_cq_lost, the queue's precise drop count). */
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
	__u32 host = qpn >> NIC_QPN_HOST_SHIFT;
	struct nic_host_ctl *hc = nic_host_ctl_lookup(&host);

	emit(&e);
	if (hc && hc->ev_event_cq)
		cq_write(hc->ev_event_cq, &e, 1);
}

/* NIC_EV_LOSS: PSN psn, sent on ev at tx_ts, was declared lost when the
 * SACK of ack_psn came back. */
static __always_inline void emit_loss(__u32 qpn, __u32 psn, __u32 ev, __u64 tx_ts, __u32 ack_psn,
				      __u64 now)
{
	struct nic_loss_event e = {
		.type = NIC_EV_LOSS,
		.qpn = qpn,
		.psn = psn,
		.ev = ev,
		.tx_ts = tx_ts,
		.ack_psn = ack_psn,
		.ts = now,
	};

	emit(&e);
}

/* NIC_EV_QP_ERR: a fatal NACK of psn on ev (error NIC_ERR_NONE), or (ev,
 * syndrome, reason 0) a local error: a WQE the engine could not read when
 * about to send psn, or a NIC_KICK_FAIL. To nic_events always (the lab's
 * event log must see it) and to the QP's send CQ if it has one (cq, 0: none):
 * the application learns it there. */
static __always_inline void emit_qp_err(__u32 qpn, __u32 psn, __u32 ev, __u32 syndrome,
					__u32 reason, __u32 error, __u32 cq, __u64 now)
{
	struct nic_qp_err_event e = {
		.type = NIC_EV_QP_ERR,
		.qpn = qpn,
		.psn = psn,
		.ev = ev,
		.syndrome = syndrome,
		.reason = reason,
		.error = error,
		.ts = now,
	};

	emit(&e);
	if (cq)
		cq_write(cq, &e, 1);
}

/* NIC_EV_SEND_DONE: the completions engine_complete gathered (and stamped)
 * under the QP's lock, n of them: to the QP's send CQ as one ring record (cq,
 * 0: none: to nic_events, one ring record each). */
static __always_inline void emit_send_done(struct nic_tx_scratch *sc, __u32 n, __u32 cq)
{
	__u32 i;

	if (cq) {
		if (n)
			cq_write(cq, sc->done, n);
		return;
	}
	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		if (i >= n)
			break;
		emit(&sc->done[i]);
	}
}

/* NIC_EV_RECV_IMM: the completions gathered in batch under the receive lock,
 * to the QP's receive CQ as one ring record (cq, 0: none: to nic_events, one
 * ring record each). One count for the batch, not one per record: it runs
 * per placed packet. */
static __always_inline void emit_completions(__u32 qpn, __u32 cq, struct nic_cqe_batch *batch)
{
	struct nic_event ev = {.type = NIC_EV_RECV_IMM, .qpn = qpn};
	__u32 n = batch->n, sent = 0;
	int i;

	ev.ts = bpf_ktime_get_ns();
	if (cq) {
		/* The records side by side in the scratch, for one ring write;
		 * plain stores, as the verifier walks them for every path here. */
		for (i = 0; i < NIC_MSG_SLOTS; i++) {
			const struct nic_cqe *cqe = &batch->cqes[i];
			struct nic_event *out = &batch->out[i];

			if (i >= n)
				break;
			*out = ev;
			out->msn = cqe->msn;
			out->imm = cqe->imm;
			out->va = cqe->va;
			out->len = cqe->len;
		}
		cq_write(cq, batch->out, n);
		batch->n = 0;
		batch->done = 0;
		return;
	}
	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		struct nic_cqe *cqe = &batch->cqes[i];

		if (i >= n)
			break;
		ev.msn = cqe->msn;
		ev.imm = cqe->imm;
		ev.va = cqe->va;
		ev.len = cqe->len;
		sent += nic_events_output(&ev, sizeof(ev)) == 0;
	}
	count(NIC_CNT_EVENTS, sent);
	if (sent < n)
		count(NIC_CNT_EVENTS_LOST, n - sent);
	batch->n = 0;
	batch->done = 0;
}

#endif /* MRC_NIC_EVENTS_H */
