/* SPDX-License-Identifier: Apache-2.0 */
/*
 * post.c: posting and the QPs' completions.
 *
 * The same driver as mrc_nic/verbs (qp_post.py, qp_completions.py) over
 * mrc_nic/nic/driver, in C, on the same bpf/ headers: post_send writes WQEs
 * (struct nic_wqe) into the QP's slots of the mmapped nic_wq, publishes
 * `posted`, and rings the doorbell once per call; WRs beyond the NIC's
 * sq_depth wait here and go in as the NIC completes WQEs (every post and
 * poll moves them).
 */
#include "native.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- posting ---------------------------------------------------------------- */

static void wc_of(struct ibv_wc *wc, struct nv_qp *q, __u64 wr_id, enum ibv_wc_status status,
		  enum ibv_wc_opcode opcode)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = wr_id;
	wc->status = status;
	wc->opcode = opcode;
	wc->qp_num = q->qp.qp_num;
	wc->vendor_err = status ? 1 : 0;
}

/* A WRITE_WITH_IMM message completed: the oldest posted receive takes it. */
static void recv_done(struct nv_qp *q, const struct nic_event *m)
{
	struct ibv_wc wc;

	wc_of(&wc, q, q->recvs[q->r_head++ % q->r_cap], IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
	wc.byte_len = m->len;
	wc.imm_data = htonl(m->imm);
	wc.wc_flags = IBV_WC_WITH_IMM;
	nv_cq_deliver(q->rcq, &wc);
}

/* Ring the doorbell: `packets` engine runs (each sends at most one packet;
 * the ACKs clock out the rest). */
static void qp_kick(struct nv_qp *q, __u32 packets)
{
	struct nv_context *nc = q->nc;

	if (packets > NV_LIVE_BATCH_MAX)
		packets = NV_LIVE_BATCH_MAX;
	if (!packets)
		packets = 1;
	if (q->frame && packets <= NV_DOORBELL_FRAMES_MAX) {
		__u32 i;

		for (i = 0; i < packets; i++)
			if (send(nc->db_fd, q->frame, nc->db_frame_len, MSG_DONTWAIT) < 0)
				break;
		if (i == packets)
			return;
	}
	nv_kick_run(nc->prog_fd, q->qp.qp_num, packets);
}

/* Queued WQEs into the NIC's free slots, then the doorbell. Under q->lock. */
int nv_qp_push(struct nv_qp *q)
{
	__u32 done = __atomic_load_n(&q->wq->done, __ATOMIC_ACQUIRE);
	__u32 free_slots = q->sq_depth - (q->posted - done), packets = 0, seg = q->nc->seg_size;

	while (free_slots && q->q_head != q->q_tail) {
		struct nv_wqe_q *e = &q->wq_q[q->q_head++ % q->q_cap];

		q->wq->wqes[q->posted % NIC_MSG_SLOTS] = e->wqe;
		if (e->wr != ~0U)
			q->wrs[e->wr % q->wr_cap].last_wqe = q->posted;
		if (e->wr != ~0U)
			q->wrs[e->wr % q->wr_cap].wqes = 0;
		q->posted++;
		free_slots--;
		packets += e->wqe.len ? (e->wqe.len + seg - 1) / seg : 1;
	}
	if (!packets)
		return 0;
	__atomic_store_n(&q->wq->posted, q->posted, __ATOMIC_RELEASE); /* after the WQEs */
	qp_kick(q, packets);
	return 0;
}

static int bad(struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr, int err)
{
	*bad_wr = wr;
	return err;
}

int nv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct nv_qp *q = (struct nv_qp *)qp;
	struct nv_context *nc = q->nc;
	int ret = 0;

	if (__atomic_load_n(&nc->dead, __ATOMIC_ACQUIRE))
		return bad(wr, bad_wr, nv_device_lost(nc));
	pthread_spin_lock(&q->lock);
	if (qp->state != IBV_QPS_RTS && !q->err) {
		pthread_spin_unlock(&q->lock);
		return bad(wr, bad_wr, EINVAL);
	}
	for (; wr; wr = wr->next) {
		int with_imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
		int signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
		__u64 remote = wr->wr.rdma.remote_addr;
		__u32 total = 0, first = q->q_tail;
		struct nv_wr *rec;

		if (wr->opcode != IBV_WR_RDMA_WRITE && !with_imm) {
			/* SEND, READ, atomics: MRC has WRITEs only. Said once: a
			 * program may retry in a loop. */
			static int said;

			if (!said++)
				nv_log("post_send: opcode %d is not offered: the MRC NIC does RDMA WRITE "
				       "and WRITE_WITH_IMM only (no SEND, READ or atomics)",
				       wr->opcode);
			ret = bad(wr, bad_wr, EINVAL);
			break;
		}
		if (wr->num_sge < 0 || (__u32)wr->num_sge > q->max_send_sge) {
			ret = bad(wr, bad_wr, EINVAL);
			break;
		}
		if (q->wr_tail - q->wr_head >= q->max_send_wr) {
			ret = bad(wr, bad_wr, ENOMEM); /* the send queue is full: poll first */
			break;
		}
		if (q->err) { /* posted to a QP in ERR: flushed at once */
			struct ibv_wc wc;

			wc_of(&wc, q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_WRITE);
			nv_cq_deliver(q->scq, &wc);
			continue;
		}
		for (int i = 0; i < (wr->num_sge ? wr->num_sge : 1); i++) {
			struct nv_wqe_q *e = &q->wq_q[q->q_tail % q->q_cap];
			struct nic_wqe *w = &e->wqe;

			memset(e, 0, sizeof(*e));
			e->wr = ~0U;
			w->wr_id = wr->wr_id;
			w->remote_va = remote;
			w->rkey = wr->wr.rdma.rkey;
			w->opcode = MRC_OP_WRITE;
			if (wr->num_sge) {
				struct ibv_sge *s = &wr->sg_list[i];
				struct nv_mr *m = nv_mr_find(nc, s->lkey);
				__u64 off = m ? s->addr - (__u64)(unsigned long)m->mr.addr : 0;

				if (!m || s->addr < (__u64)(unsigned long)m->mr.addr ||
				    off + s->length > m->mr.length) {
					q->q_tail = first; /* nothing of this WR is posted */
					ret = bad(wr, bad_wr, EINVAL);
					goto out;
				}
				w->len = s->length;
				w->src_region = m->region;
				w->src_off = (__u32)(m->region_off + off);
				remote += s->length;
				total += s->length;
			}
			q->q_tail++;
		}
		rec = &q->wrs[q->wr_tail % q->wr_cap];
		memset(rec, 0, sizeof(*rec));
		rec->wr_id = wr->wr_id;
		rec->len = total;
		rec->signaled = signaled;
		rec->wqes = (__u16)(q->q_tail - first);
		{
			struct nv_wqe_q *last = &q->wq_q[(q->q_tail - 1) % q->q_cap];

			last->wr = q->wr_tail;
			last->wqe.imm = with_imm ? ntohl(wr->imm_data) : 0;
			last->wqe.opcode = with_imm ? MRC_OP_WRITE_IMM : MRC_OP_WRITE;
			last->wqe.flags = signaled ? NIC_WQE_F_SIGNALED : 0;
		}
		q->wr_tail++;
	}
out:
	nv_qp_push(q);
	pthread_spin_unlock(&q->lock);
	return ret;
}

int nv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct nv_qp *q = (struct nv_qp *)qp;
	int ret = 0;

	if (__atomic_load_n(&q->nc->dead, __ATOMIC_ACQUIRE)) {
		*bad_wr = wr;
		return nv_device_lost(q->nc);
	}
	pthread_spin_lock(&q->lock);
	for (; wr; wr = wr->next) {
		if (qp->state == IBV_QPS_RESET || q->r_tail - q->r_head >= q->max_recv_wr) {
			*bad_wr = wr;
			ret = qp->state == IBV_QPS_RESET ? EINVAL : ENOMEM;
			break;
		}
		if (q->err) {
			struct ibv_wc wc;

			wc_of(&wc, q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV_RDMA_WITH_IMM);
			nv_cq_deliver(q->rcq, &wc);
			continue;
		}
		q->recvs[q->r_tail++ % q->r_cap] = wr->wr_id;
	}
	/* messages that completed before their receive was posted */
	while (q->e_head != q->e_tail && q->r_head != q->r_tail)
		recv_done(q, &q->early[q->e_head++ % q->e_cap]);
	pthread_spin_unlock(&q->lock);
	return ret;
}

/* ---- completions ------------------------------------------------------------ */

/* Deliver, in post order, the WRs whose WQEs the NIC completed: signaled ones
 * as completions, unsignaled ones silently. `upto`: WQEs below it are done. */
void nv_qp_retire(struct nv_qp *q, __u32 upto)
{
	while (q->wr_head != q->wr_tail) {
		struct nv_wr *r = &q->wrs[q->wr_head % q->wr_cap];

		if (r->wqes || (__s32)(upto - 1 - r->last_wqe) < 0)
			return; /* not (all) in the NIC yet, or not done */
		if (r->signaled) {
			struct ibv_wc wc;

			wc_of(&wc, q, r->wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
			wc.byte_len = r->len;
			nv_cq_deliver(q->scq, &wc);
		}
		q->wr_head++;
	}
}

void nv_qp_flush(struct nv_qp *q, enum ibv_wc_status status)
{
	struct ibv_wc wc;

	while (q->wr_head != q->wr_tail) {
		wc_of(&wc, q, q->wrs[q->wr_head++ % q->wr_cap].wr_id, status, IBV_WC_RDMA_WRITE);
		nv_cq_deliver(q->scq, &wc);
	}
	q->q_head = q->q_tail;
	while (q->r_head != q->r_tail) {
		wc_of(&wc, q, q->recvs[q->r_head++ % q->r_cap], status, IBV_WC_RECV_RDMA_WITH_IMM);
		nv_cq_deliver(q->rcq, &wc);
	}
}

static enum ibv_wc_status status_of(const struct nic_qp_err_event *e)
{
	switch (e->error) {
	case NIC_ERR_RETRY_EXCEEDED:
		return IBV_WC_RETRY_EXC_ERR;
	case NIC_ERR_BAD_WQE:
		return IBV_WC_LOC_QP_OP_ERR;
	case NIC_ERR_LOC_PROT:
		return IBV_WC_LOC_PROT_ERR;
	}
	switch (e->syndrome) {
	case MRC_AETH_NAK_REM_ACCESS:
		return IBV_WC_REM_ACCESS_ERR;
	case MRC_AETH_NAK_INV_REQ:
		return IBV_WC_REM_INV_REQ_ERR;
	case MRC_AETH_NAK_REM_OP:
		return IBV_WC_REM_OP_ERR;
	}
	return IBV_WC_GENERAL_ERR;
}

static void qp_fail(struct nv_qp *q, enum ibv_wc_status status)
{
	struct ibv_wc wc;

	if (q->err)
		return;
	q->err = 1;
	q->qp.state = IBV_QPS_ERR;
	nv_qp_retire(q, __atomic_load_n(&q->wq->done, __ATOMIC_ACQUIRE));
	if (q->wr_head != q->wr_tail) { /* the oldest outstanding WR failed */
		wc_of(&wc, q, q->wrs[q->wr_head++ % q->wr_cap].wr_id, status, IBV_WC_RDMA_WRITE);
		nv_cq_deliver(q->scq, &wc);
	}
	nv_qp_flush(q, IBV_WC_WR_FLUSH_ERR);
}

static void qp_arrived(struct nv_qp *q, const struct nic_event *m)
{
	if (q->r_head != q->r_tail)
		recv_done(q, m);
	else if (q->e_tail - q->e_head < q->e_cap) {
		q->early[q->e_tail++ % q->e_cap] = *m; /* waits for its receive */
	}
}

/* One event record of the NIC for this QP (the CQ's poll reads them). */
void nv_qp_record(struct nv_qp *q, const void *rec)
{
	__u32 type = ((const __u32 *)rec)[0];

	pthread_spin_lock(&q->lock);
	if (type == NIC_EV_SEND_DONE) {
		const struct nic_send_event *e = rec;

		/* WQEs complete in order: this one and every one before it */
		nv_qp_retire(q, e->wqe + 1);
	} else if (type == NIC_EV_RECV_IMM) {
		struct nic_event m;

		memcpy(&m, rec, sizeof(m));
		qp_arrived(q, &m);
	} else if (type == NIC_EV_QP_ERR) {
		qp_fail(q, status_of(rec));
	}
	pthread_spin_unlock(&q->lock);
}

/* ---- strings ------------------------------------------------------------------ */

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "work request flushed error",
		[IBV_WC_MW_BIND_ERR] = "memory window bind error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
	};

	if ((unsigned)status < sizeof(names) / sizeof(names[0]) && names[status])
		return names[status];
	return "unknown";
}
