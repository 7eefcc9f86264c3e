/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_answers.h: the receiver's answers, built in place in the frame that
 * asked and sent back out of the same port (XDP_TX): a SACK or NACK for a
 * data packet (answer), a PROBE_REPLY for a PROBE (rx_probe).
 */
#ifndef MRC_NIC_ANSWERS_H
#define MRC_NIC_ANSWERS_H

#include "mrc_csum.h"
#include "nic_common.h"

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

/*
 * Turn a received frame around, in place, into an answer of `size` bytes
 * (Ethernet, IPv4 with IHL 5, UDP, then whatever the caller writes after
 * them): the MACs and the addresses swapped, the EV kept as UDP source port
 * (docs/wire-format.md 3), the control class in DSCP. Returns the frame, or
 * NULL when it cannot be resized (counted). The addresses and the EV are
 * read into registers first: resizing invalidates packet pointers, and the
 * new headers overwrite the old ones (IPv4 options of the received packet
 * are not kept). In place, not built on the stack and stored: cheaper
 * (docs/nic-program.md, "Answers").
 */
static __always_inline void *turn_around(struct xdp_md *ctx, struct mrc_pkt *p, __u32 size)
{
	__u8 to_mac[ETH_ALEN], from_mac[ETH_ALEN];
	__be32 to_ip = p->ip->saddr, from_ip = p->ip->daddr;
	__be16 ev = p->udp->source;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	void *end;
	int delta;

	__builtin_memcpy(to_mac, p->eth->h_source, ETH_ALEN);
	__builtin_memcpy(from_mac, p->eth->h_dest, ETH_ALEN);
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

	__builtin_memcpy(eth->h_dest, to_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, from_mac, ETH_ALEN);
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
	ip->saddr = from_ip;
	ip->daddr = to_ip;
	ip->check = ipv4_csum(ip);
	udp->source = ev;
	udp->dest = bpf_htons(MRC_UDP_PORT);
	udp->len = bpf_htons(size - ETH_HLEN - sizeof(*ip));
	udp->check = 0;
	return eth;
}

/* Turn the data packet into its answer (a SACK or a NACK) and send it back. */
static __always_inline int answer(struct xdp_md *ctx, struct mrc_pkt *p,
				  struct mrc_data_ext *dext, __u32 psn,
				  const struct ack_info *ai)
{
	__be64 echo_ts = dext->tx_ts; /* copied as is (big endian) */
	__be16 ev = p->udp->source;
	struct ack_frame *f = turn_around(ctx, p, sizeof(*f));

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
	return XDP_TX;
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

/*
 * A PROBE for one of our receive QPs, from its peer: answer it in place,
 * exactly as the SACK answers data (addresses swapped, the EV kept as source
 * port, control class), echoing tx_ts, ev and the probe number (BTH.psn), with
 * the ECN the probe saw and our port bitmap. The receive state is not
 * touched: probes use no data PSN.
 */
static __always_inline int rx_probe(struct xdp_md *ctx, struct mrc_pkt *p)
{
	struct probe_frame *f;
	struct mrc_probe_ext *pe;
	struct nic_rq *rq;
	__u32 port_bitmap;
	__be32 apsn;
	__be64 tx_ts;
	__be16 ev;
	__u8 flags = 0;
	int verdict = probe_len_ok(p);

	if (verdict != PKT_GO)
		return verdict;
	if (parse_probe_ext(&p->c, p->end, &pe))
		return drop(NIC_CNT_DROP_TRUNCATED);
	verdict = rx_qp_check(p, bpf_ntohl(p->bth->qpn) & MRC_BTH_QPN_MASK, &rq);
	if (verdict != PKT_GO)
		return verdict;
	port_bitmap = host_ports(rq->local_host);
	/* What the reply echoes, before turn_around overwrites it. */
	apsn = p->bth->apsn & bpf_htonl(MRC_BTH_PSN_MASK); /* A = 0 */
	tx_ts = pe->tx_ts;
	ev = pe->ev;
	if ((p->ip->tos & MRC_ECN_MASK) == MRC_ECN_CE)
		flags = MRC_ACK_F_ECN;

	f = turn_around(ctx, p, sizeof(*f));
	if (!f)
		return XDP_DROP;
	f->bth.opcode = MRC_OP_PROBE_REPLY;
	f->bth.flags = 0;
	f->bth.pkey = bpf_htons(MRC_PKEY_DEFAULT);
	f->bth.qpn = bpf_htonl(rq->peer_qpn & MRC_BTH_QPN_MASK);
	f->bth.apsn = apsn;
	__builtin_memset(&f->probe, 0, sizeof(f->probe));
	f->probe.tx_ts = tx_ts;
	f->probe.ev = ev;
	f->probe.flags = flags;
	f->probe.port_bitmap = bpf_htonl(port_bitmap);
	f->icrc = MRC_ICRC_UNUSED;
	count(NIC_CNT_PROBE_REPLY, 1);
	return XDP_TX;
}

#endif /* MRC_NIC_ANSWERS_H */
