/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_engine.h: the send engine (docs/nic-program.md, "The send engine"):
 * at most one data packet per run, built in the frame of a kick or of an ACK
 * (the ACK clock); and the kicks that send nothing (timeout, EV replacement).
 * How much it may have in flight is nic_window.h's.
 */
#ifndef MRC_NIC_ENGINE_H
#define MRC_NIC_ENGINE_H

#include "mrc_csum.h"
#include "nic_ev.h"
#include "nic_window.h"

/* The loopback device: BPF_PROG_RUN's ingress device in every namespace (the
 * kernel's LOOPBACK_IFINDEX). No NIC program is attached to lo, so a frame
 * that arrives "from lo" is a test run. */
#define LOOPBACK_IFINDEX 1

/* Retransmit queue entries one engine run may pop: stale ones (acknowledged
 * meanwhile) are skipped, up to this many; the rest wait for the next run. */
#define ENGINE_RETX_POPS 8

/* EVs one engine run looks at, at most. A run that finds none usable moves
 * the cursor past them, so that a long run of unusable EVs (a plane down in a
 * profile ordered by plane) costs a few idle runs, not a walk of the whole
 * profile per packet (and not the verifier's work of NIC_MAX_QP_EVS steps). */
#define ENGINE_EV_TRIES 32

/* Frame bytes before the payload of a WRITE / WRITE_IMM packet. */
#define DATA_HDRS_LEN (ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_WRITE_HDRS_LEN)         /* 86 */
#define DATA_IMM_HDRS_LEN (ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_WRITE_IMM_HDRS_LEN) /* 90 */
/* The frame of a full WRITE packet: the size a frame is grown to first. */
#define DATA_FRAME_FULL (DATA_HDRS_LEN + NIC_SEG_SIZE + MRC_ICRC_LEN)

enum tx_plan {
	TX_NONE = 0,
	TX_NEW,  /* the next segment of WQE wqe_sent */
	TX_RETX, /* a PSN from the retransmit queue */
};

/* The headers of a data packet, as wire.data_packet lays them out: immdt is
 * sent only on the last packet of a WRITE_WITH_IMM; otherwise dext follows
 * reth directly (engine_run stores the two parts separately). */
struct data_hdrs {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct mrc_bth bth;
	struct mrc_reth reth;
	struct mrc_immdt immdt;
	struct mrc_data_ext dext;
} __attribute__((packed, aligned(2)));
_Static_assert(sizeof(struct data_hdrs) == DATA_IMM_HDRS_LEN, "struct data_hdrs size");
_Static_assert(sizeof(struct data_hdrs) <= sizeof(((struct nic_tx_scratch *)0)->hdrs),
	       "struct data_hdrs must fit nic_tx_scratch.hdrs");
_Static_assert(__builtin_offsetof(struct data_hdrs, immdt) == DATA_HDRS_LEN - 16,
	       "struct data_hdrs: immdt must follow reth");

/* Is a frame a kick (struct nic_kick: a live-frames test run's metadata, or
 * the payload of a doorbell port frame)? Fills req if so, and returns 1 + its
 * op (enum nic_kick_op) and *arg; 0 if it is not a kick, -1 if it is no kick
 * and may not be anything else either (a doorbell port frame). */
static __always_inline int kick_of(struct xdp_md *ctx, struct engine_req *req, __u32 *arg,
				   __u64 *age_ns)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct nic_kick *k;

	if (ctx->ingress_ifindex == LOOPBACK_IFINDEX) {
		k = (void *)(long)ctx->data_meta;
		if ((void *)(k + 1) > data)
			return 0; /* no metadata: an ordinary test run */
	} else if (ctx->ingress_ifindex == NIC_DOORBELL_IFINDEX) {
		/* The doorbell port's frames come from the host's applications,
		 * never the wire: a send kick, or nothing (docs/api.md, "Isolation"). */
		k = (void *)(eth + 1);
		if ((void *)(k + 1) > data_end || eth->h_proto != bpf_htons(NIC_KICK_ETHERTYPE))
			return -1;
		req->qpn = k->qpn & MRC_BTH_QPN_MASK;
		req->plane = NIC_MAX_PLANES;
		req->kick = 1;
		return 1 + NIC_KICK_SEND;
	} else {
		return 0;
	}
	req->qpn = k->qpn & MRC_BTH_QPN_MASK;
	req->plane = NIC_MAX_PLANES;
	req->kick = 1;
	*arg = k->arg;
	*age_ns = k->age_ns;
	if (k->op == NIC_KICK_TIMEOUT || k->op == NIC_KICK_CWND || k->op == NIC_KICK_EV_REPLACE ||
	    k->op == NIC_KICK_FAIL)
		return 1 + k->op;
	return 1 + NIC_KICK_SEND;
}

/* A kick that sent nothing counts once; an ACK was counted already. */
static __always_inline int engine_idle(const struct engine_req *req, __u32 reason)
{
	if (req->kick)
		count(reason, 1);
	return XDP_DROP;
}

/* May a packet leave on this EV now, from this CPU? GOOD, or SKIP whose time
 * is over, on a plane up at both ends (planes: the local and the peer's port
 * bitmaps), and not held by another CPU (ENGINE_EV_HOLD_NS). Read without the
 * EV's lock: a stale view costs one packet on a worse EV (or, in a race of
 * two CPUs for one EV, the order the hold protects, rarely). */
static __always_inline int ev_usable(const struct nic_ev *e, __u64 now, __u32 planes, __u32 cpu)
{
	__u32 st = e->state, plane = e->plane;

	if (plane >= NIC_MAX_PLANES || !((planes >> plane) & 1))
		return 0;
	if (e->last_tx_cpu != cpu && e->stats.tx_pkts &&
	    (__s64)(now - e->last_tx_ts) < ENGINE_EV_HOLD_NS)
		return 0;
	if (st == NIC_EVS_GOOD)
		return 1;
	return st == NIC_EVS_SKIP && now >= e->skip_until;
}

/* One usable EV: its state, value, position in the profile. */
struct ev_pick {
	struct nic_ev *e;
	__u32 ev;
	__u32 idx;
};

/*
 * The next usable EVs of the QP's round robin, from the cursor (sq->ev_next)
 * on: p1, the first; with want 2, p2, a second one, on another plane than
 * `avoid` if one is usable within the search (else just the next usable EV).
 * Returns how many were found. avoid is the plane of a lost packet that is to
 * be resent (NIC_MAX_PLANES: none): the loss may be the plane's (a blackholed
 * switch or link takes every EV it carries), so its other EVs are the next
 * ones lost. Read without the lock; the cursor moves under it when a packet
 * is sent (see engine_run), or here past ENGINE_EV_TRIES unusable EVs. Two
 * CPUs serving one QP at the same moment may pick the same EV: the round
 * robin is exact on one CPU, approximate across (ENGINE_EV_HOLD_NS keeps the
 * order that matters).
 */
static __always_inline __u32 pick_evs(struct nic_sq *sq, __u32 qpn, __u32 want, __u32 planes,
				      __u32 avoid, __u64 now, struct ev_pick *p1,
				      struct ev_pick *p2)
{
	struct nic_ev_key key = {.qpn = qpn};
	__u32 n = sq->n_evs, start, found = 0, cpu = bpf_get_smp_processor_id();
	int i;

	if (n == 0 || n > NIC_MAX_QP_EVS)
		return 0;
	start = *(volatile __u32 *)&sq->ev_next % n;
	for (i = 0; i < ENGINE_EV_TRIES; i++) {
		__u32 idx = start + i;
		struct nic_ev *e;

		if (i >= n)
			break;
		if (idx >= n)
			idx -= n;
		key.ev = sq->evs[idx & (NIC_MAX_QP_EVS - 1)];
		e = nic_evs_lookup(&key);
		if (!e || !ev_usable(e, now, planes, cpu))
			continue;
		if (found == 0) {
			p1->e = e;
			p1->ev = key.ev;
			p1->idx = idx;
			found = 1;
			if (want < 2 || (avoid < NIC_MAX_PLANES && e->plane != avoid))
				break; /* p1 will do, whatever is resent */
			continue;
		}
		/* p2: the next usable EV as a fallback, replaced by one off `avoid` */
		if (found == 1 || e->plane != avoid) {
			p2->e = e;
			p2->ev = key.ev;
			p2->idx = idx;
			found = 2;
		}
		if (avoid >= NIC_MAX_PLANES || e->plane != avoid)
			break;
	}
	if (!found && n > ENGINE_EV_TRIES)
		sq->ev_next = (start + ENGINE_EV_TRIES) % n;
	return found;
}

/* The plane of the EV that lost the next queued retransmission, read without
 * the lock (a stale view costs one retransmission on a worse plane), or
 * NIC_MAX_PLANES when no retransmission is queued or its EV is gone. */
static __always_inline __u32 retx_plane(struct nic_sq *sq, __u32 qpn)
{
	__u32 head = *(volatile __u32 *)&sq->retx_head;
	struct nic_ev_key key = {.qpn = qpn};
	struct nic_ev *e;

	if (head == *(volatile __u32 *)&sq->retx_tail)
		return NIC_MAX_PLANES;
	key.ev = sq->retxq[head & (NIC_RETX_SLOTS - 1)].ev;
	e = key.ev ? nic_evs_lookup(&key) : NULL;
	return e ? e->plane : NIC_MAX_PLANES;
}

/* Payload bytes of the segment at byte `off` of a WQE of `len` bytes: a full
 * packet's NIC_SEG_SIZE, or what is left (0 for a zero-length WRITE). */
static __always_inline __u32 segment_len(__u32 len, __u32 off)
{
	__u32 seg = len > off ? len - off : 0;

	return seg > NIC_SEG_SIZE ? NIC_SEG_SIZE : seg;
}

/* Completions (sq->lock held): every WQE whose last PSN snd_una has passed,
 * in posting order. Its record is gathered in sc (wr_id and len are read now:
 * user space may reuse the slot as soon as wqe_done passes it), unless the QP
 * has a send CQ and the WQE is not signaled (CQ moderation). wq->done tells a
 * poster which slots are free without a syscall. */
static __always_inline void engine_complete(struct nic_sq *sq, struct nic_wq *wq,
					    struct nic_tx_scratch *sc, __u32 qpn, __u64 now)
{
	__u32 n = 0;
	int i;

	for (i = 0; i < NIC_MSG_SLOTS; i++) {
		__u32 k = sq->wqe_done, slot = k & (NIC_MSG_SLOTS - 1);
		__u32 last = sq->wqe_last_psn[slot] & MRC_PSN_MASK;
		/* The record's place is counted in the map value, which the verifier
		 * does not track: a count in a register would split its walk at every
		 * WQE, signaled or not. */
		struct nic_send_event *e = &sc->done[sc->n_done & (NIC_MSG_SLOTS - 1)];
		__u32 keep;

		if (k == sq->wqe_sent)
			break;
		if (MRC_PSN_DIFF(sq->snd_una, last) <= 0)
			break;
		e->type = NIC_EV_SEND_DONE;
		e->qpn = qpn;
		e->msn = (sq->snd_msn - (sq->wqe_sent - k)) & MRC_DATA_MSN_MASK;
		e->last_psn = last;
		e->wr_id = wq->wqes[slot].wr_id;
		e->len = wq->wqes[slot].len;
		e->wqe = k;
		e->ts = now;
		sq_wimm_done(sq, wq->wqes[slot].opcode);
		/* Kept: no send CQ ((send_cq - 1) >> 31 is 1 for 0 only; branch-free,
		 * as above), or signaled. An unkept record is overwritten by the next. */
		keep = ((sq->send_cq - 1) >> 31) | (wq->wqes[slot].flags & NIC_WQE_F_SIGNALED);
		sc->n_done += keep & 1;
		sq->wqe_done = k + 1;
		n++;
	}
	sq->tx_stats.wqes_done += n;
	sc->n_wqes = n;
	if (n)
		*(volatile __u32 *)&wq->done = sq->wqe_done;
}

/*
 * What to send (sq->lock held), into sc: a queued retransmission first (the
 * protocol of docs/nic-program.md, "Send QPs": skip it if acknowledged or out of [snd_una,
 * snd_nxt), else clear its retx and echoed bits), else, for a QP in RTS, the
 * next segment of WQE wqe_sent if the window and cwnd have room, and max_wimm
 * for its first (nic_window.h): PSN snd_nxt, and the WQE is done with when this
 * is its last segment.
 */
static __always_inline void engine_plan(struct nic_sq *sq, const struct nic_wq *wq,
					const struct nic_tx_ring *ring, struct nic_tx_scratch *sc)
{
	__u32 k, slot, len, off, seg, psn;
	int i;

	for (i = 0; i < ENGINE_RETX_POPS; i++) {
		__u32 h = sq->retx_head;
		const struct nic_retx *r = &sq->retxq[h & (NIC_RETX_SLOTS - 1)];
		const struct nic_tx_pkt *t;

		if (h == sq->retx_tail)
			break;
		psn = r->psn & MRC_PSN_MASK;
		t = &ring->pkts[RING_POS(psn)];
		sq->retx_head = h + 1;
		if (MRC_PSN_DIFF(psn, sq->snd_una) < 0 || MRC_PSN_DIFF(psn, sq->snd_nxt) >= 0 ||
		    BM_TEST(sq->acked, psn) || t->psn != psn ||
		    t->wqe - sq->wqe_done > sq->wqe_sent - sq->wqe_done) {
			sq->tx_stats.retx_stale++;
			continue;
		}
		BM_CLEAR(sq->retx, psn);
		BM_CLEAR(sq->echoed, psn);
		sc->what = TX_RETX;
		sc->psn = psn;
		sc->lost_ev = r->ev;
		sc->wqe = t->wqe;
		sc->off = t->msg_off;
		sc->msn = (sq->snd_msn - (sq->wqe_sent - t->wqe)) & MRC_DATA_MSN_MASK;
		sq->tx_stats.retx_pkts++;
		return;
	}
	if (sq->state != NIC_QPS_RTS)
		return;
	k = sq->wqe_sent;
	if (*(volatile __u32 *)&wq->posted == k)
		return; /* nothing posted */
	if (sq_window_full(sq)) {
		sc->full = 1;
		sq->tx_stats.window_full++;
		return;
	}
	slot = k & (NIC_MSG_SLOTS - 1);
	len = wq->wqes[slot].len;
	off = sq->wqe_off;
	if (!sq_wimm_start(sq, wq->wqes[slot].opcode, off))
		return; /* a WRITE_WITH_IMM held for max_wimm */
	seg = segment_len(len, off);
	psn = sq->snd_nxt & MRC_PSN_MASK;
	sq->snd_nxt = (psn + 1) & MRC_PSN_MASK;
	sc->what = TX_NEW;
	sc->psn = psn;
	sc->wqe = k;
	sc->off = off;
	sc->msn = sq->snd_msn & MRC_DATA_MSN_MASK;
	if (off + seg >= len) { /* its last segment */
		sq->wqe_last_psn[slot] = psn;
		sq->wqe_sent = k + 1;
		sq->wqe_off = 0;
		sq->snd_msn = (sq->snd_msn + 1) & MRC_DATA_MSN_MASK;
	} else {
		sq->wqe_off = off + seg;
	}
	/* The window's last packet asks for its answer at once: a receiver that
	 * coalesces would otherwise hold it, and nothing would follow it. */
	sc->ackreq = sq_window_full(sq);
	sq->tx_stats.data_pkts++;
	sq->tx_stats.data_bytes += seg;
}

/* A WQE whose source cannot be read (error: enum nic_qp_error): the QP goes
 * to ERR (a local error). */
static __always_inline int engine_wqe_error(const struct engine_req *req, struct nic_sq *sq,
					    __u32 psn, __u64 now, __u32 error)
{
	bpf_spin_lock(&sq->lock);
	sq->state = NIC_QPS_ERR;
	bpf_spin_unlock(&sq->lock);
	emit_qp_err(req->qpn, psn, 0, 0, 0, error, sq->send_cq, now);
	count(NIC_CNT_TX_BAD_WQE, 1);
	return engine_idle(req, NIC_CNT_KICK_IDLE);
}

static __always_inline int engine_bad_wqe(const struct engine_req *req, struct nic_sq *sq,
					  __u32 psn, __u64 now)
{
	return engine_wqe_error(req, sq, psn, now, NIC_ERR_BAD_WQE);
}

/* ---- engine_run, step by step ------------------------------------------- */

/* The packet one engine run sends. */
struct tx_pkt {
	__u64 tx_ts;    /* MRC_DATA.tx_ts, recorded before the packet leaves */
	__u32 psn, wqe, off, seg, last, retx, ev, plane;
	__u32 ackreq;   /* BTH AckReq: the receiver answers at once (docs/nic-program.md, "ACK coalescing") */
	__u32 src_region; /* the region its payload is read from (nic_regions, nic_mems) */
	__u32 src_elem; /* the first element of its payload in that region's memory */
	__u32 src_in;   /* where in that element the payload starts */
	__u32 hdrs;     /* frame bytes before the payload: DATA_HDRS_LEN or DATA_IMM_HDRS_LEN */
};

/*
 * A first look without the lock: is there anything to send? Only then are
 * EVs looked for (a retransmission wants p2 in case p1 is on the plane that
 * lost it, *avoid) and the frame grown to the common size, a full WRITE, so
 * that a frame that cannot grow changes no state. Returns the EVs found.
 */
static __always_inline __u32 engine_look(struct xdp_md *ctx, struct nic_sq *sq,
					 const struct nic_wq *wq, __u32 qpn, __u32 planes,
					 __u64 now, struct ev_pick *p1, struct ev_pick *p2,
					 __u32 *avoid)
{
	__u32 found = 0, want;
	int work, delta;

	work = sq->retx_head != sq->retx_tail ||
	       (sq->state == NIC_QPS_RTS && *(volatile __u32 *)&wq->posted != sq->wqe_sent);
	if (work) {
		want = sq->retx_head != sq->retx_tail ? 2 : 1;
		if (want == 2)
			*avoid = retx_plane(sq, qpn);
		found = pick_evs(sq, qpn, want, planes, *avoid, now, p1, p2);
		if (!found)
			count(NIC_CNT_TX_NO_EV, 1);
	}
	if (found) {
		delta = (int)DATA_FRAME_FULL - (int)bpf_xdp_get_buff_len(ctx);
		if (delta && bpf_xdp_adjust_tail(ctx, delta)) {
			count(NIC_CNT_DROP_XDP_ERR, 1);
			found = 0;
		}
	}
	return found;
}

/* Under sq->lock: completions, then what to send and on which EV. The EV is
 * the first found, unless a retransmission was lost on it or on its plane
 * (p2: on another plane if one is usable). The round robin goes on after the
 * EV used, or stays on the first found when it was passed over. */
static __always_inline void engine_locked(struct nic_sq *sq, struct nic_wq *wq,
					  const struct nic_tx_ring *ring,
					  struct nic_tx_scratch *sc, __u32 qpn, __u32 found,
					  const struct ev_pick *p1, const struct ev_pick *p2,
					  __u32 avoid, __u64 now)
{
	engine_complete(sq, wq, sc, qpn, now);
	if (!found)
		return;
	engine_plan(sq, wq, ring, sc);
	if (sc->what != TX_NONE)
		sc->wqe_copy = wq->wqes[sc->wqe & (NIC_MSG_SLOTS - 1)];
	if (sc->what == TX_RETX && found > 1 &&
	    (p1->ev == sc->lost_ev || (p1->e->plane == avoid && p2->e->plane != avoid)))
		sc->second = 1;
	if (sc->what != TX_NONE)
		sq->ev_next = sc->second ? p1->idx : p1->idx + 1;
}

/* The segment's source: from the WQE (the copy made under the QP's lock) and
 * its region, which must be of the QP's protection domain and host (an
 * application's region, owner host + 1, is its host's only). PKT_GO or the
 * QP's error: a local protection error for a region of another PD or host,
 * nothing read from it. */
static __always_inline int engine_source(const struct engine_req *req, struct nic_sq *sq,
					 const struct nic_wqe *w, struct tx_pkt *t, __u64 now)
{
	struct nic_region *rg;
	__u32 rid;
	__u64 off;

	if (!t->seg)
		return PKT_GO;
	rid = w->src_region;
	rg = nic_regions_lookup(&rid);
	if (!rg || !rg->n_elems)
		return engine_bad_wqe(req, sq, t->psn, now);
	if (rg->pd != sq->pd || (rg->owner && rg->owner != sq->local_host + 1))
		return engine_wqe_error(req, sq, t->psn, now, NIC_ERR_LOC_PROT);
	off = (__u64)w->src_off + t->off; /* any byte of the MR */
	if (off < rg->head || off + t->seg > (__u64)rg->n_elems * NIC_MR_ELEM_SIZE - rg->tail)
		return engine_bad_wqe(req, sq, t->psn, now);
	t->src_region = rid;
	t->src_elem = rg->first_elem + (__u32)(off / NIC_MR_ELEM_SIZE);
	t->src_in = (__u32)(off % NIC_MR_ELEM_SIZE);
	return PKT_GO;
}

/* Record the transmission before the packet leaves (the loss walk reads it):
 * the EV's last packet, under its lock, and the PSN's ring entry. */
static __always_inline void engine_record(struct nic_ev *e, struct nic_tx_ring *ring,
					  struct tx_pkt *t)
{
	struct nic_tx_pkt *r;
	__u32 cpu, prev, has_prev;

	t->tx_ts = bpf_ktime_get_ns();
	cpu = bpf_get_smp_processor_id();
	bpf_spin_lock(&e->lock);
	has_prev = e->stats.tx_pkts != 0;
	prev = e->last_tx_psn;
	e->last_tx_psn = t->psn;
	e->last_tx_cpu = cpu;
	e->last_tx_ts = t->tx_ts;
	e->stats.tx_pkts++;
	e->stats.tx_bytes += t->seg;
	e->stats.retx_pkts += t->retx;
	bpf_spin_unlock(&e->lock);
	r = &ring->pkts[RING_POS(t->psn)];
	r->tx_ts = t->tx_ts;
	r->psn = t->psn;
	r->prev_psn = has_prev ? prev : 0;
	r->ev = t->ev;
	r->flags = (has_prev ? NIC_TX_F_PREV : 0) | (t->retx ? NIC_TX_F_RETX : 0);
	r->len = t->seg;
	r->wqe = t->wqe;
	r->msg_off = t->off;
}

/* The data packet's headers, as wire.data_packet lays them out. */
static __always_inline void engine_headers(struct data_hdrs *f, const struct nic_port *port,
					   const struct nic_sq *sq, const struct nic_wqe *w,
					   const struct tx_pkt *t, __u32 host, __u32 msn,
					   __u32 total)
{
	if (port) {
		__builtin_memcpy(f->eth.h_source, port->mac, ETH_ALEN);
		__builtin_memcpy(f->eth.h_dest, port->nh_mac, ETH_ALEN);
	}
	f->eth.h_proto = bpf_htons(ETH_P_IP);
	f->ip.version = 4;
	f->ip.ihl = 5;
	f->ip.tos = ((t->retx ? MRC_DSCP_TRIMMABLE_RETX : MRC_DSCP_TRIMMABLE) << MRC_DSCP_SHIFT) |
		    MRC_ECN_ECT0;
	f->ip.tot_len = bpf_htons(total - ETH_HLEN);
	f->ip.frag_off = bpf_htons(0x4000); /* DF */
	f->ip.ttl = 64;
	f->ip.protocol = IPPROTO_UDP;
	f->ip.saddr = bpf_htonl(NIC_HOST_NET + (t->plane << 8) + host + 1);
	f->ip.daddr = bpf_htonl(NIC_HOST_NET + (t->plane << 8) + sq->peer_host + 1);
	f->ip.check = ipv4_csum(&f->ip);
	f->udp.source = bpf_htons(t->ev);
	f->udp.dest = bpf_htons(MRC_UDP_PORT);
	f->udp.len = bpf_htons(total - ETH_HLEN - sizeof(struct iphdr));
	f->bth.opcode = t->hdrs == DATA_IMM_HDRS_LEN ? MRC_OP_WRITE_IMM : MRC_OP_WRITE;
	f->bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f->bth.qpn = bpf_htonl(sq->peer_qpn & MRC_BTH_QPN_MASK);
	f->bth.apsn = bpf_htonl((t->ackreq ? MRC_BTH_ACK_MASK : 0) | t->psn);
	f->reth.va = bpf_htonll(w->remote_va + t->off);
	f->reth.rkey = bpf_htonl(w->rkey);
	f->reth.dmalen = bpf_htonl(t->seg);
	f->immdt.imm = bpf_htonl(w->imm);
	f->dext.flags_msn = bpf_htonl((t->last ? MRC_DATA_F_LAST : 0) | msn);
	f->dext.msg_off = bpf_htonl(t->off);
	f->dext.tx_ts = bpf_htonll(t->tx_ts);
}

/* A payload that starts inside an element: its pieces read through dynptrs
 * over their elements into the copy buffer, then stored whole (the mirror
 * of the receiver's rx_copy_unaligned). */
static __always_inline int engine_copy_unaligned(struct xdp_md *ctx, const struct tx_pkt *t)
{
	struct nic_copy_buf *buf;
	__u32 zero = 0, k;
	__u64 seg;

	buf = nic_copy_scratch_lookup(&zero);
	if (!buf)
		return -1;
	for (k = 0; k <= NIC_SEG_ELEMS; k++) {
		__u32 in = 0, at = 0, src_k = t->src_elem + k;
		__u64 n = copy_piece(t->seg, t->src_in, k, &in, &at);
		struct nic_mr_elem *src;
		struct bpf_dynptr dp;

		if (!n)
			break;
		src = nic_mem_lookup((__u32 *)&t->src_region, &src_k);
		if (!src || bpf_dynptr_from_mem(src, sizeof(*src), 0, &dp) ||
		    bpf_dynptr_read(buf->bytes + piece_at(at), n, &dp, in, 0))
			return -1;
	}
	seg = payload_bytes(t->seg);
	if (seg < 1)
		return -1;
	return bpf_xdp_store_bytes(ctx, t->hdrs, buf->bytes, seg) ? -1 : 0;
}

/* Write the frame: size it, store the headers (BTH .. ImmDt, then MRC_DATA
 * where it goes: over the ImmDt slot of a WRITE), the ICRC slot, and the
 * payload element by element from the source region (through the copy
 * buffer when it starts inside an element). */
static __always_inline int engine_write(struct xdp_md *ctx, const struct engine_req *req,
					struct nic_sq *sq, struct data_hdrs *f,
					const struct tx_pkt *t, __u64 now)
{
	__u32 total = t->hdrs + t->seg + MRC_ICRC_LEN, icrc = MRC_ICRC_UNUSED, i;
	struct nic_mr_elem *src;
	int delta = (int)total - (int)bpf_xdp_get_buff_len(ctx);

	if (sq->auth) {
		__u32 op = f->bth.opcode;

		icrc = bpf_htonl(data_mac(sq->auth_key, op, bpf_ntohl(f->bth.qpn),
					  bpf_ntohl(f->bth.apsn), bpf_ntohll(f->reth.va),
					  bpf_ntohl(f->reth.rkey), bpf_ntohl(f->reth.dmalen),
					  bpf_ntohl(f->dext.flags_msn), bpf_ntohl(f->dext.msg_off),
					  op == MRC_OP_WRITE_IMM ? bpf_ntohl(f->immdt.imm) : 0));
	}

	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return engine_idle(req, NIC_CNT_DROP_XDP_ERR); /* lost: loss detection resends it */
	if (bpf_xdp_store_bytes(ctx, 0, f, DATA_HDRS_LEN - 16 + sizeof(f->immdt)) ||
	    bpf_xdp_store_bytes(ctx, t->hdrs - sizeof(f->dext), &f->dext, sizeof(f->dext)) ||
	    bpf_xdp_store_bytes(ctx, t->hdrs + t->seg, &icrc, MRC_ICRC_LEN))
		return engine_idle(req, NIC_CNT_DROP_XDP_ERR);
	if (t->src_in)
		return engine_copy_unaligned(ctx, t) ? engine_idle(req, NIC_CNT_DROP_XDP_ERR) : PKT_GO;
	for (i = 0; i < NIC_SEG_ELEMS; i++) {
		__u32 at = i * NIC_MR_ELEM_SIZE, src_k = t->src_elem + i;
		__u64 n_bytes;

		if (at >= t->seg)
			break;
		src = nic_mem_lookup((__u32 *)&t->src_region, &src_k);
		if (!src)
			return engine_bad_wqe(req, sq, t->psn, now);
		n_bytes = elem_bytes(t->seg, at);
		if (n_bytes < 1)
			return engine_idle(req, NIC_CNT_DROP_XDP_ERR);
		if (bpf_xdp_store_bytes(ctx, t->hdrs + at, src, n_bytes))
			return engine_idle(req, NIC_CNT_DROP_XDP_ERR);
	}
	return PKT_GO;
}

/* Send it: XDP_TX when it leaves from the port the ACK came in on (the ACK
 * clock), else through the devmap nic_tx_ports (kicks always). */
static __always_inline int engine_send(const struct engine_req *req, const struct tx_pkt *t,
				       __u32 key)
{
	int verdict;

	count(t->retx ? NIC_CNT_TX_RETX : NIC_CNT_TX_DATA, 1);
	count(NIC_CNT_TX_BYTES, t->seg);
	if (!req->kick && t->plane == req->plane) {
		count(NIC_CNT_TX_CLOCKED, 1);
		return XDP_TX;
	}
	verdict = nic_tx_ports_redirect(key, XDP_DROP);
	if (verdict != XDP_REDIRECT) {
		count(NIC_CNT_TX_REDIRECT_ERR, 1);
		return engine_idle(req, NIC_CNT_KICK_IDLE);
	}
	count(req->kick ? NIC_CNT_KICK_SENT : NIC_CNT_TX_CLOCKED, 1);
	return XDP_REDIRECT;
}

/*
 * The send engine: at most one data packet of QP req->qpn, built in this
 * frame. Returns XDP_TX or XDP_REDIRECT with the packet, else XDP_DROP.
 */
static __always_inline int engine_run(struct xdp_md *ctx, const struct engine_req *req)
{
	struct nic_tx_scratch *sc;
	struct nic_sq *sq;
	struct nic_wq *wq;
	struct nic_tx_ring *ring;
	const struct nic_wqe *w;
	struct ev_pick p1 = {}, p2 = {};
	struct data_hdrs *f;
	struct tx_pkt t = {};
	struct nic_ev *e;
	__u32 qpn = req->qpn, zero = 0, ring_id, host, planes, found, n, key;
	__u32 avoid = NIC_MAX_PLANES;
	__u64 now;
	int verdict;

	sq = nic_tx_qps_lookup(&qpn);
	if (!sq)
		return engine_idle(req, NIC_CNT_DROP_UNKNOWN_QP);
	if (!sq->engine || sq->mpr == 0 || sq->mpr > NIC_MPR_MAX)
		return engine_idle(req, NIC_CNT_DROP_QP_CONFIG);
	if (sq->state != NIC_QPS_RTS && sq->state != NIC_QPS_SQD)
		return engine_idle(req, NIC_CNT_DROP_QP_STATE);
	ring_id = sq->ring;
	ring = nic_tx_ring_lookup(&ring_id);
	wq = nic_wq_lookup(&ring_id);
	sc = nic_tx_scratch_lookup(&zero);
	if (!ring || !wq || !sc)
		return engine_idle(req, NIC_CNT_DROP_QP_CONFIG);
	host = sq->local_host;
	planes = host_ports(host) & sq_peer_ports(sq, host);
	now = bpf_ktime_get_ns();
	found = engine_look(ctx, sq, wq, qpn, planes, now, &p1, &p2, &avoid);

	sc->what = TX_NONE;
	sc->full = 0;
	sc->second = 0;
	sc->n_done = 0;
	sc->n_wqes = 0;
	sc->ackreq = 0;
	bpf_spin_lock(&sq->lock);
	engine_locked(sq, wq, ring, sc, qpn, found, &p1, &p2, avoid, now);
	bpf_spin_unlock(&sq->lock);

	n = sc->n_done;
	if (n > NIC_MSG_SLOTS)
		n = NIC_MSG_SLOTS;
	emit_send_done(sc, n, sq->send_cq);
	count(NIC_CNT_SEND_DONE, sc->n_wqes);
	if (sc->full)
		count(NIC_CNT_TX_WINDOW_FULL, 1);
	if (sc->what == TX_NONE)
		return engine_idle(req, NIC_CNT_KICK_IDLE);

	t.retx = sc->what == TX_RETX;
	e = sc->second ? p2.e : p1.e;
	t.ev = sc->second ? p2.ev : p1.ev;
	if (!e)
		return engine_idle(req, NIC_CNT_KICK_IDLE); /* cannot happen: found >= 1 */
	t.plane = e->plane;
	if (t.plane >= NIC_MAX_PLANES)
		return engine_idle(req, NIC_CNT_KICK_IDLE); /* cannot happen: ev_usable checked it */
	t.psn = sc->psn;
	t.wqe = sc->wqe;
	t.off = sc->off;
	w = &sc->wqe_copy; /* taken under the lock (nic_tx_scratch) */
	t.seg = segment_len(w->len, t.off);
	t.last = t.off + t.seg >= w->len;
	/* A retransmission or a message's end is answered at once; so is the
	 * packet that fills the window (engine_plan). */
	t.ackreq = t.retx || t.last || sc->ackreq;
	verdict = engine_source(req, sq, w, &t, now);
	if (verdict != PKT_GO)
		return verdict;
	engine_record(e, ring, &t);

	key = host * NIC_MAX_PLANES + t.plane;
	t.hdrs = (w->opcode == MRC_OP_WRITE_IMM && t.last) ? DATA_IMM_HDRS_LEN : DATA_HDRS_LEN;
	f = (struct data_hdrs *)sc->hdrs;
	__builtin_memset(f, 0, sizeof(*f));
	engine_headers(f, nic_ports_lookup(&key), sq, w, &t, host, sc->msn,
		       t.hdrs + t.seg + MRC_ICRC_LEN);
	verdict = engine_write(ctx, req, sq, f, &t, now);
	if (verdict != PKT_GO)
		return verdict;
	return engine_send(req, &t, key);
}

#endif /* MRC_NIC_ENGINE_H */
