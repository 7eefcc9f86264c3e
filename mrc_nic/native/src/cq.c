/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cq.c: completion channels and completion queues, and polling.
 *
 * The same driver as mrc_nic/verbs/cq.py over mrc_nic/nic/driver/cq.py, in
 * C: a CQ is a BPF ring buffer the daemon creates and hands over; poll_cq reads it
 * through shared memory (no syscall) and hands each record to its QP
 * (post.c, nv_qp_record), which turns it into work completions here.
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
	long long index, lost_base = 0;
	int ret;

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
	if (!ret) { /* its ring, made by the daemon for this session */
		c->ring_fd = nv_reply_fd(&nc->sess, "ring_fd");
		nv_json_int(nc->sess.reply, "lost_base", &lost_base);
	}
	pthread_mutex_unlock(&nc->lock);
	if (ret) {
		free(c);
		errno = -ret;
		return NULL;
	}
	c->index = (int)index;
	c->lost_base = (__u64)lost_base;
	c->ring_size = nc->cq_ring_bytes;
	if (c->ring_fd < 0) {
		nv_log("create_cq: the daemon handed over no ring for CQ %d", c->index);
		errno = EPROTO;
		goto fail;
	}
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
void nv_cq_deliver(struct nv_cq *c, const struct ibv_wc *wc)
{
	if (c->rd_tail - c->rd_head >= c->rd_cap)
		return; /* cannot happen: the queue holds every WR of every QP */
	if (c->rd_tail == c->rd_head && c->event_fd >= 0)
		eventfd_write(c->event_fd, 1); /* the channel sees it */
	c->ready[c->rd_tail++ % c->rd_cap] = *wc;
}
static struct nv_qp *cq_qp(struct nv_cq *c, __u32 qpn)
{
	for (int i = 0; i < c->n_qps; i++)
		if (c->qps[i]->qp.qp_num == qpn)
			return c->qps[i];
	return NULL;
}

/* One event record of the NIC to its QP (post.c). */
static void cq_record(struct nv_cq *c, const void *rec)
{
	struct nv_qp *q = cq_qp(c, ((const __u32 *)rec)[1]);

	if (q)
		nv_qp_record(q, rec);
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

		if (len & BPF_RINGBUF_BUSY_BIT)
			break;
		if (!(len & BPF_RINGBUF_DISCARD_BIT)) {
			__u32 bytes = len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT);

			for (__u32 off = 0; off + sizeof(struct nic_event) <= bytes;
			     off += sizeof(struct nic_event), n++)
				cq_record(c, hdr + BPF_RINGBUF_HDR_SZ + off);
		}
		cons += (BPF_RINGBUF_HDR_SZ + (len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT)) + 7) & ~7ULL;
		__atomic_store_n((__u64 *)c->cons, cons, __ATOMIC_RELEASE);
	}
	return n;
}

int nv_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
	struct nv_cq *c = (struct nv_cq *)cq;
	int got = 0;

	pthread_spin_lock(&c->lock);
	if (__atomic_load_n(&c->nc->dead, __ATOMIC_ACQUIRE) && !c->dead) {
		c->dead = 1; /* the NIC is gone: every QP of this CQ to ERR, its WRs flushed */
		for (int i = 0; i < c->n_qps; i++) {
			struct nv_qp *q = c->qps[i];

			pthread_spin_lock(&q->lock);
			if (!q->err) {
				q->err = 1;
				q->qp.state = IBV_QPS_ERR;
				nv_qp_flush(q, IBV_WC_WR_FLUSH_ERR);
			}
			pthread_spin_unlock(&q->lock);
		}
	}
	if (c->rd_tail - c->rd_head < (__u32)num && !c->dead) {
		cq_drain(c);
		for (int i = 0; i < c->n_qps; i++) { /* unsignaled WRs retire, queued WQEs go in */
			struct nv_qp *q = c->qps[i];

			if (q->scq != c)
				continue;
			pthread_spin_lock(&q->lock);
			if (!q->err) {
				nv_qp_retire(q, __atomic_load_n(&q->wq->done, __ATOMIC_ACQUIRE));
				nv_qp_push(q);
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
	if (!got && c->dead) { /* the flushes polled: from now on, the NIC's death */
		pthread_spin_unlock(&c->lock);
		errno = nv_device_lost(c->nc);
		return -1;
	}
	__u64 lost = c->nc->cq_lost[c->index] - c->lost_base;

	if (!got && lost) {
		pthread_spin_unlock(&c->lock);
		nv_log("CQ %d overran: the NIC lost %llu completion(s) to its full ring; poll more "
		       "often or signal fewer WRs",
		       c->index, (unsigned long long)lost);
		return -1;
	}
	pthread_spin_unlock(&c->lock);
	return got;
}

