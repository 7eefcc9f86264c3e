/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_common.h: what every role of the NIC program uses: the outcome
 * counters, the parsed packet, the PSN rings' bit macros, the address check,
 * the receive-QP lookup, and what asks the send engine to run.
 */
#ifndef MRC_NIC_COMMON_H
#define MRC_NIC_COMMON_H

#include "mrc_parse.h"
#include "nic_auth.h"
#include "nic_maps.h"

/* ---- Counters (enum nic_counter) ---------------------------------------- */

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *c = nic_counters_lookup(&idx);

	if (c)
		*c += n;
}

static __always_inline int pass(__u32 reason)
{
	count(reason, 1);
	return XDP_PASS;
}

static __always_inline int drop(__u32 reason)
{
	count(reason, 1);
	return XDP_DROP;
}

/* A packet step's "go on": any other value it returns is the packet's verdict. */
#define PKT_GO (-1)

/* An MRC packet after the framing checks: headers up to and including BTH. */
struct mrc_pkt {
	struct hdr_cursor c; /* just after the BTH */
	void *end;           /* ctx->data_end */
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	struct mrc_bth *bth;
	__u32 udp_payload; /* UDP length - 8: BTH and everything after it, ICRC included */
	__u32 bth_off;     /* frame offset of the BTH */
};

/* ---- Receive QPs and addresses ------------------------------------------- */

/* Whether QP qpn owns its receive slot (nic_rx_slots). */
static __always_inline int rx_qp_owns_slot(__u32 qpn)
{
	__u32 slot = qpn & (NIC_MAX_QPS - 1);
	__u32 *owner = nic_rx_slots_lookup(&slot);

	return owner && *owner == (qpn | NIC_RQ_TAG_USED);
}

/* The receive state of QP qpn, or NULL if its slot is free or another QP's. */
static __always_inline struct nic_rq *rx_qp(__u32 qpn)
{
	__u32 slot = qpn & (NIC_MAX_QPS - 1);

	if (!rx_qp_owns_slot(qpn))
		return NULL;
	return nic_rx_qps_lookup(&slot);
}

/* The IPv4 addresses must be the QP's peer (source) and local host
 * (destination) on one plane: host h on plane p is NIC_HOST_NET + p.(h+1).
 * The plane is the destination's third octet; the source must match it. */
static __always_inline int addrs_match(__u32 local_host, __u32 peer_host, __be32 saddr,
				       __be32 daddr)
{
	__u32 d = bpf_ntohl(daddr) - NIC_HOST_NET;
	__u32 s = bpf_ntohl(saddr) - NIC_HOST_NET;
	__u32 plane = d >> 8;

	if (plane >= NIC_MAX_PLANES)
		return 0;
	if ((d & 0xff) != local_host + 1)
		return 0;
	return s == ((plane << 8) | (peer_host + 1));
}

/* The receive QP a data packet or PROBE addresses, into *rq, if it takes
 * it: known, from its peer to its host, in RTR or RTS. PKT_GO or a drop. */
static __always_inline int rx_qp_check(const struct mrc_pkt *p, __u32 qpn, struct nic_rq **rq)
{
	struct nic_rq *q = rx_qp(qpn);

	if (!q)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (!addrs_match(q->local_host, q->peer_host, p->ip->saddr, p->ip->daddr))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (q->state != NIC_QPS_RTR && q->state != NIC_QPS_RTS)
		return drop(NIC_CNT_DROP_QP_STATE);
	*rq = q;
	return PKT_GO;
}

/* The send QP an ACK or PROBE_REPLY addresses, into *sq, if it takes it:
 * known, from its peer to its host, in RTS or SQD. PKT_GO or a drop. */
static __always_inline int tx_qp_check(const struct mrc_pkt *p, __u32 qpn, struct nic_sq **sq)
{
	struct nic_sq *q = nic_tx_qps_lookup(&qpn);

	if (!q)
		return drop(NIC_CNT_DROP_UNKNOWN_QP);
	if (!addrs_match(q->local_host, q->peer_host, p->ip->saddr, p->ip->daddr))
		return drop(NIC_CNT_DROP_SPOOFED);
	if (q->state != NIC_QPS_RTS && q->state != NIC_QPS_SQD)
		return drop(NIC_CNT_DROP_QP_STATE);
	*sq = q;
	return PKT_GO;
}

/* The packet's ICRC slot, where a MAC'd packet carries its MAC (host order). */
static __always_inline __u32 pkt_icrc(struct xdp_md *ctx, const struct mrc_pkt *p)
{
	__be32 v = 0;

	bpf_xdp_load_bytes(ctx, p->bth_off + p->udp_payload - MRC_ICRC_LEN, &v, sizeof(v));
	return bpf_ntohl(v);
}

/* Host host's port bitmap (nic_port_up): bit p, plane p is up. */
static __always_inline __u32 host_ports(__u32 host)
{
	__u32 *ports = nic_port_up_lookup(&host);

	return ports ? *ports : 0;
}

/* The peer's ports a send QP may send to: what the peer's latest port status
 * update said (nic_peer_ports, mrc_ctl PORT_STATUS_UPDATE) when it came after
 * the ACK that last set sq->peer_ports, else that ACK's bitmap. Racy reads
 * are fine: either answer is a recent report of the peer's own. */
static __always_inline __u32 sq_peer_ports(const struct nic_sq *sq, __u32 host)
{
	struct nic_peer_ports *view = nic_peer_ports_lookup(&host);
	__u32 peer = sq->peer_host;
	struct nic_peer_port *e;

	if (!view || peer >= NIC_MAX_HOSTS)
		return sq->peer_ports;
	e = &view->peers[peer];
	return e->rx_ns > sq->peer_ports_ns ? e->ports : sq->peer_ports;
}

/* Did the packet come in on a port its host has administratively DISABLED
 * (nic_host_ctl.ports_disabled)? Its port is its destination's plane. */
static __always_inline int arrived_on_disabled_port(const struct mrc_pkt *p)
{
	__u32 d = bpf_ntohl(p->ip->daddr) - NIC_HOST_NET;
	__u32 host = (d & 0xff) - 1, plane = d >> 8;
	struct nic_host_ctl *hc;

	if (host >= NIC_MAX_HOSTS || plane >= NIC_MAX_PLANES)
		return 0; /* not a host address of the lab: the role's checks drop it */
	hc = nic_host_ctl_lookup(&host);
	return hc && (hc->ports_disabled >> plane) & 1;
}

/* ---- The PSN rings: bit p % NIC_BITMAP_BITS is PSN p's ------------------ */

/* Set bits of v: clang expands this without branches or lookup tables
 * (BPF has no popcount instruction). */
static __always_inline __u32 popcount64(__u64 v)
{
	return __builtin_popcountll(v);
}

#define RING_POS(psn) ((psn) & (NIC_BITMAP_BITS - 1))
#define RING_WORD(psn) (RING_POS(psn) >> 6)
#define RING_BIT(psn) (RING_POS(psn) & 63)

#define BM_TEST(bm, psn) (((bm)[RING_WORD(psn)] >> RING_BIT(psn)) & 1)
#define BM_SET(bm, psn) ((bm)[RING_WORD(psn)] |= 1ULL << RING_BIT(psn))
#define BM_CLEAR(bm, psn) ((bm)[RING_WORD(psn)] &= ~(1ULL << RING_BIT(psn)))

/* ---- Payload copies (receiver and engine) -------------------------------- */

/* The bytes of a payload of `total` bytes that belong to the region element
 * starting at payload byte `at` (at < total), at most NIC_MR_ELEM_SIZE. The
 * barriers keep the bounds where the verifier can follow them: the caller
 * checks >= 1, and the copy's length is then 1 .. NIC_MR_ELEM_SIZE. */
static __always_inline __u64 elem_bytes(__u32 total, __u32 at)
{
	__u64 n = total - at;

	asm volatile("" : "+r"(n));
	if (n > NIC_MR_ELEM_SIZE)
		n = NIC_MR_ELEM_SIZE;
	asm volatile("" : "+r"(n));
	return n;
}

/* A whole payload's length as the verifier must see it for a copy into the
 * copy buffer: at most NIC_SEG_SIZE (the caller checks >= 1). */
static __always_inline __u64 payload_bytes(__u32 total)
{
	__u64 n = total;

	asm volatile("" : "+r"(n));
	if (n > NIC_SEG_SIZE)
		n = NIC_SEG_SIZE;
	asm volatile("" : "+r"(n));
	return n;
}

/* Piece k of a payload of `total` bytes that starts `in_off` (1 ..
 * NIC_MR_ELEM_SIZE - 1) bytes into its first element: its bytes in element
 * k start at *in, at payload byte *at; returns its length, 0 when there is
 * none. The payload's copy buffer (struct nic_copy_buf) holds *at + length:
 * the barriers keep *at below NIC_SEG_ELEMS_MAX elements and the length at
 * most one element where the verifier sees them. */
static __always_inline __u64 copy_piece(__u32 total, __u32 in_off, __u32 k, __u32 *in, __u32 *at)
{
	__u32 start = k ? k * NIC_MR_ELEM_SIZE - in_off : 0, dst = k ? 0 : in_off;
	__u64 n;

	if (start >= total || start >= NIC_SEG_ELEMS_MAX * NIC_MR_ELEM_SIZE)
		return 0;
	n = total - start;
	if (n > NIC_MR_ELEM_SIZE - dst)
		n = NIC_MR_ELEM_SIZE - dst;
	asm volatile("" : "+r"(n));
	if (n > NIC_MR_ELEM_SIZE)
		n = NIC_MR_ELEM_SIZE;
	asm volatile("" : "+r"(start));
	if (start >= NIC_SEG_ELEMS_MAX * NIC_MR_ELEM_SIZE)
		return 0;
	*in = dst & (NIC_MR_ELEM_SIZE - 1);
	*at = start;
	return n;
}

/* copy_piece's *at where a copy uses it: checked in the register the copy
 * reads (the check inside copy_piece may be on a copy of it the compiler
 * made, lost to the verifier once the element lookup's calls spill). */
static __always_inline __u64 piece_at(__u32 at)
{
	__u64 a = at;

	asm volatile("" : "+r"(a));
	return a < NIC_SEG_ELEMS_MAX * NIC_MR_ELEM_SIZE ? a : NIC_SEG_ELEMS_MAX * NIC_MR_ELEM_SIZE;
}

/* ---- The send engine's trigger ------------------------------------------ */

/* What runs the send engine: a kick, or an ACK of an engine QP (nic_xdp). */
struct engine_req {
	__u32 qpn;   /* the send QP */
	__u32 plane; /* an ACK: the plane of the port it came in on; a kick: NIC_MAX_PLANES */
	__u32 kick;  /* 1: a kick (BPF_PROG_RUN), 0: an ACK */
};

/* nic_rx's verdict when the send engine must run for req (not an XDP action). */
#define ENGINE_RUN 0x100

#endif /* MRC_NIC_COMMON_H */
