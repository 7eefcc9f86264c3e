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
 *   (later) virtual output queue: ECN marking, trimming, buffer drops;
 *   3. count the verdict (passed, or dropped with its reason).
 */
#include <uapi/linux/pkt_cls.h>

#include "switch_port.h"

/* Per-key fault configuration; see struct sp_fault. Pinned as port_faults. */
BPF_ARRAY(port_faults, struct sp_fault, MAX_PORT_KEYS);
/* Per-key, per-CPU traffic counters; see struct sp_counters. Pinned as port_counters. */
BPF_PERCPU_ARRAY(port_counters, struct sp_counters, MAX_PORT_KEYS);

/* What the stages decide; the last stage turns it into a counter and a tc action. */
enum sp_verdict {
	SP_PASS = 0,
	SP_DROP_BLACKHOLE,
	SP_DROP_LOSS,
};

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
static __always_inline int loss_drops(__u64 seed, __u64 n, __u64 threshold)
{
	__u64 h = mix64(mix64(seed) + n * 0x9e3779b97f4a7c15ULL);

	return (h >> (64 - SP_LOSS_SCALE_SHIFT)) < threshold;
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
	default:
		cnt->passed_pkts++;
		cnt->passed_bytes += len;
		return TC_ACT_OK;
	}
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
	/* Later: if (verdict == SP_PASS) verdict = queue_stage(skb, key, cnt); */
	return finish(cnt, verdict, len);
}

/*
 * XDP on a switch port that faces a host: it only passes. It is there because
 * a frame a host's NIC program sends with XDP_TX or a devmap redirect into its
 * veth is dropped unless the peer end has an XDP program (DESIGN section 3:
 * without one, the first ring of 256 frames passes, then every frame fails).
 * Faults and counters stay in the tc program, which runs after this.
 */
int switch_port_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}
