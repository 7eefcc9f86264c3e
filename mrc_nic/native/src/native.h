/* SPDX-License-Identifier: Apache-2.0 */
/*
 * native.h: the native verbs library's internals (docs/api.md, "C programs").
 * Setup goes through the host daemon's unix socket (session.c), which hands
 * the session a file descriptor for each NIC resource it makes (SCM_RIGHTS:
 * docs/api.md, "Isolation"); the data path goes straight to those maps
 * (bpfmaps.c): WQEs into the QP's mmapped send queue, doorbell frames,
 * completions from the CQ's own ring buffer. The
 * layouts are the bpf/ headers' own, the ones mrc_nic/abi generates Python's
 * from (mrc_nic/nic/driver/formats.py); tests/unit/test_native_build.py
 * compiles this header and checks both, and these constants, agree.
 */
#ifndef MRC_NIC_NATIVE_H
#define MRC_NIC_NATIVE_H

#include <infiniband/verbs.h>
#include <linux/bpf.h>
#include <linux/types.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#include "nic_structs.h"

#define NV_RUN_DIR_DEFAULT "/run/mrc-nic"
#define NV_RUN_DIR nv_run_dir()
#define NV_NS_PREFIX "mrc-"
#define NV_DOORBELL_FRAMES_MAX 4 /* more engine runs: one BPF_PROG_RUN (mrc_nic/nic/kick.py) */
#define NV_LIVE_BATCH_MAX 256
#define NV_LINE 65536
#define NV_NAME 64
#define NV_MAX_DEVICES 64
#define NV_DOORBELL_IFNAME "doorbell"
#define NV_VENDOR_ID 0 /* 0: perftest takes an unknown device's plain ibv_post_send path */
#define NV_FDS_MAX 16   /* descriptors one reply hands over, at most */

struct nv_session {
	int fd;
	size_t len;
	char buf[NV_LINE];
	char reply[NV_LINE];
	int fds[NV_FDS_MAX]; /* what came with the reply (SCM_RIGHTS), -1 once taken */
	int nfds;
};

struct nv_device {
	struct ibv_device dev;
	char lab[NV_NAME], host[NV_NAME];
	int index; /* in the list: host order, the caller's own first */
};

/* An MR: the program's buffer, its pages replaced by the MR's own NIC memory. */
struct nv_mr {
	struct ibv_mr mr;
	__u32 region;
	__u64 iova;       /* the peer's address of the first byte */
	__u64 region_off; /* where addr lies in its region (src_off of a WQE at addr) */
	void *map;        /* the page-aligned mapping over the buffer */
	size_t map_len;
	struct nv_mr *next;
};

struct nv_context {
	struct ibv_context ctx;
	pthread_mutex_t lock; /* the session: one call at a time */
	struct nv_session sess;
	char lab[NV_NAME], host[NV_NAME];
	int host_index, planes, seg_size, sq_depth, max_qp_wr, cq_ring_bytes;
	long long max_mr_bytes, max_mr_size;
	char gids[NIC_MAX_PLANES][48];
	int prog_fd, cq_lost_fd; /* the doorbell program (send kicks only), nic_cq_lost */
	__u64 *cq_lost;          /* mapped read-only: the map is frozen */
	size_t cq_lost_len;
	int db_fd, db_frame_len; /* the doorbell port's socket (root's own), or -1 */
	unsigned char *db_frame;
	struct nv_mr *mrs; /* every MR of the context (under lock) */
	/* The NIC's death (docs/api.md, "When the NIC dies"): the watcher thread
	 * sets dead when the daemon's end of the session closes; the data path
	 * reads it, one load per call. */
	int dead, dead_told;
	int watch_stop; /* an eventfd that ends the watcher */
	pthread_t watcher;
};

struct nv_pd {
	struct ibv_pd pd;
	__u32 handle;
};

/* A send WR in flight, ring of max_send_wr + 1 entries. */
struct nv_wr {
	__u64 wr_id;
	__u32 len;
	__u32 last_wqe;   /* NIC index of its last WQE (valid once queued == 0) */
	__u16 wqes;       /* WQEs not yet given to the NIC */
	__u8 signaled, completed;
};

struct nv_wqe_q { /* WQEs waiting for a NIC slot, in order */
	struct nic_wqe wqe;
	__u32 wr; /* its WR's ring index, for the last WQE of a WR; ~0 else */
};

struct nv_cq;

struct nv_qp {
	struct ibv_qp qp;
	struct nv_context *nc;
	struct nv_cq *scq, *rcq;
	__u32 ring, sq_depth, max_send_wr, max_recv_wr, max_send_sge, sig_all;
	pthread_spinlock_t lock;
	struct nic_wq *wq; /* its send queue, a map of its own, mapped */
	__u32 posted; /* WQEs given to the NIC, free-running */
	/* send WRs: ring [wr_head, wr_tail) */
	struct nv_wr *wrs;
	__u32 wr_cap, wr_head, wr_tail;
	/* WQEs waiting for NIC slots */
	struct nv_wqe_q *wq_q;
	__u32 q_cap, q_head, q_tail;
	/* receive WRs: ring of wr_ids */
	__u64 *recvs;
	__u32 r_cap, r_head, r_tail;
	/* WRITE_WITH_IMM messages completed before a receive was posted */
	struct nic_event *early;
	__u32 e_cap, e_head, e_tail;
	int err;    /* the QP is in ERR (the NIC said so) */
	int failed; /* ibv_wc_status of the first error, 0 none */
	unsigned char *frame; /* its doorbell frame (struct nic_kick inside), or NULL */
};

/* A completion the library made (flush, matched receive) or the NIC's, ready. */
struct nv_cq {
	struct ibv_cq cq;
	struct nv_context *nc;
	int index;      /* in nic_cq_rings */
	__u64 lost_base; /* nic_cq_lost[index] when the CQ was made */
	int ring_fd;
	void *cons;     /* consumer page */
	void *prod;     /* producer page + data twice */
	size_t ring_size;
	pthread_spinlock_t lock;
	struct ibv_wc *ready;
	__u32 rd_cap, rd_head, rd_tail;
	struct nv_qp *qps[64]; /* QPs that complete here */
	int n_qps;
	int armed;    /* req_notify_cq: a channel event on the next completion */
	int dead;     /* the NIC died: its QPs were put in ERR and flushed here */
	int event_fd; /* the channel's, -1 */
};

struct nv_channel {
	struct ibv_comp_channel ch;
	int epfd;
};

/* session.c */
const char *nv_run_dir(void);
int nv_session_open(struct nv_session *s, const char *lab, const char *host);
void nv_session_close(struct nv_session *s);
int nv_call(struct nv_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int nv_ctx_call(struct nv_context *nc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int nv_json_int(const char *json, const char *key, long long *out);
int nv_reply_fd(struct nv_session *s, const char *key);
int nv_json_str(const char *json, const char *key, char *out, size_t n);
int nv_json_str_at(const char *json, const char *key, int idx, char *out, size_t n);
int nv_errno_of(const char *name);
void nv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* bpfmaps.c */
int nv_map_info(int fd, __u32 *max_entries, __u32 *value_size);
int nv_kick_run(int prog_fd, __u32 qpn, __u32 runs);
void nv_kick_template(unsigned char *eth);
int nv_doorbell_open(int *frame_len);
void *nv_mmap(int fd, size_t len, off_t off, int prot);

/* device.c */
int nv_locate(char *lab, size_t lab_n, char *host, size_t host_n);
int nv_device_lost(struct nv_context *nc);
int nv_gid_addr(const union ibv_gid *gid, char *out, size_t n);

/* memory.c */
struct nv_mr *nv_mr_find(struct nv_context *nc, __u32 lkey);

/* cq.c */
void nv_cq_deliver(struct nv_cq *c, const struct ibv_wc *wc);

/* post.c */
int nv_qp_push(struct nv_qp *q);
void nv_qp_retire(struct nv_qp *q, __u32 upto);
void nv_qp_flush(struct nv_qp *q, enum ibv_wc_status status);
void nv_qp_record(struct nv_qp *q, const void *rec);

#endif /* MRC_NIC_NATIVE_H */
