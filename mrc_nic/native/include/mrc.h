/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mrc.h: the OCP MRC application API (opencomputeproject/
 * OCP-Multipath-Reliable-Connection, API 1.0.1) as mrc-nic's native verbs
 * library implements it. The same functions, structures and constants as
 * the OCP release, so that programs written against it build with
 * -I<this folder> and link mrc-nic's lib_mrc.so (docs/api.md, "C programs").
 * What the emulated NIC does with each attribute is said in docs/api.md.
 */
#ifndef _MRC_API_H_
#define _MRC_API_H_

#include <infiniband/verbs.h>
#include <stdint.h>

#include <mrc_api_ver.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MRC_MAX_VENDOR_CFG_SIZE 128

/* Wire protocol versions: a device's bitmap, a QP's one bit (0: default). */
enum mrc_protocol_version {
	MRC_PROTOCOL_VERSION_0 = 0,
	MRC_PROTOCOL_VERSION_1 = (1 << 0),
};

struct mrc_context;
struct mrc_qp_hint;
struct mrc_qp;
struct mrc_cq;
struct mrc_comp_channel;

struct mrc_device_attr {
	uint32_t mrc_protocol_version; /* versions offered (bitmap) */
	struct {
		uint16_t max_wimm;      /* WRITE_WITH_IMMs in flight, sender */
		uint16_t max_wimm_dest; /* held incomplete, receiver */
	} wimm_attr;
	struct {
		uint8_t max_mpr;        /* in 128-PSN units */
		uint8_t mpr_resolution; /* in 128-PSN units */
		uint8_t dynamic_mpr;    /* nonzero: offered */
	} mpr_attr;
	struct {
		uint32_t max_qp_hint;
	} qp_attr;
};

int mrc_query_device(struct ibv_context *context, struct mrc_device_attr *attr, int *supported);

struct mrc_context_attr {
	uint32_t mrc_api_version_used;
};

struct mrc_context *mrc_create_context(struct ibv_context *vcontext,
				       struct mrc_context_attr *context_attr);
int mrc_destroy_context(struct mrc_context *mrc_ctx);

int mrc_create_comp_channel(struct mrc_context *mrc_ctx, struct mrc_comp_channel **channel);
int mrc_get_comp_channel_fd(struct mrc_comp_channel *channel, int *fd);
int mrc_destroy_comp_channel(struct mrc_comp_channel *channel);

struct mrc_cq *mrc_create_cq(struct mrc_context *mrc_ctx, int cqe, void *cq_context,
			     struct mrc_comp_channel *channel, int comp_vector);
int mrc_poll_cq(struct mrc_cq *cq, int num_entries, struct ibv_wc *wc);
int mrc_destroy_cq(struct mrc_cq *cq);

struct mrc_qp_hint_attr {
	int num_qps_per_peer;      /* QPs of the hint sending to one peer at once */
	int num_send_peers;        /* peers they send to at once */
	int num_remote_recv_peers; /* remote QPs sending to this QP's peer at once */
	uint8_t vendor_cfg[MRC_MAX_VENDOR_CFG_SIZE];
};

enum mrc_qp_hint_attr_mask {
	MRC_QP_HINT_NUM_QPS_PER_PEER = (1 << 0),
	MRC_QP_HINT_NUM_SEND_PEERS = (1 << 1),
	MRC_QP_HINT_NUM_REMOTE_RECV_PEERS = (1 << 2),
	MRC_QP_HINT_VENDOR_CFG = (1 << 31)
};

struct mrc_qp_hint_init_attr {
	struct mrc_qp_hint_attr attr;
};

struct mrc_qp_hint *mrc_create_qp_hint(struct mrc_context *mrc_ctx,
				       struct mrc_qp_hint_init_attr *init_attr);
int mrc_destroy_qp_hint(struct mrc_qp_hint *qp_hint);
int mrc_query_qp_hint(struct mrc_qp_hint *qp_hint, struct mrc_qp_hint_attr *qp_hint_attr,
		      int qp_hint_attr_mask);
int mrc_modify_qp_hint(struct mrc_qp_hint *qp_hint, struct mrc_qp_hint_attr *qp_hint_attr,
		       int qp_hint_attr_mask);

struct mrc_qp_init_attr {
	void *qp_context;
	struct mrc_cq *send_cq;
	struct mrc_cq *recv_cq;
	struct ibv_qp_cap cap;
	int sq_sig_all;
	struct ibv_pd *pd;
	uint64_t send_ops_flags; /* enum ibv_qp_create_send_ops_flags */
	enum mrc_protocol_version protocol_version;
};

struct mrc_qp *mrc_create_qp(struct mrc_context *mrc_ctx, struct mrc_qp_init_attr *mrc_qp_attr);
int mrc_destroy_qp(struct mrc_qp *qp);

/* Which mrc_qp_attr fields a modify or query names (INIT: the profiles and
 * hint; RTR: the _DEST ones; RTS: the rest). */
enum mrc_qp_attr_mask {
	MRC_QP_MAX_WIMM = (1 << 0),
	MRC_QP_MAX_WIMM_DEST = (1 << 1),
	MRC_QP_MPR = (1 << 2),
	MRC_QP_MPR_DEST = (1 << 3),
	MRC_QP_DYNAMIC_MPR_DEST = (1 << 4),
	MRC_QP_TIMEOUT = (1 << 5),
	MRC_EV_PROFILE_ID = (1 << 6),
	MRC_CC_PROFILE_ID = (1 << 7),
	MRC_QP_HINT = (1 << 8),
	MRC_QP_RETRY_CNT = (1 << 9),
	MRC_QP_VENDOR_CFG = (1 << 31)
};

struct mrc_qp_attr {
	struct {
		uint8_t mpr;              /* sender, 128-PSN units */
		uint8_t mpr_dest;         /* receiver, 128-PSN units */
		uint8_t dynamic_mpr_dest; /* 1: the receiver advertises its MPR */
	} mpr;
	struct {
		uint16_t max_wimm;
		uint16_t max_wimm_dest;
	} wimm;
	uint8_t timeout; /* 1.024 us << timeout */
	struct {
		uint64_t ev_profile_id;
		uint64_t cc_profile_id;
	} profile;
	struct {
		uint8_t linear_cnt; /* at most 7 */
		uint8_t exp_cnt;    /* at most 25 (25: no limit) */
	} retry;
	struct mrc_qp_hint *qp_hint;
	uint8_t vendor_cfg[MRC_MAX_VENDOR_CFG_SIZE];
};

int mrc_query_qp(struct mrc_qp *qp, struct ibv_qp_attr *vattr, int vattr_mask,
		 struct mrc_qp_attr *mrc_attr, int mrc_attr_mask, struct mrc_qp_init_attr *init_attr);
int mrc_modify_qp(struct mrc_qp *qp, struct ibv_qp_attr *vattr, int vattr_mask,
		  struct mrc_qp_attr *mrc_attr, int mrc_attr_mask);
int mrc_get_qpn(struct mrc_qp *qp, uint32_t *qpn);
int mrc_post_recv(struct mrc_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int mrc_post_send(struct mrc_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);

struct mrc_async_event {
	union {
		struct mrc_cq *cq;
		struct mrc_qp *qp;
		int port_num;
	} element;
	enum ibv_event_type event_type;
};

int mrc_get_async_event(struct mrc_context *mrc_ctx, struct mrc_async_event *event);
void mrc_ack_async_event(struct mrc_async_event *event);
int mrc_req_notify_cq(struct mrc_cq *cq, int solicited_only);
int mrc_get_cq_event(struct mrc_comp_channel *channel, struct mrc_cq **cq, void **cq_context);
void mrc_ack_cq_events(struct mrc_cq *cq, unsigned int nevents);

#ifdef __cplusplus
}
#endif

#endif /* _MRC_API_H_ */
