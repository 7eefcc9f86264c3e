/* SPDX-License-Identifier: Apache-2.0 */
/*
 * switch_port.h: what the switch-port tc program (switch_port.c) shares with
 * user space (mrc_nic/fabric/switchport.py). One source of truth: Python's
 * view of each struct and constant is generated from this file
 * (mrc_nic/abi/switch_defs.py, `make abi`), and a test compares it, field by
 * field, with the layout bcc compiled.
 *
 * Map layouts are packed (no hidden padding), 8-byte aligned (so 64-bit
 * atomics on them are aligned) and their sizes are pinned with _Static_assert.
 * Grow a struct only by adding fields at its end.
 */
#ifndef MRC_SWITCH_PORT_H
#define MRC_SWITCH_PORT_H

#include <linux/types.h>

/* ---- Tunables (override with -DNAME=value) ---------------------------- */

/* Entries in the per-key maps: 2 keys (ingress, egress) per switch port.
 * The loader passes -DMAX_PORT_KEYS=2*max_ports. */
#ifndef MAX_PORT_KEYS
#define MAX_PORT_KEYS 1024
#endif

/* ---- Port keys ---------------------------------------------------------- */

/* A port learns its key from the cls_bpf filter's classid, which cls_bpf
 * copies into skb->tc_classid before running the program:
 *     key = port_id * 2 + direction.
 * classid 0 is port 0 ingress, the key BPF_PROG_TEST_RUN exercises. */
#define SP_DIR_INGRESS 0
#define SP_DIR_EGRESS 1
#define SP_DIRECTIONS 2

/* ---- Faults ------------------------------------------------------------- */

enum sp_fault_mode {
	SP_FAULT_NONE = 0,      /* pass everything */
	SP_FAULT_BLACKHOLE = 1, /* drop every packet, silently */
	SP_FAULT_LOSS = 2,      /* drop each packet with probability rate */
};

/* LOSS drops packet n when the high 32 bits of hash(seed, n) are below
 * loss_threshold = round(rate * 2^SP_LOSS_SCALE_SHIFT); a threshold of 2^32
 * (rate 1) drops everything, 0 drops nothing. */
#define SP_LOSS_SCALE_SHIFT 32

/* Fault on one port key. Map port_faults (BPF_ARRAY, MAX_PORT_KEYS entries).
 * Written whole by user space (mrc-nic fail/heal) through the pinned map;
 * the program only fetch-adds seq. */
struct sp_fault {
	__u32 mode;           /* enum sp_fault_mode */
	__u32 fault_id;       /* opaque tag chosen by user space, for reporting */
	__u64 loss_threshold; /* LOSS: drop if hash32 < threshold, see above */
	__u64 seed;           /* LOSS: seed of the drop pattern */
	__u64 until_ns;       /* CLOCK_MONOTONIC expiry (bpf_ktime_get_ns); 0 = none */
	__u64 seq;            /* LOSS: packets seen by this fault; user space zeroes it */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_fault) == 40, "struct sp_fault layout changed");

/* ---- Faults on one EV of one QP ------------------------------------------ */

/* A fault on the packets of one EV of one QP only: MRC data packets (UDP to
 * MRC_UDP_PORT) whose UDP source port is the EV and whose BTH destination QP
 * is the receiving QP, through one port key (the sender's first hop; user
 * space picks it). Map ev_faults (BPF_HASH, SP_EV_FAULTS_MAX entries), written
 * by `mrc-nic fail qp QPN ev EV`; map port_ev_faults (BPF_ARRAY of __u32,
 * MAX_PORT_KEYS) counts the EV faults of each port key, so that ports without
 * one parse nothing. Drops count in struct sp_counters as the port-wide
 * modes' do (drop_blackhole, drop_loss), and in the fault's own counters. */
#ifndef SP_EV_FAULTS_MAX
#define SP_EV_FAULTS_MAX 256
#endif

struct sp_ev_key {
	__u32 port_key; /* port_id * 2 + direction */
	__u32 dqpn;     /* BTH destination QP (24 bits): the receiving QP */
	__u32 ev;       /* UDP source port */
	__u32 reserved; /* 0 */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_ev_key) == 16, "struct sp_ev_key layout changed");

struct sp_ev_fault {
	__u32 mode;           /* enum sp_fault_mode: BLACKHOLE or LOSS */
	__u32 fault_id;       /* user space's tag */
	__u64 loss_threshold; /* LOSS: as struct sp_fault's */
	__u64 seed;           /* LOSS: seed of the drop pattern */
	__u64 until_ns;       /* CLOCK_MONOTONIC expiry; 0 = none */
	__u64 seq;            /* LOSS: draws so far */
	__u64 pkts;           /* packets of this EV seen here */
	__u64 dropped;        /* of them, dropped by this fault */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_ev_fault) == 56, "struct sp_ev_fault layout changed");

/* ---- Counters ----------------------------------------------------------- */

/* Traffic through one port key. Map port_counters (BPF_PERCPU_ARRAY,
 * MAX_PORT_KEYS entries). Written only by the program, one copy per CPU (no
 * atomics); user space sums the copies, except backlog_hwm, a high-water
 * mark: user space takes the largest copy (the maximum of per-CPU maxima is
 * the maximum). Invariants:
 *     pkts == passed_pkts + drop_blackhole + drop_loss + drop_buffer;
 *     enqueued == passed_pkts on a key whose queue is enabled from the start
 *     (0 where it never is); ecn_marked, trimmed <= enqueued.
 * The first six fields are the faults' (issue 2); the rest, the virtual
 * output queue's (issue 5), were appended. */
struct sp_counters {
	__u64 pkts;           /* packets seen */
	__u64 bytes;          /* bytes seen (skb->len, Ethernet header included) */
	__u64 passed_pkts;    /* packets returned TC_ACT_OK */
	__u64 passed_bytes;   /* their bytes, as sent (a trimmed packet counts its new length) */
	__u64 drop_blackhole; /* packets dropped by a BLACKHOLE fault */
	__u64 drop_loss;      /* packets dropped by a LOSS fault */
	__u64 enqueued;       /* packets the virtual queue took (struct sp_queue enabled) */
	__u64 ecn_marked;     /* of them: ECT packets marked CE here */
	__u64 trimmed;        /* of them: MRC data packets trimmed here */
	__u64 drop_buffer;    /* packets dropped: they did not fit the buffer */
	__u64 backlog_hwm;    /* highest backlog, bytes, this packet included (max, not sum) */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_counters) == 88, "struct sp_counters layout changed");

/* ---- Virtual output queue ----------------------------------------------- */

/*
 * A switch egress port sends at its link's rate through a real TBF (the
 * queueing delay is real), but veth has no bottleneck that a program could
 * look at. The program keeps a twin of that queue: bytes in, minus rate x
 * time. It is held as one number, tail_ns, the CLOCK_MONOTONIC time at which
 * everything enqueued so far has left at the link rate:
 *     V = (tail_ns - now) x rate               (0 once tail_ns has passed)
 *     backlog = max(0, V - burst)              (the TBF's bucket sends `burst`
 *                                               bytes at once after idle)
 * Enqueueing len bytes adds len / rate to tail_ns with one atomic add. No
 * lock: the only race is two CPUs finding the queue empty at once, when both
 * store now + their own cost and one packet's cost is lost; that costs at
 * most a packet of backlog at the moment the queue starts, never under load.
 *
 * Each packet then meets, with b = the backlog ahead of it:
 *   ECN (SP_Q_ECN): an ECT packet is marked CE with probability
 *       0 below kmin, (b - kmin) / (kmax - kmin) up to kmax, 1 from kmax;
 *       the n-th draw of a key is a hash of (seed, n), so a seed replays;
 *   trimming (SP_Q_TRIM): an MRC data packet (see mrc_wire.h, "Trimming") is
 *       trimmed when b >= trim, or when it would not fit the buffer;
 *   the buffer: a packet that does not fit (b + len > buffer) is dropped.
 * Packets below kmin that fit are not even parsed.
 */

/* struct sp_queue.flags */
#define SP_Q_ENABLED 0x01 /* model a queue on this key: egress keys of capped links */
#define SP_Q_ECN 0x02     /* mark CE on ECT packets between kmin and kmax */
#define SP_Q_TRIM 0x04    /* trim MRC data packets above trim (or that do not fit) */
#define SP_Q_LASTHOP 0x08 /* the port faces a host: trimmed DSCP is TRIMMED_LASTHOP */
#define SP_Q_FLAGS_ALL 0x0F

/* Fixed point: drain_q = bytes per ns << SP_Q_RATE_SHIFT; cost_q = ns per
 * byte << SP_Q_COST_SHIFT (user space derives both from rate_bps). */
#define SP_Q_RATE_SHIFT 32
#define SP_Q_COST_SHIFT 16
/* buffer, burst and every threshold are at most this many bytes, so that
 * (tail_ns - now) x drain_q, about V << 32, stays within 64 bits. */
#define SP_Q_BYTES_MAX (1ULL << 30)
/* Marking: draw32(seed, n) < p x 2^SP_MARK_SHIFT. */
#define SP_MARK_SHIFT 32

/* The queue of one port key. Map port_queues (BPF_ARRAY, MAX_PORT_KEYS
 * entries). User space writes it whole (mrc-nic up, mrc-nic port set),
 * which also empties the twin and restarts the marking draws (tail_ns and
 * seq written 0); the program only moves tail_ns and seq. */
struct sp_queue {
	__u32 flags;     /* SP_Q_* */
	__u32 reserved;  /* 0 */
	__u64 rate_bps;  /* link rate, bits/s (drain_q and cost_q come from it) */
	__u64 drain_q;   /* bytes per ns << SP_Q_RATE_SHIFT */
	__u64 cost_q;    /* ns per byte << SP_Q_COST_SHIFT */
	__u64 burst;     /* bytes the real queue (TBF) passes at once: subtracted */
	__u64 kmin;      /* bytes: marking starts */
	__u64 kmax;      /* bytes: every ECT packet marked (kmin <= kmax) */
	__u64 trim;      /* bytes: trimming starts */
	__u64 buffer;    /* bytes: what does not fit is dropped */
	__u64 seed;      /* seed of the marking draws */
	__u64 tail_ns;   /* state: when the twin is empty (bpf_ktime_get_ns clock) */
	__u64 seq;       /* state: marking draws so far */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_queue) == 96, "struct sp_queue layout changed");

/* ---- Forwarding ---------------------------------------------------------- */

/*
 * Who forwards a switch's packets from one port to the next. Kernel: the IP
 * stack (ip_rcv, the FIB with its ECMP routes, ip_forward, the neighbour
 * table). BPF (SP_CFG_FWD_BPF): the program itself, at the ingress hook of
 * the port the packet came in by, for MRC packets only (IPv4 without
 * options or fragments, UDP to MRC_UDP_PORT, TTL above 1): bpf_fib_lookup
 * in the switch's namespace (the same FIB, routes and ECMP hash on the same
 * five-tuple as the IP stack's), TTL decremented, MACs of the next hop, then
 * bpf_redirect to the egress port. The packet then meets that port's egress
 * hook (this program: faults, the virtual output queue, counters) and its
 * TBF exactly as a forwarded one, and skips the IP stack. Anything else, and
 * any lookup that does not answer BPF_FIB_LKUP_RET_SUCCESS (no neighbour
 * entry yet, MTU, unreachable), goes to the IP stack as before.
 */

/* struct sp_config.flags */
#define SP_CFG_FWD_BPF 0x01 /* switches forward MRC packets in BPF */

/* Lab-wide switch settings. Map switch_config (BPF_ARRAY, 1 entry), written
 * whole by user space (mrc-nic up, SwitchPortMaps.set_forwarding). */
struct sp_config {
	__u32 flags;    /* SP_CFG_* */
	__u32 reserved; /* 0 */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_config) == 8, "struct sp_config layout changed");

/* What the forwarding stage did with the packets of one ingress key. Map
 * port_fwd (BPF_PERCPU_ARRAY, MAX_PORT_KEYS entries), written only by the
 * program; user space sums the copies. Counted only while SP_CFG_FWD_BPF is
 * set, and only for packets the earlier stages passed:
 *     redirected + stack_other + stack_ttl + stack_fib == packets looked at. */
struct sp_fwd_counters {
	__u64 redirected;  /* forwarded by the program to the egress port */
	__u64 stack_other; /* not MRC (or not IPv4 without options): to the IP stack */
	__u64 stack_ttl;   /* TTL 1 or 0: to the IP stack, which answers ICMP */
	__u64 stack_fib;   /* bpf_fib_lookup did not answer SUCCESS: to the IP stack */
	__u64 no_neigh;    /* of stack_fib: BPF_FIB_LKUP_RET_NO_NEIGH */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_fwd_counters) == 40, "struct sp_fwd_counters layout changed");

#endif /* MRC_SWITCH_PORT_H */
