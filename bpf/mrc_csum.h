/* SPDX-License-Identifier: Apache-2.0 */
/* mrc_csum.h: Internet checksum helpers shared by the programs. */
#ifndef MRC_CSUM_H
#define MRC_CSUM_H

#include <uapi/linux/ip.h>

/* Fold a 32-bit sum and complement it: the checksum of a 20-byte IPv4
 * header (IHL 5) whose check field is 0. Unrolled: no loop for the verifier. */
static __always_inline __u16 ipv4_csum(const void *hdr)
{
	const __u16 *w = hdr;
	__u32 sum = 0;
	int i;

#pragma unroll
	for (i = 0; i < (int)(sizeof(struct iphdr) / 2); i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

/* Fold bpf_csum_diff's running sum to the 16-bit one's complement checksum. */
static __always_inline __u16 csum_fold(__s64 sum)
{
	__u64 s = (__u64)sum;

	s = (s & 0xFFFF) + (s >> 16);
	s = (s & 0xFFFF) + (s >> 16);
	s = (s & 0xFFFF) + (s >> 16);
	return ~s & 0xFFFF;
}

#endif /* MRC_CSUM_H */
