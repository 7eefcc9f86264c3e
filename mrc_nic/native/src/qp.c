/* SPDX-License-Identifier: Apache-2.0 */
/*
 * qp.c: queue pairs: create, destroy, modify (the RC attributes a verbs
 * program sets, onto MRC's), query. Posting and completions are post.c's.
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

/* ---- queue pairs ------------------------------------------------------------ */

/* This process's side of a QP: its send queue's mapping, rings and frame. */
static void qp_free(struct nv_qp *q)
{
	if (q->wq)
		munmap(q->wq, sizeof(struct nic_wq));
	free(q->wrs);
	free(q->wq_q);
	free(q->recvs);
	free(q->early);
	free(q->frame);
	free(q);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct nv_context *nc = (struct nv_context *)pd->context;
	struct nv_cq *scq = (struct nv_cq *)attr->send_cq, *rcq = (struct nv_cq *)attr->recv_cq;
	struct nv_qp *q;
	long long qpn, depth, ring;
	int ret, sq_fd = -1;

	if (attr->qp_type != IBV_QPT_RC || attr->srq) {
		nv_log("create_qp: MRC QPs are reliable connected (IBV_QPT_RC) without an SRQ");
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (scq->n_qps >= 64 || rcq->n_qps >= 64) {
		nv_log("create_qp: a CQ serves 64 QPs at most here");
		errno = ENOSPC;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&nc->lock);
	ret = nv_call(&nc->sess,
		      "{\"op\":\"create_qp\",\"pd\":%u,\"send_cq\":%d,\"recv_cq\":%d,"
		      "\"max_send_wr\":%u,\"max_recv_wr\":%u,\"max_send_sge\":%u,\"max_recv_sge\":%u}",
		      ((struct nv_pd *)pd)->handle, scq->index, rcq->index,
		      attr->cap.max_send_wr ? attr->cap.max_send_wr : 1, attr->cap.max_recv_wr,
		      attr->cap.max_send_sge ? attr->cap.max_send_sge : 1, attr->cap.max_recv_sge);
	if (!ret && (nv_json_int(nc->sess.reply, "qpn", &qpn) ||
		     nv_json_int(nc->sess.reply, "sq_depth", &depth) ||
		     nv_json_int(nc->sess.reply, "ring", &ring)))
		ret = -EPROTO;
	if (!ret) /* its send queue, a map of its own (docs/api.md, "Isolation") */
		sq_fd = nv_reply_fd(&nc->sess, "sq_fd");
	pthread_mutex_unlock(&nc->lock);
	if (ret) {
		free(q);
		errno = -ret;
		return NULL;
	}
	q->nc = nc;
	q->scq = scq;
	q->rcq = rcq;
	q->ring = (__u32)ring;
	q->sq_depth = (__u32)depth;
	q->max_send_wr = attr->cap.max_send_wr ? attr->cap.max_send_wr : 1;
	q->max_recv_wr = attr->cap.max_recv_wr;
	q->max_send_sge = attr->cap.max_send_sge ? attr->cap.max_send_sge : 1;
	q->sig_all = attr->sq_sig_all;
	q->wq = sq_fd >= 0 ? nv_mmap(sq_fd, sizeof(struct nic_wq), 0, PROT_READ | PROT_WRITE) : NULL;
	if (sq_fd >= 0)
		close(sq_fd); /* the mapping keeps the queue */
	if (!q->wq) {
		nv_log("create_qp: the daemon handed over no send queue for QP %#llx", qpn);
		errno = EPROTO;
		goto fail;
	}
	q->wr_cap = q->max_send_wr + 1;
	q->wrs = calloc(q->wr_cap, sizeof(*q->wrs));
	q->q_cap = q->max_send_wr * q->max_send_sge + 1;
	q->wq_q = calloc(q->q_cap, sizeof(*q->wq_q));
	q->r_cap = q->max_recv_wr + 1;
	q->recvs = calloc(q->r_cap, sizeof(*q->recvs));
	q->e_cap = 4096;
	q->early = calloc(q->e_cap, sizeof(*q->early));
	q->frame = nc->db_fd >= 0 ? malloc(nc->db_frame_len) : NULL;
	if (!q->wrs || !q->wq_q || !q->recvs || !q->early || (nc->db_fd >= 0 && !q->frame)) {
		errno = ENOMEM;
		goto fail;
	}
	if (q->frame) { /* this QP's doorbell frame: the template, struct nic_kick, zeros */
		struct nic_kick k = { .qpn = (__u32)qpn, .op = NIC_KICK_SEND };

		memcpy(q->frame, nc->db_frame, nc->db_frame_len);
		memcpy(q->frame + 14, &k, sizeof(k));
	}
	pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = NULL;
	q->qp.handle = (__u32)qpn;
	q->qp.qp_num = (__u32)qpn;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = IBV_QPT_RC;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	scq->qps[scq->n_qps++] = q;
	if (rcq != scq)
		rcq->qps[rcq->n_qps++] = q;
	attr->cap.max_inline_data = 0;
	return &q->qp;
fail:
	nv_ctx_call(nc, "{\"op\":\"destroy_qp\",\"qpn\":%lld}", qpn);
	qp_free(q);
	return NULL;
}

static void cq_forget(struct nv_cq *c, struct nv_qp *q)
{
	for (int i = 0; i < c->n_qps; i++) {
		if (c->qps[i] == q) {
			c->qps[i] = c->qps[--c->n_qps];
			return;
		}
	}
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct nv_qp *q = (struct nv_qp *)qp;
	struct nv_context *nc = q->nc;
	int ret;

	ret = nv_ctx_call(nc, "{\"op\":\"destroy_qp\",\"qpn\":%u}", qp->qp_num);
	if (ret)
		return -ret;
	cq_forget(q->scq, q);
	cq_forget(q->rcq, q);
	qp_free(q);
	return 0;
}

static const char *state_name(enum ibv_qp_state s)
{
	switch (s) {
	case IBV_QPS_INIT:
		return "INIT";
	case IBV_QPS_RTR:
		return "RTR";
	case IBV_QPS_RTS:
		return "RTS";
	case IBV_QPS_ERR:
		return "ERR";
	default:
		return NULL;
	}
}

/*
 * ibv_modify_qp with the RC attributes a verbs program sets, onto MRC's
 * (docs/api.md, "C programs"): TIMEOUT and RETRY_CNT become the MRC timeout
 * and linear retry count; MIN_RNR_TIMER, RNR_RETRY, MAX_QP_RD_ATOMIC and
 * MAX_DEST_RD_ATOMIC are accepted and have nothing to act on (MRC has no
 * SEND, so no RNR, and no READ or atomics); PKEY_INDEX is accepted, PORT
 * must be 1. The daemon checks the rest.
 */
int nv_modify(struct nv_qp *q, struct ibv_qp_attr *attr, int mask, const char *extra)
{
	struct nv_context *nc = q->nc;
	char attrs[1024], gid[48];
	const char *target;
	size_t n = 0;
	int ret;

#define ADD(...) n += snprintf(attrs + n, sizeof(attrs) - n, __VA_ARGS__)
	if (!(mask & IBV_QP_STATE)) {
		nv_log("modify_qp: attr_mask needs IBV_QP_STATE (MRC modifies by transition)");
		return EINVAL;
	}
	target = state_name(attr->qp_state);
	if (!target) {
		nv_log("modify_qp: MRC QPs go INIT, RTR, RTS or ERR (to start again, destroy the QP)");
		return EINVAL;
	}
	if ((mask & IBV_QP_PORT) && attr->port_num != 1) {
		nv_log("modify_qp: port_num must be 1 (one port; the planes are inside it)");
		return EINVAL;
	}
	if (mask & (IBV_QP_QKEY | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP)) {
		nv_log("modify_qp: QKEY, ALT_PATH, PATH_MIG_STATE and CAP are not MRC attributes");
		return EINVAL;
	}
	attrs[0] = 0;
	if (mask & IBV_QP_ACCESS_FLAGS)
		ADD(",\"qp_access_flags\":%u", attr->qp_access_flags & 3);
	if (mask & IBV_QP_AV) {
		nv_gid_addr(&attr->ah_attr.grh.dgid, gid, sizeof(gid));
		ADD(",\"dest_gid\":\"%s\"", gid);
	}
	if (mask & IBV_QP_DEST_QPN)
		ADD(",\"dest_qp_num\":%u", attr->dest_qp_num);
	if (mask & IBV_QP_RQ_PSN)
		ADD(",\"rq_psn\":%u", attr->rq_psn & 0xffffff);
	if (mask & IBV_QP_PATH_MTU)
		ADD(",\"path_mtu\":%u", 128U << attr->path_mtu);
	if (mask & IBV_QP_SQ_PSN)
		ADD(",\"sq_psn\":%u", attr->sq_psn & 0xffffff);
	if (mask & IBV_QP_TIMEOUT)
		ADD(",\"timeout\":%u", attr->timeout);
	if (mask & IBV_QP_RETRY_CNT)
		ADD(",\"retry_linear_cnt\":%u", attr->retry_cnt);
	if (extra)
		ADD("%s", extra);
#undef ADD
	ret = nv_ctx_call(nc, "{\"op\":\"modify_qp\",\"qpn\":%u,\"state\":\"%s\",\"attrs\":{%s}}",
		      q->qp.qp_num, target, attrs[0] ? attrs + 1 : "");
	if (ret)
		return -ret;
	pthread_spin_lock(&q->lock);
	q->qp.state = attr->qp_state;
	if (attr->qp_state == IBV_QPS_RTS)
		q->posted = __atomic_load_n(&q->wq->posted, __ATOMIC_ACQUIRE);
	if (attr->qp_state == IBV_QPS_ERR) {
		q->err = 1;
		nv_qp_flush(q, IBV_WC_WR_FLUSH_ERR);
	}
	pthread_spin_unlock(&q->lock);
	return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	return nv_modify((struct nv_qp *)qp, attr, attr_mask, NULL);
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct nv_qp *q = (struct nv_qp *)qp;

	(void)attr_mask;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = attr->cur_qp_state = qp->state;
	attr->port_num = 1;
	attr->path_mtu = IBV_MTU_4096;
	attr->cap.max_send_wr = q->max_send_wr;
	attr->cap.max_recv_wr = q->max_recv_wr;
	attr->cap.max_send_sge = q->max_send_sge;
	attr->cap.max_recv_sge = 1;
	if (init_attr) {
		memset(init_attr, 0, sizeof(*init_attr));
		init_attr->send_cq = qp->send_cq;
		init_attr->recv_cq = qp->recv_cq;
		init_attr->qp_context = qp->qp_context;
		init_attr->cap = attr->cap;
		init_attr->qp_type = IBV_QPT_RC;
		init_attr->sq_sig_all = q->sig_all;
	}
	return 0;
}

