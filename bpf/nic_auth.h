/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_auth.h: the optional per-packet MAC (docs/nic-program.md, "Per-packet
 * authentication"): SipHash-2-4 with the QP's key over the header fields a
 * packet's receiver acts on, folded to 32 bits into the ICRC slot. The same
 * words as mrc_nic/nic/auth.py, which the tests check against.
 */
#ifndef MRC_NIC_AUTH_H
#define MRC_NIC_AUTH_H

#include <linux/types.h>

#define SIP_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static __always_inline void sip_round(__u64 *v0, __u64 *v1, __u64 *v2, __u64 *v3)
{
	*v0 += *v1; *v1 = SIP_ROTL(*v1, 13); *v1 ^= *v0; *v0 = SIP_ROTL(*v0, 32);
	*v2 += *v3; *v3 = SIP_ROTL(*v3, 16); *v3 ^= *v2;
	*v0 += *v3; *v3 = SIP_ROTL(*v3, 21); *v3 ^= *v0;
	*v2 += *v1; *v1 = SIP_ROTL(*v1, 17); *v1 ^= *v2; *v2 = SIP_ROTL(*v2, 32);
}

static __always_inline void sip_word(__u64 *v0, __u64 *v1, __u64 *v2, __u64 *v3, __u64 m)
{
	*v3 ^= m;
	sip_round(v0, v1, v2, v3);
	sip_round(v0, v1, v2, v3);
	*v0 ^= m;
}

/* SipHash-2-4 of the 40-byte message w[0..5) (little-endian words), folded
 * to 32 bits. Straight-line code: no branch for the verifier to walk. */
static __always_inline __u32 sip_mac5(__u64 k0, __u64 k1, const __u64 *w)
{
	__u64 v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
	__u64 v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
	int i;

#pragma unroll
	for (i = 0; i < 5; i++)
		sip_word(&v0, &v1, &v2, &v3, w[i]);
	sip_word(&v0, &v1, &v2, &v3, 40ULL << 56); /* the length block: 40 bytes, no tail */
	v2 ^= 0xff;
#pragma unroll
	for (i = 0; i < 4; i++)
		sip_round(&v0, &v1, &v2, &v3);
	v0 ^= v1 ^ v2 ^ v3;
	return (__u32)v0 ^ (__u32)(v0 >> 32);
}

static __always_inline __u64 mac_bth_word(__u32 opcode, __u32 qpn, __u32 psn)
{
	return (__u64)opcode << 56 | (__u64)(qpn & MRC_BTH_QPN_MASK) << 24 | (psn & MRC_BTH_PSN_MASK);
}

/* A data packet's MAC: everything that decides where and whether it lands. */
static __always_inline __u32 data_mac(const __u64 *key, __u32 opcode, __u32 qpn, __u32 psn,
				      __u64 va, __u32 rkey, __u32 dmalen, __u32 flags_msn,
				      __u32 msg_off, __u32 imm)
{
	__u64 w[5] = {
		mac_bth_word(opcode, qpn, psn),
		va,
		(__u64)rkey << 32 | dmalen,
		(__u64)flags_msn << 32 | msg_off,
		imm,
	};

	return sip_mac5(key[0], key[1], w);
}

/* A SACK's or NACK's MAC: everything the sender acts on. */
static __always_inline __u32 ack_mac(const __u64 *key, __u32 qpn, __u32 psn, __u32 cum,
				     __u32 base, __u64 bits, __u32 syndrome, __u32 reason,
				     __u32 flags, __u32 echo_ev, __u32 ports)
{
	__u64 w[5] = {
		mac_bth_word(MRC_OP_ACK, qpn, psn),
		(__u64)(cum & MRC_ACK_CUM_PSN_MASK) << 32 | (base & MRC_ACK_SACK_PSN_MASK),
		bits,
		(__u64)(syndrome & 0xff) << 56 | (__u64)(reason & 0xff) << 48 |
			(__u64)(flags & 0xff) << 40 | (__u64)(echo_ev & 0xffff) << 24,
		ports,
	};

	return sip_mac5(key[0], key[1], w);
}

/* A PROBE's or PROBE_REPLY's MAC: the EV it names, the time it echoes and
 * the port bitmap the receiver records, so a forged reply cannot bring an
 * ASSUMED_BAD EV back. The opcode is in it: a captured PROBE is no reply. */
static __always_inline __u32 probe_mac(const __u64 *key, __u32 opcode, __u32 qpn, __u32 psn,
				       __u64 tx_ts, __u32 ev, __u32 flags, __u32 ports)
{
	__u64 w[5] = {
		mac_bth_word(opcode, qpn, psn),
		tx_ts,
		(__u64)(ev & 0xffff) << 48 | (__u64)(flags & 0xff) << 40 | ports,
		0,
		0,
	};

	return sip_mac5(key[0], key[1], w);
}

#endif /* MRC_NIC_AUTH_H */
