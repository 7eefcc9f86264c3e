/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_answers.h: the receiver's answers, built in place in the frame that
 * asked: a SACK or NACK for a data packet (answer), a PROBE_REPLY for a PROBE
 * (rx_probe). They go back over the receive QP's reverse EV set when it has
 * one (XDP_TX, or XDP_REDIRECT to another plane's port), else out of the
 * port they came in on; and the replies to the receiver's reverse EV probes.
 */
#ifndef MRC_NIC_ANSWERS_H
#define MRC_NIC_ANSWERS_H

#include "mrc_csum.h"
#include "nic_common.h"

/* ---- Where an answer goes: in place, or over a reverse EV ---------------- */

/* The answer's addresses, EV and port (docs/nic-program.md, "Reverse EVs"). */
struct answer_route {
	__u8 to_mac[ETH_ALEN], from_mac[ETH_ALEN];
	__be32 to_ip, from_ip;
	__be16 ev;    /* UDP source port */
	__u32 key;    /* nic_tx_ports key of the port it leaves from, when redirect */
	__u32 redirect; /* 1: out of another port (XDP_REDIRECT); 0: XDP_TX */
};

/* Back where the packet came from: addresses swapped, its EV kept as source
 * port (docs/wire-format.md 3), out of the port it came in on. */
static __always_inline void route_in_place(struct answer_route *r, const struct mrc_pkt *p)
{
	__builtin_memcpy(r->to_mac, p->eth->h_source, ETH_ALEN);
	__builtin_memcpy(r->from_mac, p->eth->h_dest, ETH_ALEN);
	r->to_ip = p->ip->saddr;
	r->from_ip = p->ip->daddr;
	r->ev = p->udp->source;
	r->redirect = 0;
}

/*
 * Over receive QP qpn's reverse EV set, if it has one: a usable reverse EV of
 * the plane the packet came in on, else of any plane, chosen by psn (answers
 * spread over the set); its plane must be up here (ports). Otherwise in place.
 * Another plane means that plane's addresses and MACs, and a redirect.
 */
static __always_inline void route_reverse(struct answer_route *r, const struct mrc_pkt *p,
					  __u32 qpn, __u32 psn, __u32 ports)
{
	__u32 slot = qpn & (NIC_MAX_QPS - 1), in, row, n, k, i, plane, host, key;
	struct nic_rev_ev_set *set;
	struct nic_port *port;
	__u32 from, to;

	route_in_place(r, p);
	set = nic_rev_evs_lookup(&slot);
	if (!set || set->qpn != (qpn | NIC_RQ_TAG_USED))
		return;
	from = bpf_ntohl(r->from_ip) - NIC_HOST_NET;
	to = bpf_ntohl(r->to_ip) - NIC_HOST_NET;
	in = from >> 8;
	if (in >= NIC_MAX_PLANES)
		return;
	row = set->n_use[in] ? in : NIC_MAX_PLANES;
	n = set->n_use[row];
	if (n == 0 || n > NIC_REV_EVS)
		return;
	k = psn % n;
	asm volatile("" : "+r"(k)); /* the verifier does not bound a remainder: check it */
	if (k >= NIC_REV_EVS)
		return;
	k += row * NIC_REV_EVS;
	asm volatile("" : "+r"(k));
	if (k >= (NIC_MAX_PLANES + 1) * NIC_REV_EVS)
		return;
	i = set->use[k];
	if (i >= NIC_REV_EVS)
		return;
	plane = set->evs[i].plane;
	if (plane >= NIC_MAX_PLANES || !((ports >> plane) & 1) || !set->evs[i].ev)
		return;
	r->ev = bpf_htons(set->evs[i].ev);
	if (plane == in)
		return;
	host = (from & 0xff) - 1; /* checked by addrs_match: local_host + 1 */
	if (host >= NIC_MAX_HOSTS)
		return;
	key = host * NIC_MAX_PLANES + plane;
	port = nic_ports_lookup(&key);
	if (!port || !port->ifindex) {
		r->ev = p->udp->source; /* that port is not set up: in place after all */
		return;
	}
	__builtin_memcpy(r->from_mac, port->mac, ETH_ALEN);
	__builtin_memcpy(r->to_mac, port->nh_mac, ETH_ALEN);
	r->from_ip = bpf_htonl(NIC_HOST_NET + (plane << 8) + (from & 0xff));
	r->to_ip = bpf_htonl(NIC_HOST_NET + (plane << 8) + (to & 0xff));
	r->key = key;
	r->redirect = 1;
}

/* The verdict that sends a turned-around frame along its route. */
static __always_inline int route_send(const struct answer_route *r)
{
	if (!r->redirect)
		return XDP_TX;
	count(NIC_CNT_ANSWER_REROUTED, 1);
	if (nic_tx_ports_redirect(r->key, XDP_DROP) != XDP_REDIRECT) {
		count(NIC_CNT_TX_REDIRECT_ERR, 1);
		return XDP_DROP;
	}
	return XDP_REDIRECT;
}

/*
 * Turn a received frame around, in place, into an answer of `size` bytes
 * (Ethernet, IPv4 with IHL 5, UDP, then whatever the caller writes after
 * them), with the route's MACs, addresses and EV, the control class in DSCP.
 * Returns the frame, or NULL when it cannot be resized (counted). The route
 * is read before: resizing invalidates packet pointers, and the new headers
 * overwrite the old ones (IPv4 options of the received packet are not kept).
 * In place, not built on the stack and stored: cheaper (docs/nic-program.md,
 * "Answers").
 */
static __always_inline void *turn_around(struct xdp_md *ctx, const struct answer_route *r,
					 __u32 size)
{
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	void *end;
	int delta;

	/* The program is not loaded with BPF_F_XDP_HAS_FRAGS: every frame it
	 * sees is linear, and data_end - data is its whole length. */
	delta = (int)size - (int)(ctx->data_end - ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta)) {
		count(NIC_CNT_DROP_XDP_ERR, 1);
		return NULL;
	}
	eth = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if ((void *)eth + size > end || size < sizeof(*eth) + sizeof(*ip) + sizeof(*udp)) {
		count(NIC_CNT_DROP_XDP_ERR, 1);
		return NULL;
	}
	ip = (void *)(eth + 1);
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return NULL; /* for the verifier: size covers it */

	__builtin_memcpy(eth->h_dest, r->to_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, r->from_mac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = (MRC_DSCP_CONTROL << MRC_DSCP_SHIFT) | MRC_ECN_NOT_ECT;
	ip->tot_len = bpf_htons(size - ETH_HLEN);
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000); /* DF */
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ip->check = 0;
	ip->saddr = r->from_ip;
	ip->daddr = r->to_ip;
	ip->check = ipv4_csum(ip);
	udp->source = r->ev;
	udp->dest = bpf_htons(MRC_UDP_PORT);
	udp->len = bpf_htons(size - ETH_HLEN - sizeof(*ip));
	udp->check = 0;
	return eth;
}

/* ---- Answers: SACK and NACK ---------------------------------------------- */

/* The whole answer frame, as wire.sack_packet / wire.nack_packet build it. */
struct ack_frame {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct mrc_bth bth;
	struct mrc_aeth aeth;
	struct mrc_ack_ext ack;
	__be32 icrc;
} __attribute__((packed, aligned(2))); /* every header sits at an even offset */
_Static_assert(sizeof(struct ack_frame) ==
		       ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_ACK_HDRS_LEN + MRC_ICRC_LEN,
	       "struct ack_frame is not the 94-byte SACK/NACK");

/* What an answer says besides what it copies from the data packet. */
struct ack_info {
	__u64 sack_bitmap; /* bit i: PSN sack_base + i received */
	__u32 peer_qpn;    /* BTH dest QP: the data sender's QP */
	__u32 cum_psn;
	__u32 sack_base;
	__u32 msn;         /* AETH.msn: messages completed in order */
	__u32 mpr;
	__u32 port_bitmap;
	__u8 syndrome;     /* MRC_AETH_* */
	__u8 reason;       /* MRC_NACK_* */
	__u8 flags;        /* MRC_ACK_F_* */
	__u8 counter;      /* enum nic_counter to add 1 to when it is sent */
	__u32 auth;        /* 1: MAC the answer with key (nic_auth.h) */
	__u64 key[2];
};

/* Turn the data packet into its answer (a SACK or a NACK) and send it back. */
static __always_inline int answer(struct xdp_md *ctx, struct mrc_pkt *p,
				  struct mrc_data_ext *dext, __u32 psn,
				  const struct ack_info *ai)
{
	__be64 echo_ts = dext->tx_ts; /* copied as is (big endian) */
	__be16 ev = p->udp->source; /* the data packet's EV, echoed whatever the route */
	struct answer_route route;
	struct ack_frame *f;

	/* Here, after the receive lock, not before it: the verifier walks what
	 * follows once per outcome of the pick, and the lock's spin is costly. */
	route_reverse(&route, p, bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK, psn, ai->port_bitmap);
	f = turn_around(ctx, &route, sizeof(*f));

	if (!f)
		return XDP_DROP;
	f->bth.opcode = MRC_OP_ACK;
	f->bth.flags = 0;
	f->bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f->bth.qpn = bpf_htonl(ai->peer_qpn & MRC_BTH_QPN_MASK);
	f->bth.apsn = bpf_htonl(psn & MRC_BTH_PSN_MASK); /* A = 0 */

	f->aeth.smsn = bpf_htonl(((__u32)ai->syndrome << MRC_AETH_SYN_SHIFT) |
				 (ai->msn & MRC_AETH_MSN_MASK));

	f->ack.mpr_cum = bpf_htonl(((ai->mpr << MRC_ACK_MPR_SHIFT) & MRC_ACK_MPR_MASK) |
				   (ai->cum_psn & MRC_ACK_CUM_PSN_MASK));
	f->ack.sack_base = bpf_htonl(ai->sack_base & MRC_ACK_SACK_PSN_MASK);
	f->ack.sack_bitmap = bpf_htonll(ai->sack_bitmap);
	f->ack.echo_ts = echo_ts;
	f->ack.echo_ev = ev;
	f->ack.flags = ai->flags;
	f->ack.nack_reason = ai->reason;
	f->ack.port_bitmap = bpf_htonl(ai->port_bitmap);
	f->icrc = ai->auth ? bpf_htonl(ack_mac(ai->key, ai->peer_qpn, psn, ai->cum_psn,
					       ai->sack_base, ai->sack_bitmap, ai->syndrome,
					       ai->reason, ai->flags, bpf_ntohs(ev),
					       ai->port_bitmap))
			   : MRC_ICRC_UNUSED;
	count(ai->counter, 1);
	return route_send(&route);
}

/* ---- Receiver role: PROBE -> PROBE_REPLY --------------------------------- */

/* The whole PROBE_REPLY frame, as wire.probe_reply builds it. */
struct probe_frame {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct mrc_bth bth;
	struct mrc_probe_ext probe;
	__be32 icrc;
} __attribute__((packed, aligned(2)));
_Static_assert(sizeof(struct probe_frame) ==
		       ETH_HLEN + MRC_IPV4_UDP_LEN + MRC_PROBE_HDRS_LEN + MRC_ICRC_LEN,
	       "struct probe_frame is not the 74-byte PROBE_REPLY");

/* Both probe packets are exactly BTH MRC_PROBE ICRC. */
static __always_inline int probe_len_ok(struct mrc_pkt *p)
{
	if (p->udp_payload < MRC_PROBE_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_SHORT);
	if (p->udp_payload > MRC_PROBE_HDRS_LEN + MRC_ICRC_LEN)
		return drop(NIC_CNT_DROP_BAD_LEN);
	return PKT_GO;
}

/* A PROBE's or PROBE_REPLY's MAC (nic_auth.h) is the one key gives its fields. */
static __always_inline int probe_mac_ok(struct xdp_md *ctx, struct mrc_pkt *p,
					const struct mrc_probe_ext *pe, const __u64 *key)
{
	return pkt_icrc(ctx, p) == probe_mac(key, p->bth->opcode,
					     bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK,
					     bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK,
					     bpf_ntohll(pe->tx_ts), bpf_ntohs(pe->ev), pe->flags,
					     bpf_ntohl(pe->port_bitmap));
}

/* Turn a PROBE around into its PROBE_REPLY to qpn, with what it echoes
 * (read before: turn_around overwrites the PROBE) and icrc in the ICRC slot
 * (a MAC, or MRC_ICRC_UNUSED). The frame, or NULL. */
static __always_inline struct probe_frame *probe_reply_frame(struct xdp_md *ctx,
							     const struct answer_route *r,
							     __u32 qpn, __be32 apsn, __be64 tx_ts,
							     __be16 ev, __u8 flags, __u32 ports,
							     __be32 icrc)
{
	struct probe_frame *f = turn_around(ctx, r, sizeof(*f));

	if (!f)
		return NULL;
	f->bth.opcode = MRC_OP_PROBE_REPLY;
	f->bth.flags = 0;
	f->bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f->bth.qpn = bpf_htonl(qpn & MRC_BTH_QPN_MASK);
	f->bth.apsn = apsn;
	__builtin_memset(&f->probe, 0, sizeof(f->probe));
	f->probe.tx_ts = tx_ts;
	f->probe.ev = ev;
	f->probe.flags = flags;
	f->probe.port_bitmap = bpf_htonl(ports);
	f->icrc = icrc;
	return f;
}

/* ---- Endpoint probes (MRC_EP_QPN): a controller's, no QP ---------------- */

/*
 * The addresses of an endpoint probe or its reply: to a host of the lab
 * (*host, on *plane) from another host on the same plane. 1 if so. Without a
 * QP there is no peer to check against; the lab's address plan is the check.
 */
static __always_inline int ep_addrs(const struct mrc_pkt *p, __u32 *host, __u32 *plane)
{
	__u32 d = bpf_ntohl(p->ip->daddr) - NIC_HOST_NET;
	__u32 s = bpf_ntohl(p->ip->saddr) - NIC_HOST_NET;

	*plane = d >> 8;
	*host = (d & 0xff) - 1; /* .0 wraps to 0xffffffff: refused below */
	return *plane < NIC_MAX_PLANES && *host < NIC_MAX_HOSTS && (s >> 8) == *plane &&
	       (s & 0xff) - 1 < NIC_MAX_HOSTS && s != d;
}

/*
 * A peer's port status update (MRC_PROBE_F_PORT_STATUS): its port_bitmap is
 * recorded as that peer's port status in host's nic_peer_ports entry, with
 * when and on which port it came. Plain stores but the count: updates of one
 * peer come one batch at a time, and either of two racing ones is news.
 */
static __always_inline void take_port_status(const struct mrc_pkt *p,
					     const struct mrc_probe_ext *pe, __u32 host,
					     __u32 plane, __u64 now)
{
	__u32 peer = (bpf_ntohl(p->ip->saddr) & 0xff) - 1; /* checked by ep_addrs */
	struct nic_peer_ports *view = nic_peer_ports_lookup(&host);
	struct nic_peer_port *e;

	if (!view || peer >= NIC_MAX_HOSTS)
		return;
	e = &view->peers[peer];
	e->ports = bpf_ntohl(pe->port_bitmap);
	e->plane = plane;
	e->rx_ns = now;
	__sync_fetch_and_add(&e->updates, 1);
	count(NIC_CNT_PORT_STATUS_UPDATE, 1);
}

/*
 * A controller's EV probe or port status update (mrc_ctl_ep_batch_send_wait):
 * answered in place, out of the port it came in on (the reply tests nothing,
 * it must come back), with a PROBE_REPLY to MRC_EP_QPN echoing tx_ts, ev, the
 * probe number and MRC_PROBE_F_PORT_STATUS, the ECN the probe saw, this host's
 * port bitmap, and (MRC_PROBE_F_SVC) the time this answer took, ns, in the
 * ICRC slot: the prober takes it off the round trip (adj_svc_time). An update
 * is recorded first (take_port_status). No QP, no receive state.
 */
static __always_inline int rx_ep_probe(struct xdp_md *ctx, struct mrc_pkt *p,
				       struct mrc_probe_ext *pe)
{
	__u64 start = bpf_ktime_get_ns();
	__u32 host, plane, port_bitmap;
	__u8 flags = MRC_PROBE_F_SVC;
	struct answer_route route;
	struct probe_frame *f;
	__be32 apsn;
	__be64 tx_ts;
	__be16 ev;

	if (!ep_addrs(p, &host, &plane))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (pe->flags & MRC_PROBE_F_PORT_STATUS) {
		take_port_status(p, pe, host, plane, start);
		flags |= MRC_PROBE_F_PORT_STATUS;
	}
	apsn = p->bth->apsn & bpf_htonl(MRC_BTH_PSN_MASK); /* A = 0 */
	tx_ts = pe->tx_ts;
	ev = pe->ev;
	if ((p->ip->tos & MRC_ECN_MASK) == MRC_ECN_CE)
		flags |= MRC_ACK_F_ECN;
	port_bitmap = host_ports(host);
	route_in_place(&route, p);

	f = probe_reply_frame(ctx, &route, MRC_EP_QPN, apsn, tx_ts, ev, flags, port_bitmap,
			      MRC_ICRC_UNUSED);
	if (!f)
		return XDP_DROP;
	count(NIC_CNT_PROBE_REPLY, 1);
	if (!(flags & MRC_PROBE_F_PORT_STATUS))
		count(NIC_CNT_EP_PROBE, 1);
	f->icrc = bpf_htonl((__u32)(bpf_ktime_get_ns() - start));
	return XDP_TX;
}

/*
 * The PROBE_REPLY to one of this host's endpoint probes: recorded in slot
 * psn % NIC_EP_SLOTS of the host's nic_ep_probes entry, with its arrival
 * time, for the daemon that sent the probe (it matches psn and tx_ts, and
 * works out the RTT); consumed.
 */
static __always_inline int rx_ep_probe_reply(struct mrc_pkt *p, struct mrc_probe_ext *pe)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 host, plane, psn, svc = 0;
	struct nic_ep_probes *eps;
	struct nic_ep_probe *e;
	__be32 *icrc = (void *)(pe + 1);

	if (!ep_addrs(p, &host, &plane))
		return drop(NIC_CNT_DROP_SPOOFED);
	if ((void *)(icrc + 1) > p->end) /* probe_len_ok saw it: for the verifier */
		return drop(NIC_CNT_DROP_TRUNCATED);
	eps = nic_ep_probes_lookup(&host);
	if (!eps)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (pe->flags & MRC_PROBE_F_SVC)
		svc = bpf_ntohl(*icrc);
	psn = bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK;
	e = &eps->slots[psn & (NIC_EP_SLOTS - 1)];
	/* Plain stores: one daemon has one probe per slot outstanding. */
	e->tx_ts = bpf_ntohll(pe->tx_ts);
	e->psn = psn;
	e->svc_ns = svc;
	e->src_ip = p->ip->saddr;
	e->port_bitmap = bpf_ntohl(pe->port_bitmap);
	e->ev = bpf_ntohs(pe->ev);
	e->plane = plane;
	e->flags = pe->flags;
	e->rx_ns = now;
	count(NIC_CNT_PROBE_REPLY_CONSUMED, 1);
	count(NIC_CNT_EP_PROBE_REPLY, 1);
	return XDP_DROP;
}

/*
 * A PROBE, answered in place with a PROBE_REPLY echoing tx_ts, ev and the
 * probe number (BTH.psn), with the ECN the probe saw and our port bitmap,
 * unless it came in on a port this host has administratively DISABLED
 * (dropped: a disabled port answers no probe). Two kinds: the sender's probe of a data EV, for one of our receive QPs,
 * whose reply takes the QP's reverse EV set as its SACKs do (the probe tests
 * the forward path; the reply must come back); and (MRC_PROBE_F_REVERSE) the
 * receiver's probe of a reverse EV, for one of our send QPs, answered where
 * it came from. No receive or send state is touched: probes use no data PSN.
 */
static __always_inline int rx_probe(struct xdp_md *ctx, struct mrc_pkt *p)
{
	struct answer_route route;
	struct probe_frame *f;
	struct mrc_probe_ext *pe;
	const __u64 *key = NULL; /* the QP's MAC key, if it takes only MAC'd packets */
	__u32 port_bitmap, peer_qpn, qpn;
	__be32 apsn, icrc = MRC_ICRC_UNUSED;
	__be64 tx_ts;
	__be16 ev;
	__u8 flags = 0;
	int verdict = probe_len_ok(p);

	if (verdict != PKT_GO)
		return verdict;
	if (parse_probe_ext(&p->c, p->end, &pe))
		return drop(NIC_CNT_DROP_TRUNCATED);
	qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK;
	if (qpn == MRC_EP_QPN) /* a controller's EV probe or port status update: no QP */
		return rx_ep_probe(ctx, p, pe);
	/* What the reply echoes, before turn_around overwrites it. */
	apsn = p->bth->apsn & bpf_htonl(MRC_BTH_PSN_MASK); /* A = 0 */
	if (pe->flags & MRC_PROBE_F_REVERSE) {
		struct nic_sq *sq;

		verdict = tx_qp_check(p, qpn, &sq);
		if (verdict != PKT_GO)
			return verdict;
		if (sq->auth)
			key = sq->auth_key;
		port_bitmap = host_ports(sq->local_host);
		peer_qpn = sq->peer_qpn;
		flags = MRC_PROBE_F_REVERSE;
		route_in_place(&route, p);
	} else {
		struct nic_rq *rq;

		verdict = rx_qp_check(p, qpn, &rq);
		if (verdict != PKT_GO)
			return verdict;
		if (rq->auth)
			key = rq->auth_key;
		port_bitmap = host_ports(rq->local_host);
		peer_qpn = rq->peer_qpn;
		route_reverse(&route, p, qpn, bpf_ntohl(apsn), port_bitmap);
	}
	tx_ts = pe->tx_ts;
	ev = pe->ev;
	if (key && !probe_mac_ok(ctx, p, pe, key))
		return drop(NIC_CNT_DROP_AUTH);
	if ((p->ip->tos & MRC_ECN_MASK) == MRC_ECN_CE)
		flags |= MRC_ACK_F_ECN;
	if (key) /* the reply carries the connection's MAC as the probe did */
		icrc = bpf_htonl(probe_mac(key, MRC_OP_PROBE_REPLY, peer_qpn, bpf_ntohl(apsn),
					   bpf_ntohll(tx_ts), bpf_ntohs(ev), flags, port_bitmap));

	f = probe_reply_frame(ctx, &route, peer_qpn, apsn, tx_ts, ev, flags, port_bitmap, icrc);
	if (!f)
		return XDP_DROP;
	count(NIC_CNT_PROBE_REPLY, 1);
	return route_send(&route);
}

/*
 * The PROBE_REPLY to a probe of one of our reverse EVs (MRC_PROBE_F_REVERSE;
 * rx_probe_reply hands it here): recorded in nic_rev_probes for the
 * receiver's daemon, which decides the EV's state from it; consumed.
 */
static __always_inline int rx_rev_probe_reply(struct xdp_md *ctx, struct mrc_pkt *p,
					      struct mrc_probe_ext *pe)
{
	__u32 qpn = bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK, slot = qpn & (NIC_MAX_QPS - 1), i;
	__u16 ev = bpf_ntohs(pe->ev);
	struct nic_rev_ev_set *set;
	struct nic_rev_probes *pr;
	struct nic_rev_probe *e;
	struct nic_rq *rq;
	__u64 now, tx_ts;
	int verdict = rx_qp_check(p, qpn, &rq);

	if (verdict != PKT_GO)
		return verdict;
	if (rq->auth && !probe_mac_ok(ctx, p, pe, rq->auth_key))
		return drop(NIC_CNT_DROP_AUTH);
	set = nic_rev_evs_lookup(&slot);
	pr = nic_rev_probes_lookup(&slot);
	count(NIC_CNT_PROBE_REPLY_CONSUMED, 1);
	if (!set || !pr || set->qpn != (qpn | NIC_RQ_TAG_USED) || !ev) {
		count(NIC_CNT_UNKNOWN_EV, 1);
		return XDP_DROP;
	}
	for (i = 0; i < NIC_REV_EVS; i++)
		if (set->evs[i].ev == ev)
			break;
	if (i >= NIC_REV_EVS) {
		count(NIC_CNT_UNKNOWN_EV, 1); /* replaced since it was probed */
		return XDP_DROP;
	}
	now = bpf_ktime_get_ns();
	tx_ts = bpf_ntohll(pe->tx_ts);
	e = &pr->evs[i];
	/* Plain stores: the daemon probes one EV a few times a second, so two
	 * replies of one EV on two CPUs at once are rare and both say "alive". */
	e->ev = ev;
	e->last_ns = now;
	e->last_psn = bpf_ntohl(p->bth->apsn) & MRC_BTH_PSN_MASK;
	e->rtt_ns = now > tx_ts && now - tx_ts < 0xffffffffULL ? now - tx_ts : 0;
	__sync_fetch_and_add(&e->replies, 1);
	count(NIC_CNT_REV_PROBE_REPLY, 1);
	return XDP_DROP;
}

#endif /* MRC_NIC_ANSWERS_H */
