// SPDX-License-Identifier: Apache-2.0
/*
 * nic_xdp.c: the XDP program on every host port of a lab, compiled once per
 * lab (mrc_nic/nic, bcc) and attached to every port with one fd; everything
 * per QP, region or host is in the lab-wide maps (nic_maps.h). The entry:
 * a kick runs the send engine; a packet is parsed and dispatched by opcode
 * to its role:
 *   WRITE, WRITE_IMM  rx_data         nic_rx.h       place, then SACK/NACK (XDP_TX)
 *   ACK (SACK/NACK)   rx_ack          nic_ack.h      free window, EV feedback, losses
 *   PROBE             rx_probe        nic_answers.h  PROBE_REPLY in place (XDP_TX)
 *   PROBE_REPLY       rx_probe_reply  nic_ack.h      RTT, EV back to GOOD
 * (a PROBE or PROBE_REPLY to MRC_EP_QPN, a controller's EV probe, goes to
 * rx_ep_probe / rx_ep_probe_reply in nic_answers.h: no QP)
 * and an ACK of an engine QP then runs the engine (nic_engine.h), which turns
 * its frame into the next data packet. How it all works: docs/nic-program.md.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>

#include "mrc_wire.h"
#include "nic_maps.h"

/* ---- Map access --------------------------------------------------------- */

/* bcc turns map.lookup() into a helper call only in the main file; the role
 * headers reach the maps through these (inlined: no cost). */
static __always_inline struct nic_rq *nic_rx_qps_lookup(__u32 *k)
{
	return nic_rx_qps.lookup(k);
}
static __always_inline __u32 *nic_rx_slots_lookup(__u32 *k)
{
	return nic_rx_slots.lookup(k);
}
/* Element *k of a region's memory (its map in nic_mems), or NULL. Looked up
 * per element: a map pointer kept across the copy loops costs stack the
 * program does not have. */
static __always_inline struct nic_mr_elem *nic_mem_lookup(__u32 *region, __u32 *k)
{
	void *mem = nic_mems.lookup(region);

	return mem ? bpf_map_lookup_elem(mem, k) : NULL;
}
static __always_inline struct nic_region *nic_regions_lookup(__u32 *k)
{
	return nic_regions.lookup(k);
}
static __always_inline struct nic_rx_lock *nic_rx_locks_lookup(__u32 *k)
{
	return nic_rx_locks.lookup(k);
}
static __always_inline __u32 *nic_port_up_lookup(__u32 *k)
{
	return nic_port_up.lookup(k);
}
static __always_inline __u64 *nic_counters_lookup(__u32 *k)
{
	return nic_counters.lookup(k);
}
static __always_inline struct nic_timeline_bin *nic_rx_timeline_lookup(__u32 *k)
{
	return nic_rx_timeline.lookup(k);
}
static __always_inline struct nic_cqe_batch *nic_cqe_scratch_lookup(__u32 *k)
{
	return nic_cqe_scratch.lookup(k);
}
static __always_inline struct nic_sq *nic_tx_qps_lookup(__u32 *k)
{
	return nic_tx_qps.lookup(k);
}
static __always_inline struct nic_ev *nic_evs_lookup(struct nic_ev_key *k)
{
	return nic_evs.lookup(k);
}
static __always_inline struct nic_tx_ring *nic_tx_ring_lookup(__u32 *k)
{
	return nic_tx_ring.lookup(k);
}
static __always_inline struct nic_ack_scratch *nic_ack_scratch_lookup(__u32 *k)
{
	return nic_ack_scratch.lookup(k);
}
static __always_inline int nic_events_output(void *rec, __u32 size)
{
	return nic_events.ringbuf_output(rec, size, 0);
}
/* The ring buffer of CQ index *k (an inner map of nic_cq_rings), or NULL. */
static __always_inline void *nic_cq_rings_lookup(__u32 *k)
{
	return nic_cq_rings.lookup(k);
}
static __always_inline __u64 *nic_cq_lost_lookup(__u32 *k)
{
	return nic_cq_lost.lookup(k);
}
/* A send ring's queue: the one entry of its own map (nic_wqs). */
static __always_inline struct nic_wq *nic_wq_lookup(__u32 *k)
{
	void *queue = nic_wqs.lookup(k);
	__u32 zero = 0;

	return queue ? bpf_map_lookup_elem(queue, &zero) : NULL;
}
static __always_inline struct nic_port *nic_ports_lookup(__u32 *k)
{
	return nic_ports.lookup(k);
}
static __always_inline int nic_tx_ports_redirect(__u32 k, __u64 flags)
{
	return nic_tx_ports.redirect_map(k, flags);
}
static __always_inline struct nic_copy_buf *nic_copy_scratch_lookup(__u32 *k)
{
	return nic_copy_scratch.lookup(k);
}
static __always_inline struct nic_tx_scratch *nic_tx_scratch_lookup(__u32 *k)
{
	return nic_tx_scratch.lookup(k);
}
static __always_inline struct nic_timeout_scratch *nic_timeout_scratch_lookup(__u32 *k)
{
	return nic_timeout_scratch.lookup(k);
}
static __always_inline struct nic_rev_ev_set *nic_rev_evs_lookup(__u32 *k)
{
	return nic_rev_evs.lookup(k);
}
static __always_inline struct nic_rev_probes *nic_rev_probes_lookup(__u32 *k)
{
	return nic_rev_probes.lookup(k);
}
static __always_inline struct nic_ep_probes *nic_ep_probes_lookup(__u32 *k)
{
	return nic_ep_probes.lookup(k);
}
static __always_inline struct nic_host_ctl *nic_host_ctl_lookup(__u32 *k)
{
	return nic_host_ctl.lookup(k);
}
static __always_inline struct nic_peer_ports *nic_peer_ports_lookup(__u32 *k)
{
	return nic_peer_ports.lookup(k);
}
/* Broadcast this frame to the devmap at nic_fanout[*k] (each of its devices
 * gets a copy): XDP_REDIRECT, or -1 when there is no such devmap. */
static __always_inline int nic_fanout_broadcast(__u32 *k)
{
	void *m = nic_fanout.lookup(k);

	if (!m)
		return -1;
	return bpf_redirect_map(m, 0, BPF_F_BROADCAST);
}

/* ---- The roles ---------------------------------------------------------- */

#include "nic_common.h"
#include "nic_events.h"
#include "nic_answers.h"
#include "nic_rx.h"
#include "nic_ack.h"
#include "nic_engine.h"
#include "nic_ctl_kicks.h"

/* ---- Entry point --------------------------------------------------------- */

/* Every received packet: parse, dispatch on the opcode (see the top). */
static __always_inline int nic_rx(struct xdp_md *ctx, struct engine_req *req)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct mrc_pkt p = {.c = {.pos = data}, .end = data_end};
	__u32 ip_len, hlen, udp_len;
	__u8 opcode;

	/* Framing: anything that is not MRC over IPv4 goes to the stack. A
	 * packet cut before its UDP header cannot be told to be MRC. */
	if (parse_ethhdr(&p.c, data_end, &p.eth) || p.eth->h_proto != bpf_htons(ETH_P_IP))
		return pass(NIC_CNT_PASS_NOT_MRC);
	if (parse_iphdr(&p.c, data_end, &p.ip) || p.ip->version != 4 ||
	    p.ip->protocol != IPPROTO_UDP)
		return pass(NIC_CNT_PASS_NOT_MRC);
	if (p.ip->frag_off & bpf_htons(0x3fff)) /* MF or an offset: not reassembled here */
		return pass(NIC_CNT_PASS_NOT_MRC);
	if (parse_udphdr(&p.c, data_end, &p.udp) || p.udp->dest != bpf_htons(MRC_UDP_PORT))
		return pass(NIC_CNT_PASS_NOT_MRC);

	/* MRC from here: lengths must agree. Bytes after the IPv4 packet
	 * (Ethernet padding) are ignored. */
	hlen = p.ip->ihl * 4;
	ip_len = bpf_ntohs(p.ip->tot_len);
	udp_len = bpf_ntohs(p.udp->len);
	if ((void *)p.ip + ip_len > data_end)
		return drop(NIC_CNT_DROP_TRUNCATED);
	if (ip_len < hlen + sizeof(struct udphdr) || udp_len != ip_len - hlen)
		return drop(NIC_CNT_DROP_BAD_LEN);
	if (p.udp->source == bpf_htons(MRC_EV_INVALID)) /* every MRC sender puts an EV there */
		return drop(NIC_CNT_DROP_BAD_PORT);
	p.udp_payload = udp_len - sizeof(struct udphdr);
	p.bth_off = ETH_HLEN + hlen + sizeof(struct udphdr);
	if (p.udp_payload < sizeof(struct mrc_bth))
		return drop(NIC_CNT_DROP_SHORT);
	if (parse_bth(&p.c, data_end, &p.bth))
		return drop(NIC_CNT_DROP_TRUNCATED);

	/* A DISABLED port is out of service, as a down one: it takes no MRC
	 * packet and answers none (its peers learn it from the port bitmaps). */
	if (arrived_on_disabled_port(&p))
		return drop(NIC_CNT_DROP_PORT_DISABLED);
	opcode = p.bth->opcode;
	switch (opcode) {
	case MRC_OP_WRITE:
	case MRC_OP_WRITE_IMM:
		return rx_data(ctx, &p);
	case MRC_OP_ACK:
		return rx_ack(ctx, &p, req);
	case MRC_OP_PROBE:
		return rx_probe(ctx, &p);
	case MRC_OP_PROBE_REPLY:
		return rx_probe_reply(ctx, &p);
	}
	/* MRC's ranges: RC (transport bits 000) and manufacturer-specific. */
	if (opcode < 0x20 || opcode >= MRC_OP_VENDOR_FIRST)
		return drop(NIC_CNT_DROP_BAD_OPCODE);
	return pass(NIC_CNT_PASS_OTHER_OPCODE);
}

/*
 * The program. A kick (struct nic_kick) runs the send engine
 * directly; a received packet goes through nic_rx, whose ACK path may ask
 * for the engine too. The engine is inlined in this one place.
 */
int nic_xdp(struct xdp_md *ctx)
{
	struct engine_req req = {};
	__u32 arg = 0;
	__u64 age_ns = 0;
	int verdict, kick = kick_of(ctx, &req, &arg, &age_ns);

	if (kick < 0)
		return drop(NIC_CNT_DROP_NOT_KICK);
	if (kick == 1 + NIC_KICK_TIMEOUT)
		return engine_timeout(&req, arg & ~NIC_TIMEOUT_F_REORDER, age_ns,
				      !!(arg & NIC_TIMEOUT_F_REORDER));
	if (kick == 1 + NIC_KICK_EV_REPLACE)
		return engine_ev_replace(&req, arg, age_ns);
	if (kick == 1 + NIC_KICK_FAIL)
		return engine_fail(&req, arg);
	if (kick == 1 + NIC_KICK_CWND)
		engine_cwnd(&req, arg, age_ns);
	if (kick)
		verdict = ENGINE_RUN;
	else
		verdict = nic_rx(ctx, &req);
	if (verdict != ENGINE_RUN)
		return verdict;
	return engine_run(ctx, &req);
}

/*
 * The applications' doorbell program (docs/api.md, "Isolation"): what a
 * session gets to run the engine with BPF_PROG_RUN. Its frames' metadata
 * becomes a send kick whatever it said (the daemon's kicks, TIMEOUT, FAIL,
 * CWND and EV_REPLACE, are nic_xdp's own), then nic_xdp runs on the frame
 * (a tail call); a frame without a kick's metadata is dropped, never parsed
 * as a packet from the wire.
 */
int nic_doorbell(struct xdp_md *ctx)
{
	struct nic_kick *k = (void *)(long)ctx->data_meta;

	if (ctx->ingress_ifindex != LOOPBACK_IFINDEX || (void *)(k + 1) > (void *)(long)ctx->data)
		return drop(NIC_CNT_DROP_NOT_KICK);
	k->op = NIC_KICK_SEND;
	k->arg = 0;
	k->age_ns = 0;
	nic_doorbell_jump.call(ctx, 0);
	return drop(NIC_CNT_DROP_NOT_KICK); /* no nic_xdp in nic_doorbell_jump: the lab is going */
}
