/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mrc.c: the OCP MRC API (include/mrc.h) over this library's verbs. Its
 * objects are the verbs ones under their opaque MRC names: an mrc_context is
 * the ibv_context it was made from, an mrc_cq an ibv_cq, an mrc_qp an ibv_qp,
 * an mrc_comp_channel an ibv_comp_channel.
 */
#include "native.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mrc.h"

int nv_modify(struct nv_qp *q, struct ibv_qp_attr *attr, int mask, const char *extra);
int nv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int nv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int nv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int nv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

int mrc_query_device(struct ibv_context *context, struct mrc_device_attr *attr, int *supported)
{
	(void)context;
	memset(attr, 0, sizeof(*attr));
	attr->mrc_protocol_version = MRC_PROTOCOL_VERSION_1;
	attr->wimm_attr.max_wimm = NIC_MSG_SLOTS;
	attr->wimm_attr.max_wimm_dest = NIC_MSG_SLOTS;
	attr->mpr_attr.max_mpr = NIC_MPR_MAX;
	attr->mpr_attr.mpr_resolution = 1;
	attr->mpr_attr.dynamic_mpr = 1;
	attr->qp_attr.max_qp_hint = 0; /* hints: not yet (docs/fidelity.md) */
	if (supported)
		*supported = 1;
	return 0;
}

struct mrc_context *mrc_create_context(struct ibv_context *vcontext,
				       struct mrc_context_attr *context_attr)
{
	(void)context_attr; /* one API version here: every caller gets 1.0.1's behaviour */
	if (!vcontext) {
		errno = EINVAL;
		return NULL;
	}
	return (struct mrc_context *)vcontext;
}

int mrc_destroy_context(struct mrc_context *mrc_ctx)
{
	(void)mrc_ctx; /* the verbs context stays the caller's to close */
	return 0;
}

int mrc_create_comp_channel(struct mrc_context *mrc_ctx, struct mrc_comp_channel **channel)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel((struct ibv_context *)mrc_ctx);

	*channel = (struct mrc_comp_channel *)ch;
	return ch ? 0 : errno;
}

int mrc_get_comp_channel_fd(struct mrc_comp_channel *channel, int *fd)
{
	*fd = ((struct ibv_comp_channel *)channel)->fd;
	return 0;
}

int mrc_destroy_comp_channel(struct mrc_comp_channel *channel)
{
	return ibv_destroy_comp_channel((struct ibv_comp_channel *)channel);
}

struct mrc_cq *mrc_create_cq(struct mrc_context *mrc_ctx, int cqe, void *cq_context,
			     struct mrc_comp_channel *channel, int comp_vector)
{
	return (struct mrc_cq *)ibv_create_cq((struct ibv_context *)mrc_ctx, cqe, cq_context,
					      (struct ibv_comp_channel *)channel, comp_vector);
}

int mrc_poll_cq(struct mrc_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return nv_poll_cq((struct ibv_cq *)cq, num_entries, wc);
}

int mrc_destroy_cq(struct mrc_cq *cq)
{
	return ibv_destroy_cq((struct ibv_cq *)cq);
}

struct mrc_qp_hint *mrc_create_qp_hint(struct mrc_context *mrc_ctx,
				       struct mrc_qp_hint_init_attr *init_attr)
{
	(void)mrc_ctx;
	(void)init_attr;
	errno = EOPNOTSUPP; /* max_qp_hint is 0 */
	return NULL;
}

int mrc_destroy_qp_hint(struct mrc_qp_hint *qp_hint)
{
	(void)qp_hint;
	return EINVAL;
}

int mrc_query_qp_hint(struct mrc_qp_hint *qp_hint, struct mrc_qp_hint_attr *attr, int mask)
{
	(void)qp_hint;
	(void)attr;
	(void)mask;
	return EINVAL;
}

int mrc_modify_qp_hint(struct mrc_qp_hint *qp_hint, struct mrc_qp_hint_attr *attr, int mask)
{
	(void)qp_hint;
	(void)attr;
	(void)mask;
	return EINVAL;
}

struct mrc_qp *mrc_create_qp(struct mrc_context *mrc_ctx, struct mrc_qp_init_attr *attr)
{
	struct ibv_qp_init_attr init = { 0 };

	(void)mrc_ctx;
	if (attr->protocol_version & ~MRC_PROTOCOL_VERSION_1) {
		nv_log("mrc_create_qp: protocol_version %#x: this NIC speaks version 1 only",
		       attr->protocol_version);
		errno = EOPNOTSUPP;
		return NULL;
	}
	init.qp_context = attr->qp_context;
	init.send_cq = (struct ibv_cq *)attr->send_cq;
	init.recv_cq = (struct ibv_cq *)attr->recv_cq;
	init.cap = attr->cap;
	init.sq_sig_all = attr->sq_sig_all;
	init.qp_type = IBV_QPT_RC;
	return (struct mrc_qp *)ibv_create_qp(attr->pd, &init);
}

int mrc_destroy_qp(struct mrc_qp *qp)
{
	return ibv_destroy_qp((struct ibv_qp *)qp);
}

/*
 * The transition with verbs and MRC attributes. mrc.h lists verbs attributes
 * an MRC provider does not take; the OCP reference example passes some of
 * them all the same (PORT at INIT; TIMEOUT, RETRY_CNT 14 and RNR_RETRY 14 at
 * RTS), so they are taken as the verbs path takes them: PORT must be 1,
 * TIMEOUT is the MRC timeout, RETRY_CNT the linear count (at most 7: more is
 * 7), RNR_RETRY and the RD_ATOMIC ones have nothing to act on. The MRC
 * attributes win where both are given.
 */
int mrc_modify_qp(struct mrc_qp *qp, struct ibv_qp_attr *vattr, int vattr_mask,
		  struct mrc_qp_attr *m, int mask)
{
	struct ibv_qp_attr v = *vattr;
	char extra[512];
	size_t n = 0;

#define ADD(...) n += snprintf(extra + n, sizeof(extra) - n, __VA_ARGS__)
	extra[0] = 0;
	if ((vattr_mask & IBV_QP_RETRY_CNT) && v.retry_cnt > 7)
		v.retry_cnt = 7;
	if (m && (mask & MRC_QP_TIMEOUT))
		vattr_mask &= ~IBV_QP_TIMEOUT;
	if (m && (mask & MRC_QP_RETRY_CNT))
		vattr_mask &= ~IBV_QP_RETRY_CNT;
	if (m && (mask & (MRC_QP_HINT | MRC_QP_VENDOR_CFG)) && (m->qp_hint || (mask & MRC_QP_VENDOR_CFG))) {
		nv_log("mrc_modify_qp: QP hints and vendor configuration are not offered here");
		return EOPNOTSUPP;
	}
	if (m) {
		if (mask & MRC_QP_MAX_WIMM)
			ADD(",\"max_wimm\":%u", m->wimm.max_wimm);
		if (mask & MRC_QP_MAX_WIMM_DEST)
			ADD(",\"max_wimm_dest\":%u", m->wimm.max_wimm_dest);
		if (mask & MRC_QP_MPR)
			ADD(",\"mpr\":%u", m->mpr.mpr);
		if (mask & MRC_QP_MPR_DEST)
			ADD(",\"mpr_dest\":%u", m->mpr.mpr_dest);
		if (mask & MRC_QP_DYNAMIC_MPR_DEST)
			ADD(",\"cap\":%u", m->mpr.dynamic_mpr_dest ? 2 : 0); /* MRC_QP_CAP_DYNAMIC_MPR */
		if (mask & MRC_QP_TIMEOUT)
			ADD(",\"timeout\":%u", m->timeout);
		if (mask & MRC_EV_PROFILE_ID)
			ADD(",\"ev_profile_id\":%llu", (unsigned long long)m->profile.ev_profile_id);
		if (mask & MRC_CC_PROFILE_ID)
			ADD(",\"cc_profile_id\":%llu", (unsigned long long)m->profile.cc_profile_id);
		if (mask & MRC_QP_RETRY_CNT)
			ADD(",\"retry_linear_cnt\":%u,\"retry_exp_cnt\":%u", m->retry.linear_cnt,
			    m->retry.exp_cnt);
	}
#undef ADD
	return nv_modify((struct nv_qp *)qp, &v, vattr_mask, extra);
}

int mrc_query_qp(struct mrc_qp *qp, struct ibv_qp_attr *vattr, int vattr_mask,
		 struct mrc_qp_attr *mrc_attr, int mrc_attr_mask, struct mrc_qp_init_attr *init_attr)
{
	struct ibv_qp_init_attr init;
	int ret = ibv_query_qp((struct ibv_qp *)qp, vattr, vattr_mask, &init);

	(void)mrc_attr_mask;
	if (mrc_attr)
		memset(mrc_attr, 0, sizeof(*mrc_attr));
	if (init_attr) {
		memset(init_attr, 0, sizeof(*init_attr));
		init_attr->qp_context = init.qp_context;
		init_attr->send_cq = (struct mrc_cq *)init.send_cq;
		init_attr->recv_cq = (struct mrc_cq *)init.recv_cq;
		init_attr->cap = init.cap;
		init_attr->sq_sig_all = init.sq_sig_all;
		init_attr->pd = ((struct ibv_qp *)qp)->pd;
		init_attr->protocol_version = MRC_PROTOCOL_VERSION_1;
	}
	return ret;
}

int mrc_get_qpn(struct mrc_qp *qp, uint32_t *qpn)
{
	*qpn = ((struct ibv_qp *)qp)->qp_num;
	return 0;
}

int mrc_post_recv(struct mrc_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	return nv_post_recv((struct ibv_qp *)qp, wr, bad_wr);
}

int mrc_post_send(struct mrc_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	return nv_post_send((struct ibv_qp *)qp, wr, bad_wr);
}

int mrc_get_async_event(struct mrc_context *mrc_ctx, struct mrc_async_event *event)
{
	struct ibv_async_event e;
	int ret = ibv_get_async_event((struct ibv_context *)mrc_ctx, &e);

	if (!ret) {
		memset(event, 0, sizeof(*event));
		event->event_type = e.event_type;
	}
	return ret;
}

void mrc_ack_async_event(struct mrc_async_event *event)
{
	(void)event;
}

int mrc_req_notify_cq(struct mrc_cq *cq, int solicited_only)
{
	return nv_req_notify_cq((struct ibv_cq *)cq, solicited_only);
}

int mrc_get_cq_event(struct mrc_comp_channel *channel, struct mrc_cq **cq, void **cq_context)
{
	return ibv_get_cq_event((struct ibv_comp_channel *)channel, (struct ibv_cq **)cq, cq_context);
}

void mrc_ack_cq_events(struct mrc_cq *cq, unsigned int nevents)
{
	ibv_ack_cq_events((struct ibv_cq *)cq, nevents);
}
