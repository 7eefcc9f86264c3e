/* SPDX-License-Identifier: Apache-2.0 */
/*
 * switch_port.h: what the switch-port tc program (switch_port.c) shares with
 * user space (mrc_nic/switchport.py). One source of truth: Python keeps a
 * ctypes copy of each struct and a test compares it, field by field, with the
 * layout bcc compiled from this file, and checks the constants below.
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

/* ---- Counters ----------------------------------------------------------- */

/* Traffic through one port key. Map port_counters (BPF_PERCPU_ARRAY,
 * MAX_PORT_KEYS entries). Written only by the program, one copy per CPU (no
 * atomics); user space sums the copies. Invariant:
 *     pkts == passed_pkts + drop_blackhole + drop_loss.
 * Later stages (virtual output queue: ECN, trimming, buffer drops) append
 * their counters at the end. */
struct sp_counters {
	__u64 pkts;           /* packets seen */
	__u64 bytes;          /* bytes seen (skb->len, Ethernet header included) */
	__u64 passed_pkts;    /* packets returned TC_ACT_OK */
	__u64 passed_bytes;   /* their bytes */
	__u64 drop_blackhole; /* packets dropped by a BLACKHOLE fault */
	__u64 drop_loss;      /* packets dropped by a LOSS fault */
} __attribute__((packed, aligned(8)));

_Static_assert(sizeof(struct sp_counters) == 48, "struct sp_counters layout changed");

#endif /* MRC_SWITCH_PORT_H */
