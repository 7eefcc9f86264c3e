/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_events.h: the one place each event record (nic_structs.h, "Events") is
 * built and written to the ring buffer nic_events, counted in EVENTS or
 * EVENTS_LOST. Called after the locks: a ring-buffer write under a lock
 * would hold it longer.
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

/* NIC_EV_EV_STATE: EV ev of QP qpn went from old to new. */
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

/* NIC_EV_QP_ERR: a fatal NACK of psn on ev, or (ev, syndrome, reason 0) a
 * WQE the engine could not read when about to send psn. */
static __always_inline void emit_qp_err(__u32 qpn, __u32 psn, __u32 ev, __u32 syndrome,
					__u32 reason, __u64 now)
{
	struct nic_qp_err_event e = {
		.type = NIC_EV_QP_ERR,
		.qpn = qpn,
		.psn = psn,
		.ev = ev,
		.syndrome = syndrome,
		.reason = reason,
		.ts = now,
	};

	emit(&e);
}

/* NIC_EV_SEND_DONE: the completions engine_complete gathered under the QP's
 * lock, n of them, stamped now. */
static __always_inline void emit_send_done(struct nic_tx_scratch *sc, __u32 n, __u64 now)
{
	__u32 i;

	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		if (i >= n)
			break;
		sc->done[i].ts = now;
		emit(&sc->done[i]);
	}
}

/* NIC_EV_RECV_IMM: the completions gathered in batch under the receive lock.
 * One count for the batch, not one per record: it runs per placed packet. */
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
		sent += nic_events_output(&ev, sizeof(ev)) == 0;
	}
	count(NIC_CNT_EVENTS, sent);
	if (sent < n)
		count(NIC_CNT_EVENTS_LOST, n - sent);
	batch->n = 0;
	batch->done = 0;
}

#endif /* MRC_NIC_EVENTS_H */
