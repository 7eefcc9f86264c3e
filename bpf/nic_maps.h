/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_maps.h: what the NIC programs (nic_xdp.c now; nic_tx.c later) share
 * with each other and with user space (mrc_nic/nic.py). One source of truth:
 * Python keeps a ctypes copy of each struct and a test compares it, field by
 * field, with the layout bcc compiled from this file, and checks the
 * constants below.
 *
 * All maps are lab-wide (the program is compiled once per lab and attached to
 * every host port) and keyed by things that are unique in a lab: QP numbers
 * (host << 16 | index), region ids, host ids. See docs/fastpath.md.
 *
 * Layouts: natural alignment, every hole filled by an explicit reserved field,
 * sizes and the offsets that matter pinned with _Static_assert. (They are not
 * packed, unlike switch_port.h: struct nic_rq holds a bpf_spin_lock and u64
 * arrays indexed at run time, and the verifier and clang both want them
 * naturally aligned.) Grow a struct only by adding fields at its end.
 */
#ifndef MRC_NIC_MAPS_H
#define MRC_NIC_MAPS_H

#include <linux/types.h>

#include "mrc_wire.h"

/* ---- Tunables (override with -DNAME=value; the loader does) ------------- */

/* Entries of the receive-QP hash map nic_rx_qps. */
#ifndef NIC_MAX_QPS
#define NIC_MAX_QPS 4096
#endif

/* Memory: elements of NIC_MR_ELEM_SIZE bytes in the one mmapable array that
 * holds every region of the lab (default 64 MiB). */
#ifndef NIC_MR_ELEMS
#define NIC_MR_ELEMS 65536
#endif

/* Entries of the region table nic_regions (region ids 0 .. NIC_MAX_REGIONS-1). */
#ifndef NIC_MAX_REGIONS
#define NIC_MAX_REGIONS 256
#endif

/* Host ids 0 .. NIC_MAX_HOSTS-1 (entries of nic_port_up). The topology allows
 * 253 hosts: host h is .h+1 in its plane's /24. */
#ifndef NIC_MAX_HOSTS
#define NIC_MAX_HOSTS 256
#endif

/* Planes (the third octet of a host address, relative to NIC_HOST_NET). */
#ifndef NIC_MAX_PLANES
#define NIC_MAX_PLANES 16
#endif

/* The lab's host network, host order: plane p is its p-th /24 and host h is
 * .h+1 in it (mrc_nic/topology.py). 198.18.0.0 by default. */
#ifndef NIC_HOST_NET
#define NIC_HOST_NET 0xC6120000U
#endif

/* Size of the event ring buffer nic_events, in pages (a power of 2). */
#ifndef NIC_EVENT_PAGES
#define NIC_EVENT_PAGES 64
#endif

/* ---- Layout constants (NOT tunable: user space mirrors them) ------------ */

/* Region element: the path MTU RoCE uses on 1500-byte Ethernet, and the
 * payload of every full data packet. A packet is placed in the element at
 * (RETH.va - region base_va) / NIC_MR_ELEM_SIZE and never straddles two. */
#define NIC_MR_ELEM_SIZE 1024

/* Largest MPR a receive QP may have (units of MRC_MPR_UNIT = 128 PSNs). The
 * receive bitmap is a ring of NIC_BITMAP_BITS bits: PSN p lives at bit
 * p % NIC_BITMAP_BITS, a power of two that divides 2^24, so the ring position
 * of a PSN does not jump when the 24-bit PSN wraps. */
#define NIC_MPR_MAX 8
#define NIC_BITMAP_BITS (NIC_MPR_MAX * MRC_MPR_UNIT) /* 1024 */
#define NIC_BITMAP_WORDS (NIC_BITMAP_BITS / 64)      /* 16 */

/* Messages whose LAST packet has arrived but that are not complete yet, per
 * receive QP (the OCP API's max_wimm_dest plays this role; here plain WRITEs
 * count too, since they move AETH.msn). A LAST packet of MSN m is accepted
 * when 0 <= m - msn < NIC_MSG_SLOTS; beyond that it is NACKed NO_RESOURCE.
 * A power of two. */
#define NIC_MSG_SLOTS 32

_Static_assert((NIC_BITMAP_BITS & (NIC_BITMAP_BITS - 1)) == 0 && NIC_BITMAP_BITS >= 64,
	       "NIC_BITMAP_BITS must be a power of two >= 64");
_Static_assert((NIC_MSG_SLOTS & (NIC_MSG_SLOTS - 1)) == 0, "NIC_MSG_SLOTS must be a power of two");

/* ---- QP states ---------------------------------------------------------- */

/* The values of verbs' enum ibv_qp_state. Only RTR and RTS accept data. */
enum nic_qp_state {
	NIC_QPS_RESET = 0,
	NIC_QPS_INIT = 1,
	NIC_QPS_RTR = 2,
	NIC_QPS_RTS = 3,
	NIC_QPS_SQD = 4,
	NIC_QPS_SQE = 5,
	NIC_QPS_ERR = 6,
};

/* ---- Receive QP state: map nic_rx_qps (hash, key = __u32 QPN) ------------ */

/* A message whose LAST packet has arrived, waiting for cum_psn to pass it. */
struct nic_msg_slot {
	__u64 va;       /* message base address: RETH.va - MRC_DATA.msg_off */
	__u32 last_psn; /* PSN of its LAST packet */
	__u32 len;      /* message bytes: msg_off + dmalen of the LAST packet */
	__u32 imm;      /* ImmDt, host order (WRITE_WITH_IMM only) */
	__u32 flags;    /* NIC_MSG_F_* */
};
_Static_assert(sizeof(struct nic_msg_slot) == 24, "struct nic_msg_slot layout changed");

#define NIC_MSG_F_VALID 0x1 /* the slot holds a message */
#define NIC_MSG_F_IMM 0x2   /* WRITE_WITH_IMM: raise a completion event */

/* Per-QP counters, written by BPF under the QP's lock. */
struct nic_rq_stats {
	__u64 data_pkts;    /* data packets answered (SACK or NACK); dropped ones are not */
	__u64 placed_pkts;  /* payloads placed (first arrival of a PSN) */
	__u64 placed_bytes; /* their bytes */
	__u64 dup_pkts;     /* duplicates: acknowledged, not placed */
	__u64 trimmed_pkts; /* trimmed packets (NACKed TRIMMED or TRIMMED_LASTHOP) */
	__u64 oor_pkts;     /* PSN at or beyond cum_psn + window (NACKed PSN_OOR_WINDOW) */
	__u64 sacks;        /* SACKs sent */
	__u64 nacks;        /* NACKs sent, every reason */
	__u64 msgs_done;    /* messages completed in order (AETH.msn moves with it) */
	__u64 imm_done;     /* of which WRITE_WITH_IMM (one completion event each) */
};
_Static_assert(sizeof(struct nic_rq_stats) == 80, "struct nic_rq_stats layout changed");

/*
 * The receiving side of one QP. User space writes the whole value when it
 * sets the QP up (the "setup" fields and the initial cum_psn and msn; the
 * rest zero) and reads it back with BPF_F_LOCK. Afterwards BPF owns
 * everything below "BPF-owned", under the lock.
 *
 * Bitmap invariant: bit (p % NIC_BITMAP_BITS) is set only for PSNs p in
 * [cum_psn, cum_psn + window) that have arrived; every other bit is zero
 * (bits are cleared as cum_psn passes them), so the ring can be reused.
 */
struct nic_rq {
	struct bpf_spin_lock lock; /* guards the BPF-owned fields; ports of one QP run on several CPUs */
	/* setup: written by user space */
	__u32 state;      /* enum nic_qp_state */
	__u32 local_host; /* this QP's host: packets must go to 198.18.P.(local_host+1) */
	__u32 peer_host;  /* the sender's host: packets must come from 198.18.P.(peer_host+1) */
	__u32 peer_qpn;   /* the sender's QP: dest QP of our SACKs and NACKs */
	__u32 mpr;        /* window = mpr * MRC_MPR_UNIT PSNs, 1 .. NIC_MPR_MAX */
	__u32 region;     /* index in nic_regions of the memory this QP writes */
	/* BPF-owned (user space sets the initial values) */
	__u32 cum_psn; /* every PSN before it has arrived; the first hole */
	__u32 msn;     /* messages completed in order (24 bits): AETH.msn */
	__u32 reserved;
	__u64 bitmap[NIC_BITMAP_WORDS]; /* ring of received PSNs, see above */
	struct nic_rq_stats stats;
	struct nic_msg_slot msgs[NIC_MSG_SLOTS]; /* message MSN m in msgs[m % NIC_MSG_SLOTS] */
};
_Static_assert(__builtin_offsetof(struct nic_rq, cum_psn) == 28, "struct nic_rq layout changed");
_Static_assert(__builtin_offsetof(struct nic_rq, bitmap) == 40, "struct nic_rq layout changed");
_Static_assert(sizeof(struct nic_rq) == 40 + 8 * NIC_BITMAP_WORDS + sizeof(struct nic_rq_stats) +
					     NIC_MSG_SLOTS * sizeof(struct nic_msg_slot),
	       "struct nic_rq has hidden padding");

/* ---- Memory regions ----------------------------------------------------- */

/* One element of map nic_mr (BPF_F_MMAPABLE array, NIC_MR_ELEMS entries).
 * User space mmaps the map to post source data and read what arrived. */
struct nic_mr_elem {
	__u8 bytes[NIC_MR_ELEM_SIZE];
};
_Static_assert(sizeof(struct nic_mr_elem) == NIC_MR_ELEM_SIZE, "struct nic_mr_elem layout changed");

/* One region: a slice of nic_mr. Map nic_regions (array, NIC_MAX_REGIONS
 * entries), written by user space. n_elems == 0: no region. A data packet
 * is placed when rkey matches, va - base_va is a multiple of
 * NIC_MR_ELEM_SIZE (else dropped) and inside the region (else fatal NACK,
 * remote access error). */
struct nic_region {
	__u64 base_va;    /* RETH.va of the region's first byte */
	__u32 first_elem; /* its first element in nic_mr */
	__u32 n_elems;    /* its size in elements */
	__u32 rkey;       /* the remote key data packets must carry */
	__u32 reserved;
};
_Static_assert(sizeof(struct nic_region) == 24, "struct nic_region layout changed");

/* ---- Ports -------------------------------------------------------------- */

/* Map nic_port_up (array, NIC_MAX_HOSTS entries of __u32, key = host id):
 * bit p set when the host's port p (plane p) is up. Copied into every SACK
 * and NACK (MRC_ACK.port_bitmap); user space must set it when the host comes
 * up (0 tells peers that every port is down). */

/* ---- Events: ring buffer nic_events ------------------------------------- */

enum nic_event_type {
	NIC_EV_RECV_IMM = 1, /* a WRITE_WITH_IMM message completed, in message order */
};

struct nic_event {
	__u32 type; /* enum nic_event_type */
	__u32 qpn;  /* the receiving QP */
	__u32 msn;  /* the message's MSN */
	__u32 imm;  /* its immediate data, host order */
	__u64 va;   /* its base address (RETH.va of its first byte) */
	__u32 len;  /* its length in bytes */
	__u32 reserved;
	__u64 ts; /* bpf_ktime_get_ns() when it completed */
};
_Static_assert(sizeof(struct nic_event) == 40, "struct nic_event layout changed");

/* Completions raised by one packet, gathered under the QP lock and sent to
 * the ring buffer after it (no helper may run under a bpf_spin_lock). Map
 * nic_cqe_scratch (per-CPU array, 1 entry); not pinned. */
struct nic_cqe {
	__u64 va;
	__u32 msn;
	__u32 imm;
	__u32 len;
	__u32 reserved;
};
struct nic_cqe_batch {
	__u32 n;    /* completions in cqes */
	__u32 done; /* messages completed by this packet, with or without immediate */
	struct nic_cqe cqes[NIC_MSG_SLOTS];
};
_Static_assert(sizeof(struct nic_cqe) == 24, "struct nic_cqe layout changed");

/* ---- Counters: map nic_counters (per-CPU array of __u64, NIC_CNT_MAX) --- */

/* One index per outcome. Every packet the program sees adds 1 to exactly one
 * of PASS_*, DROP_*, SACK, NACK_*; the others (bytes, events) are extra. */
enum nic_counter {
	NIC_CNT_PASS_NOT_MRC = 0,    /* not IPv4 / UDP / dport 4791 (or cut before UDP): XDP_PASS */
	NIC_CNT_PASS_OTHER_OPCODE,   /* a RoCE opcode outside MRC's ranges (UC, UD, CNP...): XDP_PASS */
	NIC_CNT_PASS_DEFERRED,       /* ACK, PROBE, PROBE_REPLY: roles not in BPF yet, XDP_PASS */
	NIC_CNT_SACK,                /* data answered with a SACK (XDP_TX) */
	NIC_CNT_NACK_TRIMMED,        /* NACK(TRIMMED) sent */
	NIC_CNT_NACK_TRIMMED_LASTHOP, /* NACK(TRIMMED_LASTHOP) sent */
	NIC_CNT_NACK_OOR,            /* NACK(PSN_OOR_WINDOW) sent */
	NIC_CNT_NACK_NO_RESOURCE,    /* NACK(NO_RESOURCE): no message slot */
	NIC_CNT_NACK_REM_ACCESS,     /* NACK(UNEXP_EVENT), remote access: rkey or va outside region */
	NIC_CNT_DROP_TRUNCATED,      /* frame shorter than its IPv4 total length */
	NIC_CNT_DROP_SHORT,          /* UDP payload shorter than the opcode's headers + ICRC */
	NIC_CNT_DROP_BAD_LEN,        /* IPv4/UDP lengths disagree, or RETH.dmalen != payload */
	NIC_CNT_DROP_TOO_LONG,       /* payload > MRC_PAYLOAD_MAX(MRC_MTU) or > NIC_MR_ELEM_SIZE */
	NIC_CNT_DROP_BAD_OPCODE,     /* unknown opcode in MRC's ranges (RC 0x00-0x1F, 0xC0-0xFF) */
	NIC_CNT_DROP_IMM_NOT_LAST,   /* WRITE_IMM without MRC_DATA_F_LAST */
	NIC_CNT_DROP_UNKNOWN_QP,     /* no receive state for BTH.qpn */
	NIC_CNT_DROP_SPOOFED,        /* IPv4 source/destination are not the QP's peer/local host */
	NIC_CNT_DROP_QP_STATE,       /* QP not in RTR or RTS */
	NIC_CNT_DROP_QP_CONFIG,      /* QP's mpr out of 1..NIC_MPR_MAX */
	NIC_CNT_DROP_BAD_VA,         /* va - base_va not a multiple of NIC_MR_ELEM_SIZE */
	NIC_CNT_DROP_BAD_MSN,        /* LAST packet of an MSN already completed, or conflicting */
	NIC_CNT_DROP_XDP_ERR,        /* resizing the frame for the answer failed */
	NIC_CNT_PLACED,              /* payloads placed in memory */
	NIC_CNT_PLACED_BYTES,        /* their bytes */
	NIC_CNT_DUP,                 /* duplicates (SACKed with MRC_ACK_F_DUP) */
	NIC_CNT_MSG_DONE,            /* messages completed in order */
	NIC_CNT_EVENTS,              /* events written to nic_events */
	NIC_CNT_EVENTS_LOST,         /* events lost: ring buffer full */
	NIC_CNT_MAX,
};

#endif /* MRC_NIC_MAPS_H */
