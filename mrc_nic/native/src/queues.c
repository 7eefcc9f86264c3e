/* SPDX-License-Identifier: Apache-2.0 */
/*
 * queues.c: completion queues, queue pairs, posting and polling.
 *
 * The same driver as mrc_nic/verbs (qp.py, cq.py), in C: post_send writes
 * WQEs (struct nic_wqe) into the QP's slots of the mmapped nic_wq, publishes
 * `posted`, and rings the doorbell once per call; WRs beyond the NIC's
 * sq_depth wait here and go in as the NIC completes WQEs (every post and
 * poll moves them). A CQ is a BPF ring buffer this process creates; poll_cq
 * reads it through shared memory, no syscall.
 */
#include "native.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

struct nv_mr *nv_mr_find(struct nv_context *nc, __u32 lkey);
int nv_gid_addr(const union ibv_gid *gid, char *out, size_t n);

#define RING_HDR 8
#define RB_BUSY (1U << 31)
#define RB_DISCARD (1U << 30)

/* ---- completion channels -------------------------------------------------- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct nv_channel *ch = calloc(1, sizeof(*ch));

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ch->epfd < 0) {
		free(ch);
		return NULL;
	}
	ch->ch.context = context;
	ch->ch.fd = ch->epfd;
	ch->ch.refcnt = 0;
	return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct nv_channel *ch = (struct nv_channel *)channel;

	if (channel->refcnt)
		return EBUSY;
	close(ch->epfd);
	free(ch);
	return 0;
}

/* The next CQ of the channel with completions (its ring, or the library's
 * own: flushes and late receives); blocks unless the channel's fd is
 * non-blocking, as verbs does. */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct nv_channel *ch = (struct nv_channel *)channel;
	struct epoll_event ev;
	int n;

	do
		n = epoll_wait(ch->epfd, &ev, 1, -1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		return -1;
	*cq = ev.data.ptr;
	*cq_context = (*cq)->cq_context;
	((struct nv_cq *)*cq)->armed = 0;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	(void)cq;
	(void)nevents;
}

int nv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)solicited_only;
	((struct nv_cq *)cq)->armed = 1;
	return 0;
}

/* ---- completion queues -------------------------------------------------- */

static void cq_unmap(struct nv_cq *c)
{
	if (c->cons)
		munmap(c->cons, 4096);
	if (c->prod)
		munmap(c->prod, 4096 + 2 * c->ring_size);
	if (c->ring_fd >= 0)
		close(c->ring_fd);
	if (c->event_fd >= 0)
		close(c->event_fd);
	free(c->ready);
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct nv_context *nc = (struct nv_context *)context;
	struct nv_cq *c = calloc(1, sizeof(*c));
	long long index;
	int ret;
	__u32 key;

	(void)comp_vector;
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->ring_fd = c->event_fd = -1;
	pthread_spin_init(&c->lock, PTHREAD_PROCESS_PRIVATE);
	pthread_mutex_lock(&nc->lock);
	ret = nv_call(&nc->sess, "{\"op\":\"create_cq\",\"cqe\":%d}", cqe < 1 ? 1 : cqe);
	if (!ret)
		ret = nv_json_int(nc->sess.reply, "cq", &index);
	pthread_mutex_unlock(&nc->lock);
	if (ret) {
		free(c);
		errno = -ret;
		return NULL;
	}
	c->index = (int)index;
	c->ring_size = nc->cq_ring_bytes;
	c->ring_fd = nv_ringbuf_create(nc->cq_ring_bytes);
	key = c->index;
	if (c->ring_fd < 0 || (ret = nv_map_update(nc->cq_rings_fd, &key, &(__u32){ c->ring_fd })))
		goto fail;
	c->cons = nv_mmap(c->ring_fd, 4096, 0, PROT_READ | PROT_WRITE);
	c->prod = nv_mmap(c->ring_fd, 4096 + 2 * c->ring_size, 4096, PROT_READ);
	c->rd_cap = (__u32)(cqe < 64 ? 64 : cqe) * 2 + 4096; /* flushes of every QP's WRs fit */
	c->ready = calloc(c->rd_cap, sizeof(*c->ready));
	c->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!c->cons || !c->prod || !c->ready || c->event_fd < 0)
		goto fail;
	if (channel) {
		struct nv_channel *ch = (struct nv_channel *)channel;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

		if (epoll_ctl(ch->epfd, EPOLL_CTL_ADD, c->ring_fd, &ev) ||
		    epoll_ctl(ch->epfd, EPOLL_CTL_ADD, c->event_fd, &ev))
			goto fail;
		channel->refcnt++;
	}
	c->nc = nc;
	c->cq.context = context;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.cqe = cqe;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	return &c->cq;
fail:
	ret = errno ? errno : EIO;
	cq_unmap(c);
	nv_ctx_call(nc, "{\"op\":\"destroy_cq\",\"cq\":%d}", c->index);
	free(c);
	errno = ret;
	return NULL;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct nv_cq *c = (struct nv_cq *)cq;
	struct nv_context *nc = c->nc;
	int ret;

	ret = nv_ctx_call(nc, "{\"op\":\"destroy_cq\",\"cq\":%d}", c->index);
	if (ret)
		return -ret;
	if (cq->channel)
		cq->channel->refcnt--;
	cq_unmap(c);
	free(c);
	return 0;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq;
	(void)cqe;
	return EOPNOTSUPP;
}

/* A completion the library made or matched, ready for poll_cq. */
static void cq_deliver(struct nv_cq *c, const struct ibv_wc *wc)
{
	if (c->rd_tail - c->rd_head >= c->rd_cap)
		return; /* cannot happen: the queue holds every WR of every QP */
	if (c->rd_tail == c->rd_head && c->event_fd >= 0)
		eventfd_write(c->event_fd, 1); /* the channel sees it */
	c->ready[c->rd_tail++ % c->rd_cap] = *wc;
}

/* ---- queue pairs ------------------------------------------------------------ */

static int qp_push(struct nv_qp *q);

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct nv_context *nc = (struct nv_context *)pd->context;
	struct nv_cq *scq = (struct nv_cq *)attr->send_cq, *rcq = (struct nv_cq *)attr->recv_cq;
	struct nv_qp *q;
	long long qpn, depth, ring;
	int ret;

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
	q->wq = (struct nic_wq *)((char *)nc->wq + (size_t)q->ring * sizeof(struct nic_wq));
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
	free(q->wrs);
	free(q->wq_q);
	free(q->recvs);
	free(q->early);
	free(q->frame);
	nv_ctx_call(nc, "{\"op\":\"destroy_qp\",\"qpn\":%lld}", qpn);
	free(q);
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
	free(q->wrs);
	free(q->wq_q);
	free(q->recvs);
	free(q->early);
	free(q->frame);
	free(q);
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

static void qp_flush(struct nv_qp *q, enum ibv_wc_status status);

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
		qp_flush(q, IBV_WC_WR_FLUSH_ERR);
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
static int qp_push(struct nv_qp *q)
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
			cq_deliver(q->scq, &wc);
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
	qp_push(q);
	pthread_spin_unlock(&q->lock);
	return ret;
}

int nv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct nv_qp *q = (struct nv_qp *)qp;
	int ret = 0;

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
			cq_deliver(q->rcq, &wc);
			continue;
		}
		q->recvs[q->r_tail++ % q->r_cap] = wr->wr_id;
	}
	/* messages that completed before their receive was posted */
	while (q->e_head != q->e_tail && q->r_head != q->r_tail) {
		struct nic_event *m = &q->early[q->e_head++ % q->e_cap];
		struct ibv_wc wc;

		wc_of(&wc, q, q->recvs[q->r_head++ % q->r_cap], IBV_WC_SUCCESS,
		      IBV_WC_RECV_RDMA_WITH_IMM);
		wc.byte_len = m->len;
		wc.imm_data = htonl(m->imm);
		wc.wc_flags = IBV_WC_WITH_IMM;
		cq_deliver(q->rcq, &wc);
	}
	pthread_spin_unlock(&q->lock);
	return ret;
}

/* ---- completions ------------------------------------------------------------ */

/* Deliver, in post order, the WRs whose WQEs the NIC completed: signaled ones
 * as completions, unsignaled ones silently. `upto`: WQEs below it are done. */
static void qp_retire(struct nv_qp *q, __u32 upto)
{
	while (q->wr_head != q->wr_tail) {
		struct nv_wr *r = &q->wrs[q->wr_head % q->wr_cap];

		if (r->wqes || (__s32)(upto - 1 - r->last_wqe) < 0)
			return; /* not (all) in the NIC yet, or not done */
		if (r->signaled) {
			struct ibv_wc wc;

			wc_of(&wc, q, r->wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
			wc.byte_len = r->len;
			cq_deliver(q->scq, &wc);
		}
		q->wr_head++;
	}
}

static void qp_flush(struct nv_qp *q, enum ibv_wc_status status)
{
	struct ibv_wc wc;

	while (q->wr_head != q->wr_tail) {
		wc_of(&wc, q, q->wrs[q->wr_head++ % q->wr_cap].wr_id, status, IBV_WC_RDMA_WRITE);
		cq_deliver(q->scq, &wc);
	}
	q->q_head = q->q_tail;
	while (q->r_head != q->r_tail) {
		wc_of(&wc, q, q->recvs[q->r_head++ % q->r_cap], status, IBV_WC_RECV_RDMA_WITH_IMM);
		cq_deliver(q->rcq, &wc);
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
	qp_retire(q, __atomic_load_n(&q->wq->done, __ATOMIC_ACQUIRE));
	if (q->wr_head != q->wr_tail) { /* the oldest outstanding WR failed */
		wc_of(&wc, q, q->wrs[q->wr_head++ % q->wr_cap].wr_id, status, IBV_WC_RDMA_WRITE);
		cq_deliver(q->scq, &wc);
	}
	qp_flush(q, IBV_WC_WR_FLUSH_ERR);
}

static void qp_arrived(struct nv_qp *q, const struct nic_event *m)
{
	if (q->r_head != q->r_tail) {
		struct ibv_wc wc;

		wc_of(&wc, q, q->recvs[q->r_head++ % q->r_cap], IBV_WC_SUCCESS,
		      IBV_WC_RECV_RDMA_WITH_IMM);
		wc.byte_len = m->len;
		wc.imm_data = htonl(m->imm);
		wc.wc_flags = IBV_WC_WITH_IMM;
		cq_deliver(q->rcq, &wc);
	} else if (q->e_tail - q->e_head < q->e_cap) {
		q->early[q->e_tail++ % q->e_cap] = *m; /* waits for its receive */
	}
}

static struct nv_qp *cq_qp(struct nv_cq *c, __u32 qpn)
{
	for (int i = 0; i < c->n_qps; i++)
		if (c->qps[i]->qp.qp_num == qpn)
			return c->qps[i];
	return NULL;
}

/* One event record of the NIC to its QP. */
static void cq_record(struct nv_cq *c, const void *rec)
{
	__u32 type = ((const __u32 *)rec)[0], qpn = ((const __u32 *)rec)[1];
	struct nv_qp *q = cq_qp(c, qpn);

	if (!q)
		return;
	pthread_spin_lock(&q->lock);
	if (type == NIC_EV_SEND_DONE) {
		const struct nic_send_event *e = rec;

		/* WQEs complete in order: this one and every one before it */
		qp_retire(q, e->wqe + 1);
	} else if (type == NIC_EV_RECV_IMM) {
		struct nic_event m;

		memcpy(&m, rec, sizeof(m));
		qp_arrived(q, &m);
	} else if (type == NIC_EV_QP_ERR) {
		qp_fail(q, status_of(rec));
	}
	pthread_spin_unlock(&q->lock);
}

/* Every record in the ring to its QP. Records of one QP's receives come from
 * several CPUs; the NIC completes messages in order, and a batch's records
 * are in MSN order already. */
static int cq_drain(struct nv_cq *c)
{
	__u64 cons = __atomic_load_n((__u64 *)c->cons, __ATOMIC_ACQUIRE);
	__u64 prod = __atomic_load_n((__u64 *)c->prod, __ATOMIC_ACQUIRE);
	const char *data = (const char *)c->prod + 4096;
	int n = 0;

	while (cons < prod) {
		const char *hdr = data + (cons & (c->ring_size - 1));
		__u32 len = __atomic_load_n((const __u32 *)hdr, __ATOMIC_ACQUIRE);

		if (len & RB_BUSY)
			break;
		if (!(len & RB_DISCARD)) {
			__u32 bytes = len & ~(RB_BUSY | RB_DISCARD);

			for (__u32 off = 0; off + sizeof(struct nic_event) <= bytes;
			     off += sizeof(struct nic_event), n++)
				cq_record(c, hdr + RING_HDR + off);
		}
		cons += (RING_HDR + (len & ~(RB_BUSY | RB_DISCARD)) + 7) & ~7ULL;
		__atomic_store_n((__u64 *)c->cons, cons, __ATOMIC_RELEASE);
	}
	return n;
}

int nv_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
	struct nv_cq *c = (struct nv_cq *)cq;
	int got = 0;

	pthread_spin_lock(&c->lock);
	if (c->rd_tail - c->rd_head < (__u32)num) {
		cq_drain(c);
		for (int i = 0; i < c->n_qps; i++) { /* unsignaled WRs retire, queued WQEs go in */
			struct nv_qp *q = c->qps[i];

			if (q->scq != c)
				continue;
			pthread_spin_lock(&q->lock);
			if (!q->err) {
				qp_retire(q, __atomic_load_n(&q->wq->done, __ATOMIC_ACQUIRE));
				qp_push(q);
			}
			pthread_spin_unlock(&q->lock);
		}
	}
	while (got < num && c->rd_head != c->rd_tail)
		wc[got++] = c->ready[c->rd_head++ % c->rd_cap];
	if (c->rd_head == c->rd_tail && c->event_fd >= 0) {
		eventfd_t v;

		eventfd_read(c->event_fd, &v); /* the channel: nothing held any more */
	}
	if (!got && c->nc->cq_lost[c->index]) {
		pthread_spin_unlock(&c->lock);
		nv_log("CQ %d overran: the NIC lost %llu completion(s) to its full ring; poll more "
		       "often or signal fewer WRs",
		       c->index, (unsigned long long)c->nc->cq_lost[c->index]);
		return -1;
	}
	pthread_spin_unlock(&c->lock);
	return got;
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
