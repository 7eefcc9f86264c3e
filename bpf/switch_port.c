// SPDX-License-Identifier: Apache-2.0
/*
 * switch_port.c: tc (cls_bpf, direct-action) program run on every switch
 * port, at clsact ingress and egress. Compiled once per lab (bcc) and
 * attached everywhere with one program fd; per-port behaviour comes from the
 * maps below, indexed by the port key the filter's classid carries.
 *
 * Stages, in order (each a small function returning a verdict):
 *   1. count the packet as seen on its key;
 *   2. fault: BLACKHOLE / LOSS configured by user space, with an expiry;
 *      then a fault on one EV of one QP, on keys that have one;
 *   3. virtual output queue (keys whose struct sp_queue is enabled: switch
 *      egress ports): ECN marking, trimming, buffer drops (switch_port.h);
 *   4. count the verdict (passed, or dropped with its reason);
 *   5. on ingress keys, when the lab forwards in BPF (SP_CFG_FWD_BPF): an MRC
 *      packet that passed is forwarded here, bpf_fib_lookup then
 *      bpf_redirect to its egress port (switch_port.h, "Forwarding").
 *
 * The program reads packets directly but writes them only through helpers
 * (bpf_skb_store_bytes, bpf_l3_csum_replace): a program that writes packet
 * data directly gets a prologue that unclones every skb it sees, and most
 * packets here are never written.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/pkt_cls.h>
#include <uapi/linux/udp.h>

#include "mrc_csum.h"
#include "mrc_parse.h"
#include "mrc_wire.h"
#include "switch_port.h"

/* Per-key fault configuration; see struct sp_fault. Pinned as port_faults. */
BPF_ARRAY(port_faults, struct sp_fault, MAX_PORT_KEYS);
/* Per-key, per-CPU traffic counters; see struct sp_counters. Pinned as port_counters. */
BPF_PERCPU_ARRAY(port_counters, struct sp_counters, MAX_PORT_KEYS);
/* Per-key virtual output queue; see struct sp_queue. Pinned as port_queues. */
BPF_ARRAY(port_queues, struct sp_queue, MAX_PORT_KEYS);
/* Faults on one EV of one QP at one port key; see struct sp_ev_fault. Written
 * by user space (mrc-nic fail qp QPN ev EV), counted by the program. */
BPF_HASH(ev_faults, struct sp_ev_key, struct sp_ev_fault, SP_EV_FAULTS_MAX);
/* Per-key number of entries of ev_faults: 0 (most ports) skips the parse. */
BPF_ARRAY(port_ev_faults, __u32, MAX_PORT_KEYS);
/* Lab-wide settings (struct sp_config): who forwards. Written by user space
 * (mrc-nic up). Pinned as switch_config. */
BPF_ARRAY(switch_config, struct sp_config, 1);
/* Per-ingress-key, per-CPU counters of the forwarding stage (struct
 * sp_fwd_counters). Pinned as port_fwd. */
BPF_PERCPU_ARRAY(port_fwd, struct sp_fwd_counters, MAX_PORT_KEYS);

/* What the stages decide; the last stage turns it into a counter and a tc action. */
enum sp_verdict {
	SP_PASS = 0,
	SP_DROP_BLACKHOLE,
	SP_DROP_LOSS,
	SP_DROP_BUFFER,
};

/* Frame offsets of what the queue stage writes (IPv4 without options: the
 * only packets it trims). */
#define SP_IP_OFF ETH_HLEN
#define SP_IP_CSUM_OFF (SP_IP_OFF + offsetof(struct iphdr, check))
#define SP_UDP_OFF (SP_IP_OFF + sizeof(struct iphdr))
#define SP_UDP_LEN_OFF (SP_UDP_OFF + offsetof(struct udphdr, len))
/* A trimmed frame: Ethernet, IPv4, UDP and MRC_TRIM_LEN bytes of UDP payload. */
#define SP_TRIM_UDP_LEN (sizeof(struct udphdr) + MRC_TRIM_LEN)
#define SP_TRIM_IP_LEN (sizeof(struct iphdr) + SP_TRIM_UDP_LEN)
#define SP_TRIM_FRAME_LEN (ETH_HLEN + SP_TRIM_IP_LEN)
_Static_assert(SP_TRIM_UDP_LEN % 4 == 0, "bpf_csum_diff sums whole 32-bit words");

/* splitmix64's finalizer: a bijection on 64 bits with full avalanche. */
static __always_inline __u64 mix64(__u64 z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * Drop decision for the n-th packet through a LOSS fault: a pure function of
 * (seed, n, threshold). The seed is mixed first so that nearby seeds (1, 2,
 * ...) give unrelated patterns rather than shifted copies of one another.
 * The tests check the properties (rate, replay with the same seed, other
 * seeds differ) through BPF_PROG_TEST_RUN, not against a Python copy.
 *
 * Reproducible for a given packet order: n is the order in which packets
 * reach this fault's sequence counter. Packets of one key processed on
 * several CPUs at once still get distinct n, but which packet gets which n
 * then depends on scheduling.
 */
static __always_inline __u64 draw32(__u64 seed, __u64 n)
{
	return mix64(mix64(seed) + n * 0x9e3779b97f4a7c15ULL) >> 32;
}

static __always_inline int loss_drops(__u64 seed, __u64 n, __u64 threshold)
{
	return draw32(seed, n) < threshold;
}

/* Stage: injected faults. An expired fault (until_ns reached) is not applied,
 * so a timed fault ends on time even if user space is late to clear it. */
static __always_inline enum sp_verdict fault_stage(__u32 key)
{
	struct sp_fault *fault = port_faults.lookup(&key);

	if (!fault || fault->mode == SP_FAULT_NONE)
		return SP_PASS;
	if (fault->until_ns && bpf_ktime_get_ns() >= fault->until_ns)
		return SP_PASS;

	switch (fault->mode) {
	case SP_FAULT_BLACKHOLE:
		return SP_DROP_BLACKHOLE;
	case SP_FAULT_LOSS: {
		/* Shared by all CPUs: each packet takes a distinct n. */
		__u64 n = __sync_fetch_and_add(&fault->seq, 1);

		return loss_drops(fault->seed, n, fault->loss_threshold) ? SP_DROP_LOSS : SP_PASS;
	}
	default:
		return SP_PASS; /* unknown mode: fail open */
	}
}

/* Stage: a fault on one EV of one QP (struct sp_ev_fault). Only on keys that
 * have one; parses Ethernet, IPv4, UDP and the BTH, pulling them into the
 * linear area when they are not there. */
static __always_inline enum sp_verdict ev_fault_stage(struct __sk_buff *skb, __u32 key)
{
	__u32 *count = port_ev_faults.lookup(&key);
	struct sp_ev_key k = {};
	struct sp_ev_fault *f;
	struct hdr_cursor cur;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	struct mrc_bth *bth;
	void *data, *data_end;
	__u32 want = ETH_HLEN + sizeof(struct iphdr) + sizeof(struct udphdr) + sizeof(struct mrc_bth);

	if (!count || !*count)
		return SP_PASS;
	if (skb->len < want)
		return SP_PASS;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (data + want > data_end) {
		if (bpf_skb_pull_data(skb, want))
			return SP_PASS;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	cur.pos = data;
	if (parse_ethhdr(&cur, data_end, &eth) || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    parse_iphdr(&cur, data_end, &ip) || ip->protocol != IPPROTO_UDP ||
	    parse_udphdr(&cur, data_end, &udp) || udp->dest != bpf_htons(MRC_UDP_PORT) ||
	    parse_bth(&cur, data_end, &bth))
		return SP_PASS;
	k.port_key = key;
	k.dqpn = bpf_ntohl(bth->qpn) & MRC_BTH_QPN_MASK;
	k.ev = bpf_ntohs(udp->source);
	f = ev_faults.lookup(&k);
	if (!f)
		return SP_PASS;
	if (f->until_ns && bpf_ktime_get_ns() >= f->until_ns)
		return SP_PASS;
	__sync_fetch_and_add(&f->pkts, 1);
	if (f->mode == SP_FAULT_BLACKHOLE) {
		__sync_fetch_and_add(&f->dropped, 1);
		return SP_DROP_BLACKHOLE;
	}
	if (f->mode == SP_FAULT_LOSS &&
	    loss_drops(f->seed, __sync_fetch_and_add(&f->seq, 1), f->loss_threshold)) {
		__sync_fetch_and_add(&f->dropped, 1);
		return SP_DROP_LOSS;
	}
	return SP_PASS;
}

/* ---- Stage: virtual output queue ----------------------------------------- */

/* What the queue does to a packet above kmin or that does not fit. */
struct sp_change {
	union {
		__u32 word;  /* the first 4 bytes of the IPv4 header, as rewritten: */
		__u8 b[4];   /* version/IHL, TOS, total length (network order) */
	} ip0;
	__u32 old;           /* the same 4 bytes as they arrived */
	int trim;            /* cut to SP_TRIM_FRAME_LEN bytes */
	int mark;            /* set ECN to CE */
};

/* Whether an ECT packet at backlog b is marked (the n-th draw of the key). */
static __always_inline int ecn_draw(struct sp_queue *q, __u64 b)
{
	__u64 span, p;

	if (b >= q->kmax)
		return 1;
	/* kmin <= b < kmax here, so span > 0 and b - kmin < span <= 2^30. */
	span = q->kmax - q->kmin;
	p = ((b - q->kmin) << SP_MARK_SHIFT) / span;
	return draw32(q->seed, __sync_fetch_and_add(&q->seq, 1)) < p;
}

/* An MRC data packet in one piece, which a switch may trim (mrc_wire.h,
 * "Trimming"): IPv4 without options or fragments, UDP to 4791, longer than
 * what trimming keeps, not a GSO aggregate. cur is just after the IPv4 header. */
static __always_inline int trimmable(struct __sk_buff *skb, struct hdr_cursor *cur,
				     void *data_end, struct iphdr *ip)
{
	struct udphdr *udp;

	if (ip->ihl != 5 || ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x3FFF)))
		return 0;
	if (parse_udphdr(cur, data_end, &udp) || (void *)udp + SP_TRIM_UDP_LEN > data_end)
		return 0; /* it keeps SP_TRIM_UDP_LEN bytes: they must be there */
	return udp->dest == bpf_htons(MRC_UDP_PORT) && bpf_ntohs(udp->len) > SP_TRIM_UDP_LEN &&
	       bpf_ntohs(ip->tot_len) > SP_TRIM_IP_LEN && !skb->gso_size;
}

/*
 * Decide what a congested queue does to the packet: mark, trim or neither
 * (*c stays zero for anything but IPv4). Reads the headers directly, pulling
 * them into the linear area first when they are not there.
 */
static __always_inline void classify(struct __sk_buff *skb, struct sp_queue *q, __u64 b,
				    __u64 len, struct sp_change *c)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct hdr_cursor cur;
	struct ethhdr *eth;
	struct iphdr *ip;
	__u32 want = len < SP_TRIM_FRAME_LEN ? len : SP_TRIM_FRAME_LEN;
	__u8 tos, dscp;

	if (data + want > data_end) {
		if (bpf_skb_pull_data(skb, want))
			return;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	cur.pos = data;
	if (parse_ethhdr(&cur, data_end, &eth) || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    parse_iphdr(&cur, data_end, &ip))
		return;
	c->old = c->ip0.word = *(__u32 *)ip;
	tos = ip->tos;

	if ((q->flags & SP_Q_ECN) && b >= q->kmin && (tos & MRC_ECN_MASK) != MRC_ECN_NOT_ECT &&
	    (tos & MRC_ECN_MASK) != MRC_ECN_CE)
		c->mark = ecn_draw(q, b);

	dscp = tos >> MRC_DSCP_SHIFT;
	if ((q->flags & SP_Q_TRIM) && (b >= q->trim || b + len > q->buffer) &&
	    (dscp == MRC_DSCP_TRIMMABLE || dscp == MRC_DSCP_TRIMMABLE_RETX) &&
	    trimmable(skb, &cur, data_end, ip)) {
		c->trim = 1;
		dscp = (q->flags & SP_Q_LASTHOP) ? MRC_DSCP_TRIMMED_LASTHOP : MRC_DSCP_TRIMMED;
		tos = (dscp << MRC_DSCP_SHIFT) | (tos & MRC_ECN_MASK);
		c->ip0.b[2] = SP_TRIM_IP_LEN >> 8;
		c->ip0.b[3] = SP_TRIM_IP_LEN & 0xFF;
	}
	if (c->mark)
		tos |= MRC_ECN_CE;
	c->ip0.b[1] = tos;
}

/* Cut a trimmable packet to its headers: new UDP length, and a new UDP
 * checksum when it had one (MRC sends 0, which stays 0). */
static __always_inline int trim_tail(struct __sk_buff *skb)
{
	struct {
		__be16 len;
		__sum16 check;
	} tail_fields;
	__be32 pseudo[3];
	struct hdr_cursor cur;
	void *data_end;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp, hdr;
	__s64 sum;

	if (bpf_skb_change_tail(skb, SP_TRIM_FRAME_LEN, 0))
		return -1;
	cur.pos = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (parse_ethhdr(&cur, data_end, &eth) || parse_iphdr(&cur, data_end, &ip) ||
	    parse_udphdr(&cur, data_end, &udp) || (void *)udp + SP_TRIM_UDP_LEN > data_end)
		return -1;
	tail_fields.len = bpf_htons(SP_TRIM_UDP_LEN);
	tail_fields.check = 0;
	if (udp->check) {
		/* Pseudo-header, then the UDP header with the new length and a
		 * zero checksum, then the payload kept. */
		pseudo[0] = ip->saddr;
		pseudo[1] = ip->daddr;
		pseudo[2] = bpf_htonl((IPPROTO_UDP << 16) | SP_TRIM_UDP_LEN);
		hdr.source = udp->source;
		hdr.dest = udp->dest;
		hdr.len = tail_fields.len;
		hdr.check = 0;
		sum = bpf_csum_diff(NULL, 0, pseudo, sizeof(pseudo), 0);
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&hdr, sizeof(hdr), sum);
		sum = bpf_csum_diff(NULL, 0, (void *)(udp + 1), MRC_TRIM_LEN, sum);
		tail_fields.check = csum_fold(sum);
		if (!tail_fields.check)
			tail_fields.check = 0xFFFF; /* 0 would mean "no checksum" */
	}
	return bpf_skb_store_bytes(skb, SP_UDP_LEN_OFF, &tail_fields, sizeof(tail_fields), 0);
}

/* Apply a decision: trim, then the new first word of the IPv4 header with an
 * incremental checksum update. Returns the new frame length, 0 on failure. */
static __always_inline __u64 rewrite(struct __sk_buff *skb, struct sp_change *c, __u64 len)
{
	if (c->trim) {
		if (trim_tail(skb))
			return 0;
		len = SP_TRIM_FRAME_LEN;
	}
	if (bpf_l3_csum_replace(skb, SP_IP_CSUM_OFF, c->old, c->ip0.word, sizeof(c->old)) ||
	    bpf_skb_store_bytes(skb, SP_IP_OFF, &c->ip0, sizeof(c->old), 0))
		return 0;
	return len;
}

/*
 * Stage: the virtual output queue of a switch egress port (switch_port.h).
 * *len is the frame length; it becomes the trimmed length when the packet is
 * trimmed.
 */
static __always_inline enum sp_verdict queue_stage(struct __sk_buff *skb, __u32 key,
						   struct sp_counters *cnt, __u64 *len)
{
	struct sp_queue *q = port_queues.lookup(&key);
	struct sp_change c = {};
	__u64 now, tail, v, b, cost, size = *len;

	if (!q || !(q->flags & SP_Q_ENABLED))
		return SP_PASS;
	now = bpf_ktime_get_ns();
	tail = *(volatile __u64 *)&q->tail_ns;
	v = tail > now ? ((tail - now) * q->drain_q) >> SP_Q_RATE_SHIFT : 0;
	b = v > q->burst ? v - q->burst : 0;

	if (b + size > q->buffer || ((q->flags & SP_Q_ECN) && b >= q->kmin) ||
	    ((q->flags & SP_Q_TRIM) && b >= q->trim)) {
		classify(skb, q, b, size, &c);
		/* What does not fit is dropped as it is: no rewrite, no mark counted. */
		if (b + (c.trim ? SP_TRIM_FRAME_LEN : size) > q->buffer)
			return SP_DROP_BUFFER;
		if (c.trim || c.mark) {
			__u64 out = rewrite(skb, &c, size);

			if (!out)
				return SP_DROP_BUFFER; /* a helper failed (cannot happen): never half-rewritten */
			size = out;
			cnt->trimmed += c.trim;
			cnt->ecn_marked += c.mark;
		}
	}

	cost = (size * q->cost_q + (1ULL << (SP_Q_COST_SHIFT - 1))) >> SP_Q_COST_SHIFT;
	if (tail > now)
		__sync_fetch_and_add(&q->tail_ns, cost);
	else
		q->tail_ns = now + cost; /* the queue was empty: start it now */
	cnt->enqueued++;
	if (b + size > cnt->backlog_hwm)
		cnt->backlog_hwm = b + size;
	*len = size;
	return SP_PASS;
}

/* Stage: account the verdict and turn it into a tc action. */
static __always_inline int finish(struct sp_counters *cnt, enum sp_verdict verdict, __u64 len)
{
	switch (verdict) {
	case SP_DROP_BLACKHOLE:
		cnt->drop_blackhole++;
		return TC_ACT_SHOT;
	case SP_DROP_LOSS:
		cnt->drop_loss++;
		return TC_ACT_SHOT;
	case SP_DROP_BUFFER:
		cnt->drop_buffer++;
		return TC_ACT_SHOT;
	default:
		cnt->passed_pkts++;
		cnt->passed_bytes += len;
		return TC_ACT_OK;
	}
}

/* ---- Stage: forwarding in BPF ----------------------------------------------- */

#define SP_IP_TTL_OFF (SP_IP_OFF + offsetof(struct iphdr, ttl))

/*
 * Forward an MRC packet that the earlier stages passed at an ingress key:
 * the FIB of this namespace picks the egress port and next hop (ECMP on the
 * five-tuple, as ip_route_input does with fib_multipath_hash_policy 1), the
 * TTL goes down by one (incremental checksum) and the MACs become the next
 * hop's. Returns TC_ACT_REDIRECT (bpf_redirect to the egress port: its
 * clsact egress hook and its qdisc run as for a forwarded packet), or
 * TC_ACT_OK to leave the packet to the IP stack.
 */
static __always_inline int forward_stage(struct __sk_buff *skb, __u32 key)
{
	__u32 zero = 0;
	struct sp_config *cfg = switch_config.lookup(&zero);
	struct sp_fwd_counters *fwd;
	struct bpf_fib_lookup fib = {};
	struct hdr_cursor cur;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	void *data, *data_end;
	__u32 want = ETH_HLEN + sizeof(struct iphdr) + sizeof(struct udphdr);
	__u16 old_word, new_word;
	__u8 macs[2 * ETH_ALEN];
	__u8 ttl;
	int rc;

	if (!cfg || !(cfg->flags & SP_CFG_FWD_BPF))
		return TC_ACT_OK;
	fwd = port_fwd.lookup(&key);
	if (!fwd)
		return TC_ACT_OK;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (data + want > data_end) {
		if (skb->len < want || bpf_skb_pull_data(skb, want)) {
			fwd->stack_other++;
			return TC_ACT_OK;
		}
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	cur.pos = data;
	if (parse_ethhdr(&cur, data_end, &eth) || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    parse_iphdr(&cur, data_end, &ip) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
	    (ip->frag_off & bpf_htons(0x3FFF)) || parse_udphdr(&cur, data_end, &udp) ||
	    udp->dest != bpf_htons(MRC_UDP_PORT)) {
		fwd->stack_other++;
		return TC_ACT_OK;
	}
	ttl = ip->ttl;
	if (ttl <= 1) {
		fwd->stack_ttl++; /* the IP stack sends the ICMP time exceeded */
		return TC_ACT_OK;
	}
	fib.family = 2; /* AF_INET */
	fib.tos = ip->tos;
	fib.l4_protocol = IPPROTO_UDP;
	fib.sport = udp->source;
	fib.dport = udp->dest;
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = skb->ingress_ifindex;
	/* tot_len 0: the helper checks the skb against the egress port's MTU. */
	old_word = *(__u16 *)&ip->ttl; /* TTL and protocol: one 16-bit checksum word */
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		fwd->stack_fib++;
		if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
			fwd->no_neigh++; /* the IP stack resolves it; later packets come here */
		return TC_ACT_OK;
	}
	/* Written through helpers only (see the top of this file). */
	((__u8 *)&new_word)[0] = ttl - 1;
	((__u8 *)&new_word)[1] = IPPROTO_UDP;
	__builtin_memcpy(macs, fib.dmac, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, fib.smac, ETH_ALEN);
	if (bpf_l3_csum_replace(skb, SP_IP_CSUM_OFF, old_word, new_word, sizeof(new_word)) ||
	    bpf_skb_store_bytes(skb, SP_IP_TTL_OFF, &new_word, 1, 0) ||
	    bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0)) {
		/* Cannot happen (the headers are in the linear area, pulled
		 * above): drop rather than send a half-rewritten packet. */
		return TC_ACT_SHOT;
	}
	fwd->redirected++;
	return bpf_redirect(fib.ifindex, 0);
}

int switch_port(struct __sk_buff *skb)
{
	/* key = port_id * 2 + direction, set by the filter's classid. Reset it
	 * so it does not leak into later qdisc classification. */
	__u32 key = skb->tc_classid;
	__u64 len = skb->len;
	struct sp_counters *cnt;
	enum sp_verdict verdict;

	skb->tc_classid = 0;
	if (key >= MAX_PORT_KEYS)
		return TC_ACT_OK; /* not one of ours: pass, count nothing */

	cnt = port_counters.lookup(&key);
	if (!cnt)
		return TC_ACT_OK; /* cannot happen for an in-range array key */
	cnt->pkts++;
	cnt->bytes += len;

	verdict = fault_stage(key);
	if (verdict == SP_PASS)
		verdict = ev_fault_stage(skb, key);
	if (verdict == SP_PASS)
		verdict = queue_stage(skb, key, cnt, &len);
	if (finish(cnt, verdict, len) != TC_ACT_OK)
		return TC_ACT_SHOT;
	if ((key & 1) == SP_DIR_INGRESS)
		return forward_stage(skb, key);
	return TC_ACT_OK;
}

/*
 * XDP on a switch port that faces a host: it only passes. It is there because
 * a frame a host's NIC program sends with XDP_TX or a devmap redirect into its
 * veth is dropped unless the peer end has an XDP program (docs/design.md, section 3:
 * without one, the first ring of 256 frames passes, then every frame fails).
 * Faults and counters stay in the tc program, which runs after this.
 */
int switch_port_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}
