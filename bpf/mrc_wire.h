/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mrc_wire.h: the MRC wire format, the one definition that every MRC BPF
 * program includes. mrc_nic/nic/wire.py builds scapy layers on it and
 * tests/unit/test_wire.py and tests/bpf/test_wire.py check every constant and struct layout below
 * against what bcc compiles from this file. docs/wire-format.md draws each
 * packet and says why it is so.
 *
 * Framing is RoCEv2: Ethernet / IPv4 / UDP (dport 4791, sport = EV) / BTH /
 * extension headers / payload / 4-byte ICRC slot. Standard InfiniBand
 * headers come first, in IBTA order, so that tshark and scapy decode them;
 * MRC's own extension headers follow them.
 *
 *   opcode 0x0A  data          BTH RETH       MRC_DATA  payload  ICRC
 *   opcode 0x0B  data, last    BTH RETH ImmDt MRC_DATA  payload  ICRC
 *   opcode 0x11  SACK / NACK   BTH AETH MRC_ACK                  ICRC
 *   opcode 0xD8  PROBE         BTH MRC_PROBE                     ICRC
 *   opcode 0xD9  PROBE_REPLY   BTH MRC_PROBE                     ICRC
 *
 * Byte order: every multi-byte field is big endian (network order) on the
 * wire, and its type says so (__be16, __be32, __be64). Fields narrower than
 * a byte or not byte-aligned (PSN, QPN, MSN, flag bits) share a 32-bit word;
 * read the word with bpf_ntohl() and apply the masks below, as Linux's
 * rxe_hdr.h does. No C bitfields: their layout is the compiler's choice.
 *
 * Structs are packed (no hidden padding) and their sizes are pinned with
 * _Static_assert. Grow nothing in place: a new field is a new header or a
 * new version of the wire format.
 */
#ifndef MRC_WIRE_H
#define MRC_WIRE_H

#include <linux/types.h>

/* ---- Tunables (override with -DNAME=value) ------------------------------ */

/* The alignment the compiler may assume for a pointer to a wire header.
 * 2 is what every frame guarantees: the 14-byte Ethernet header and the
 * even-sized headers after it keep each header on an even offset. With 2,
 * clang loads a __be32 as two 16-bit loads; -DMRC_WIRE_ALIGN=4 lets it use
 * one 32-bit load, which is correct wherever the BPF JIT allows unaligned
 * packet access (x86-64, arm64), as struct iphdr accesses already assume.
 * 1 is the strictly portable choice (byte loads). Layout is the same for
 * any value. */
#ifndef MRC_WIRE_ALIGN
#define MRC_WIRE_ALIGN 2
#endif
_Static_assert(MRC_WIRE_ALIGN == 1 || MRC_WIRE_ALIGN == 2 || MRC_WIRE_ALIGN == 4,
	       "MRC_WIRE_ALIGN must be 1, 2 or 4 (every header size is a multiple of 4)");

#define __mrc_wire __attribute__((packed, aligned(MRC_WIRE_ALIGN)))

/* IP MTU of the fabric, in bytes (the lab's topology sets it). */
#ifndef MRC_MTU
#define MRC_MTU 1500
#endif

/* Bytes of UDP payload a trimming switch keeps (see "Trimming" below). The
 * default keeps the longest data header stack (MRC_WRITE_IMM_HDRS_LEN, 48)
 * plus 4 bytes that stand in for the ICRC slot. Must be at least that. */
#ifndef MRC_TRIM_LEN
#define MRC_TRIM_LEN 52
#endif

/* DSCP codepoints (6 bits; IPv4 TOS = dscp << 2 | ecn). MRC, like UET,
 * needs at least two traffic classes: data (trimmable) and a high-priority
 * control class for SACK/NACK, probe replies and trimmed headers. The
 * values are deployment configuration; these are mrc-nic's defaults. */
#ifndef MRC_DSCP_NO_TRIM
#define MRC_DSCP_NO_TRIM 24 /* data a switch must drop, never trim */
#endif
#ifndef MRC_DSCP_TRIMMABLE
#define MRC_DSCP_TRIMMABLE 26 /* data and probes (AF31, the usual RoCE DSCP) */
#endif
#ifndef MRC_DSCP_TRIMMABLE_RETX
#define MRC_DSCP_TRIMMABLE_RETX 28 /* retransmitted data */
#endif
#ifndef MRC_DSCP_TRIMMED
#define MRC_DSCP_TRIMMED 40 /* set by a switch that trimmed the packet */
#endif
#ifndef MRC_DSCP_TRIMMED_LASTHOP
#define MRC_DSCP_TRIMMED_LASTHOP 42 /* same, on the switch port facing the receiver */
#endif
#ifndef MRC_DSCP_CONTROL
#define MRC_DSCP_CONTROL 48 /* SACK, NACK, PROBE_REPLY (CS6) */
#endif

/* ---- Framing ------------------------------------------------------------ */

#define MRC_UDP_PORT 4791 /* RoCEv2's UDP destination port, on every MRC packet */

/* The entropy value (EV) of a packet is its UDP source port (16 bits).
 * EV 0 is invalid, as MRC_CTL_EV_INVALID is in the OCP API. */
#define MRC_EV_INVALID 0
#define MRC_EV_MAX 0xFFFF

/* IPv4 ECN codepoints (low 2 bits of the TOS byte). Data and probes are
 * sent ECT(0); switches mark CE; control packets are Not-ECT. */
#define MRC_ECN_MASK 0x03
#define MRC_ECN_NOT_ECT 0x00
#define MRC_ECN_ECT1 0x01
#define MRC_ECN_ECT0 0x02
#define MRC_ECN_CE 0x03
#define MRC_DSCP_SHIFT 2

/* ---- Opcodes (BTH byte 0) ----------------------------------------------- */

/* Data: the standard RC "Only" opcodes. Every MRC data packet is
 * self-contained (its own RETH, placed on arrival in any order), which is
 * exactly what an IBTA "Only" packet is; tshark and scapy then decode the
 * RETH and ImmDt as well as the BTH. */
#define MRC_OP_WRITE 0x0A     /* RC RDMA WRITE Only */
#define MRC_OP_WRITE_IMM 0x0B /* RC RDMA WRITE Only with Immediate: last packet of WRITE_WITH_IMM */
/* SACK and NACK: the standard RC ACKNOWLEDGE; the AETH syndrome says which. */
#define MRC_OP_ACK 0x11 /* RC Acknowledge */
/* MRC-only packets: IBTA's manufacturer-specific range 0xC0-0xFF. */
#define MRC_OP_PROBE 0xD8       /* sender -> receiver: is this EV's path alive? */
#define MRC_OP_PROBE_REPLY 0xD9 /* receiver -> sender: echo of a PROBE */

#define MRC_OP_VENDOR_FIRST 0xC0 /* first manufacturer-specific opcode */

/* ---- BTH: Base Transport Header (IBTA), 12 bytes ------------------------ */

/* Sent first in every MRC packet, by both sides. dest QP is the receiving
 * end's QP number; PSN is per packet type, see docs/wire-format.md. */
struct mrc_bth {
	__u8 opcode;  /* MRC_OP_* */
	__u8 flags;   /* SE | M | PadCnt | TVer, masks MRC_BTH_*_MASK; MRC sends 0 */
	__be16 pkey;  /* partition key: MRC_PKEY_DEFAULT */
	__be32 qpn;   /* FECN | BECN | 6 reserved | destination QP (24 bits) */
	__be32 apsn;  /* AckReq | 7 reserved | PSN (24 bits) */
} __mrc_wire;
_Static_assert(sizeof(struct mrc_bth) == 12, "struct mrc_bth layout changed");

/* flags byte */
#define MRC_BTH_SE_MASK 0x80   /* solicited event */
#define MRC_BTH_MIG_MASK 0x40  /* MigReq */
#define MRC_BTH_PAD_MASK 0x30  /* PadCnt; MRC does not pad: RETH says the length */
#define MRC_BTH_PAD_SHIFT 4
#define MRC_BTH_TVER_MASK 0x0F /* transport header version: 0 */
/* qpn word (host order after bpf_ntohl) */
#define MRC_BTH_FECN_MASK 0x80000000U
#define MRC_BTH_BECN_MASK 0x40000000U
#define MRC_BTH_RESV6_MASK 0x3F000000U
#define MRC_BTH_QPN_MASK 0x00FFFFFFU
/* apsn word (host order after bpf_ntohl) */
#define MRC_BTH_ACK_MASK 0x80000000U /* AckReq: the receiver must answer this packet */
#define MRC_BTH_RESV7_MASK 0x7F000000U
#define MRC_BTH_PSN_MASK 0x00FFFFFFU

#define MRC_PKEY_DEFAULT 0xFFFF /* the default partition, full membership */

/* PSNs are 24-bit serial numbers. MRC_PSN_DIFF(a, b) is a - b as a signed
 * number in [-2^23, 2^23): positive when a is after b. */
#define MRC_PSN_BITS 24
#define MRC_PSN_MASK 0x00FFFFFFU
#define MRC_PSN_DIFF(a, b) (((__s32)((((__u32)(a)) - ((__u32)(b))) << 8)) >> 8)

/* ---- RETH: RDMA Extended Transport Header (IBTA), 16 bytes -------------- */

/* In every data packet, from the sender. Describes this packet alone: va is
 * the address of its first payload byte, dmalen its payload length, so the
 * receiver places it without any other packet. */
struct mrc_reth {
	__be64 va;     /* remote virtual address of this packet's payload */
	__be32 rkey;   /* remote key of the memory region */
	__be32 dmalen; /* payload bytes in this packet (trimmed: before trimming) */
} __mrc_wire;
_Static_assert(sizeof(struct mrc_reth) == 16, "struct mrc_reth layout changed");

/* ---- ImmDt: Immediate Data (IBTA), 4 bytes ------------------------------ */

/* Only in the last packet of a WRITE_WITH_IMM message (opcode
 * MRC_OP_WRITE_IMM, whose MRC_DATA must have MRC_DATA_F_LAST: without it the
 * packet is malformed), from the sender; delivered with the receiver's
 * completion, in message order. */
struct mrc_immdt {
	__be32 imm; /* immediate data, opaque to the transport */
} __mrc_wire;
_Static_assert(sizeof(struct mrc_immdt) == 4, "struct mrc_immdt layout changed");

/* ---- AETH: ACK Extended Transport Header (IBTA), 4 bytes ---------------- */

/* In every SACK and NACK, from the receiver. The syndrome tells ACK from
 * NAK; msn counts the messages the receiver has completed in order. */
struct mrc_aeth {
	__be32 smsn; /* syndrome (8 bits) | MSN (24 bits) */
} __mrc_wire;
_Static_assert(sizeof(struct mrc_aeth) == 4, "struct mrc_aeth layout changed");

#define MRC_AETH_SYN_MASK 0xFF000000U
#define MRC_AETH_SYN_SHIFT 24
#define MRC_AETH_MSN_MASK 0x00FFFFFFU
/* Syndrome values (the byte). Bits 6:5 are the type: 00 ACK, 11 NAK. */
#define MRC_AETH_TYPE_MASK 0x60
#define MRC_AETH_TYPE_ACK 0x00
#define MRC_AETH_TYPE_NAK 0x60
#define MRC_AETH_ACK 0x1F             /* SACK: ACK, credit count 31 = "no credit flow control" */
#define MRC_AETH_NAK_PSN_SEQ 0x60     /* NACK, retryable reasons: resend BTH.psn */
#define MRC_AETH_NAK_INV_REQ 0x61     /* NACK, fatal: invalid request */
#define MRC_AETH_NAK_REM_ACCESS 0x62  /* NACK, fatal: remote access error (rkey, bounds) */
#define MRC_AETH_NAK_REM_OP 0x63      /* NACK, fatal: remote operational error */

/* ---- MRC_DATA: MRC data extension, 16 bytes ----------------------------- */

/* In every data packet, after RETH (and ImmDt), from the sender. Lets the
 * receiver finish messages whatever the arrival order, and carries the
 * timestamp the SACK echoes. */
struct mrc_data_ext {
	__be32 flags_msn; /* flags (8 bits, MRC_DATA_F_*) | MSN (24 bits) */
	__be32 msg_off;   /* byte offset of this payload in its message */
	__be64 tx_ts;     /* sender's transmit time, ns (its bpf_ktime_get_ns) */
} __mrc_wire;
_Static_assert(sizeof(struct mrc_data_ext) == 16, "struct mrc_data_ext layout changed");

/* flags_msn word (host order after bpf_ntohl) */
#define MRC_DATA_F_LAST 0x80000000U  /* last packet of its message */
#define MRC_DATA_FLAGS_MASK 0xFF000000U
#define MRC_DATA_FLAGS_SHIFT 24
#define MRC_DATA_MSN_MASK 0x00FFFFFFU /* message sequence number, 0 for the QP's first */

/* ---- MRC_ACK: MRC acknowledgement extension, 32 bytes ------------------- */

/* In every SACK and NACK, after AETH, from the receiver. One layout for
 * both: a NACK is a SACK with nack_reason != 0 (and a NAK syndrome), so it
 * also frees the sender's window. BTH.psn is the PSN of the data packet
 * that triggered it (for a NACK: the PSN to resend). */
struct mrc_ack_ext {
	__be32 mpr_cum;     /* MPR (8 bits) | cumulative PSN (24 bits) */
	__be32 sack_base;   /* 8 reserved | PSN of bitmap bit 0 (24 bits) */
	__be64 sack_bitmap; /* bit i (value >> i & 1) = PSN sack_base + i received */
	__be64 echo_ts;     /* tx_ts of the triggering packet, copied */
	__be16 echo_ev;     /* EV (UDP source port) of the triggering packet */
	__u8 flags;         /* MRC_ACK_F_*: what the triggering packet saw */
	__u8 nack_reason;   /* 0 for a SACK, else MRC_NACK_* */
	__be32 port_bitmap; /* bit p: the receiver's port p (plane p) is up */
} __mrc_wire;
_Static_assert(sizeof(struct mrc_ack_ext) == 32, "struct mrc_ack_ext layout changed");

/* mpr_cum word: every PSN before cum_psn was received (cum_psn is the first
 * hole). MPR is the receiver's current max PSN range in units of 128
 * packets (dynamic MPR); 0 = not advertised. */
#define MRC_ACK_MPR_MASK 0xFF000000U
#define MRC_ACK_MPR_SHIFT 24
#define MRC_ACK_CUM_PSN_MASK 0x00FFFFFFU
#define MRC_ACK_SACK_RESV_MASK 0xFF000000U
#define MRC_ACK_SACK_PSN_MASK 0x00FFFFFFU
#define MRC_SACK_BITS 64
#define MRC_MPR_UNIT 128 /* packets per MPR unit, as in the OCP API */

/* flags: congestion state of the triggering packet (also in PROBE_REPLY) */
#define MRC_ACK_F_ECN 0x01     /* it arrived with IP ECN = CE */
#define MRC_ACK_F_TRIMMED 0x02 /* it arrived trimmed (DSCP TRIMMED or TRIMMED_LASTHOP) */
#define MRC_ACK_F_DUP 0x04     /* it was a duplicate: acknowledged, not placed again */

/* NACK reasons. The names are the MRC papers'; the values are UET's PDS
 * NACK codes of the same names (UNEXP_EVENT: as in public models of MRC
 * 1.0). A retryable NACK asks the sender to resend BTH.psn. */
#define MRC_NACK_NONE 0x00            /* a SACK */
#define MRC_NACK_TRIMMED 0x01         /* trimmed in the fabric: resend on another EV */
#define MRC_NACK_TRIMMED_LASTHOP 0x02 /* trimmed facing the receiver (incast): resend */
#define MRC_NACK_NO_BITMAP 0x06       /* no receive-tracking state for the QP: resend later */
#define MRC_NACK_NO_PKT_BUFFER 0x07   /* no buffer to place the payload: resend later */
#define MRC_NACK_NO_RESOURCE 0x0A     /* other receiver resource exhausted: resend later */
#define MRC_NACK_PSN_OOR_WINDOW 0x0B  /* PSN beyond cum_psn + MPR: resend when the window moves */
#define MRC_NACK_UNEXP_EVENT 0x19     /* fatal: the QP goes to ERR (the syndrome says why) */

/* ---- MRC_PROBE: probe extension, 16 bytes ------------------------------- */

/* In PROBE (sender -> receiver, on the EV under test) and PROBE_REPLY
 * (receiver -> sender, copying tx_ts and ev). BTH.psn is the prober's probe
 * sequence number, echoed; probes use no data PSN. */
struct mrc_probe_ext {
	__be64 tx_ts;       /* PROBE: prober's transmit time, ns; REPLY: copied */
	__be16 ev;          /* PROBE: the EV probed (= its UDP source port); REPLY: copied */
	__u8 flags;         /* REPLY: MRC_ACK_F_* the probe saw; PROBE: 0 */
	__u8 reserved;      /* 0 */
	__be32 port_bitmap; /* bit p: the sending end's port p (plane p) is up */
} __mrc_wire;
_Static_assert(sizeof(struct mrc_probe_ext) == 16, "struct mrc_probe_ext layout changed");

/* flags of PROBE and PROBE_REPLY, beside the MRC_ACK_F_* a reply copies: the
 * probe tests a reverse EV (receiver -> sender): it addresses the peer's send
 * QP, and is answered in place (mrc-nic extension; wire-format.md) */
#define MRC_PROBE_F_REVERSE 0x80
/* flag of an endpoint PROBE_REPLY: its ICRC slot holds the responder's service
 * time, ns (from the PROBE's dispatch to the reply's send; mrc-nic extension) */
#define MRC_PROBE_F_SVC 0x40
/* flag of an endpoint PROBE and its PROBE_REPLY: a port status update (OCP
 * mrc_ctl_ep_batch_send_wait, MRC_CTL_EP_OP_PORT_STATUS_UPDATE). The PROBE's
 * port_bitmap is the port status its sender reports, which the responder's NIC
 * records for that peer (nic_peer_ports); the reply's is the responder's own
 * (mrc-nic extension: how the update travels is the implementation's) */
#define MRC_PROBE_F_PORT_STATUS 0x20

/* The endpoint QPN: a PROBE to it is a controller's connectionless EV probe
 * (OCP mrc_ctl_ep_batch_send_wait, MRC_CTL_EP_OP_EV_PROBE), answered by the
 * NIC without a QP, its PROBE_REPLY addressed to it as well. No QP has this
 * number (QPNs are host << 16 | index, index below 0xFFFF). mrc-nic extension:
 * how an EV probe is addressed is the implementation's. */
#define MRC_EP_QPN 0xFFFFFFU

/* ---- Header stacks and sizes -------------------------------------------- */

#define MRC_ICRC_LEN 4    /* trailer slot after the payload: carried, sent as 0, not checked */
#define MRC_ICRC_UNUSED 0
#define MRC_IPV4_UDP_LEN 28 /* IPv4 header (no options) + UDP header */

/* UDP payload bytes before the data payload, per opcode */
#define MRC_WRITE_HDRS_LEN (12 + 16 + 16)         /* BTH RETH MRC_DATA: 44 */
#define MRC_WRITE_IMM_HDRS_LEN (12 + 16 + 4 + 16) /* BTH RETH ImmDt MRC_DATA: 48 */
#define MRC_ACK_HDRS_LEN (12 + 4 + 32)            /* BTH AETH MRC_ACK: 48 */
#define MRC_PROBE_HDRS_LEN (12 + 16)              /* BTH MRC_PROBE: 28 */

/* IP packet bytes that are not data payload */
#define MRC_WRITE_OVERHEAD (MRC_IPV4_UDP_LEN + MRC_WRITE_HDRS_LEN + MRC_ICRC_LEN)         /* 76 */
#define MRC_WRITE_IMM_OVERHEAD (MRC_IPV4_UDP_LEN + MRC_WRITE_IMM_HDRS_LEN + MRC_ICRC_LEN) /* 80 */

/* Payload per data packet that fits an IP MTU whatever the opcode (a full
 * packet can become a message's last, with ImmDt, without being split):
 * 1420 bytes for MTU 1500, 4120 for MTU 4200. */
#define MRC_PAYLOAD_MAX(mtu) ((mtu) - MRC_WRITE_IMM_OVERHEAD)

_Static_assert(MRC_TRIM_LEN >= MRC_WRITE_IMM_HDRS_LEN + MRC_ICRC_LEN,
	       "MRC_TRIM_LEN must keep every data header and an ICRC slot");
_Static_assert(MRC_PAYLOAD_MAX(MRC_MTU) > 0, "MRC_MTU too small for a data packet");

/*
 * Trimming. A switch whose queue is above its trim threshold may trim a data
 * packet whose DSCP is TRIMMABLE or TRIMMABLE_RETX and whose UDP payload is
 * longer than MRC_TRIM_LEN. It keeps the first MRC_TRIM_LEN bytes of UDP
 * payload (all MRC headers of any data packet; the last 4 bytes stand in for
 * the ICRC slot), fixes the IPv4 total length, the UDP length and the IPv4
 * checksum, and rewrites the DSCP to MRC_DSCP_TRIMMED (MRC_DSCP_TRIMMED_LASTHOP
 * on a port facing a host), keeping the ECN bits. The DSCP puts the header in
 * the control class for the rest of the path and is how the receiver knows
 * it was trimmed; it answers NACK(TRIMMED or TRIMMED_LASTHOP). RETH.dmalen
 * still says how long the payload was.
 */

#endif /* MRC_WIRE_H */
