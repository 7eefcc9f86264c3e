/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mrc_parse.h: header parsing shared by every program (nic_xdp.c,
 * switch_port.c), in the manner of xdp-tutorial's parsing_helpers.h.
 *
 * A struct hdr_cursor is a position in the frame. Every parse_<hdr>(c,
 * data_end, &hdr) has one contract:
 *   - if the whole header lies before data_end: *hdr points at it, the cursor
 *     moves just past it, and it returns 0;
 *   - otherwise it returns -1 and leaves *hdr and the cursor as they were.
 * They check bounds only, never field values (parse_iphdr excepted: it needs
 * IHL to find the header's end, and refuses IHL < 5). Fields stay in network
 * byte order. The checks are what lets the verifier accept every later read.
 */
#ifndef MRC_PARSE_H
#define MRC_PARSE_H

#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>

#include "mrc_wire.h"

struct hdr_cursor {
	void *pos;
};

static __always_inline int parse_ethhdr(struct hdr_cursor *c, void *data_end,
					struct ethhdr **hdr)
{
	struct ethhdr *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

/* IPv4 header with its options. */
static __always_inline int parse_iphdr(struct hdr_cursor *c, void *data_end, struct iphdr **hdr)
{
	struct iphdr *ip = c->pos;
	__u32 hlen;

	if ((void *)(ip + 1) > data_end)
		return -1;
	hlen = ip->ihl * 4;
	if (hlen < sizeof(*ip))
		return -1;
	if (c->pos + hlen > data_end)
		return -1;
	c->pos += hlen;
	*hdr = ip;
	return 0;
}

static __always_inline int parse_udphdr(struct hdr_cursor *c, void *data_end,
					struct udphdr **hdr)
{
	struct udphdr *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

static __always_inline int parse_bth(struct hdr_cursor *c, void *data_end, struct mrc_bth **hdr)
{
	struct mrc_bth *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

static __always_inline int parse_reth(struct hdr_cursor *c, void *data_end, struct mrc_reth **hdr)
{
	struct mrc_reth *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

static __always_inline int parse_immdt(struct hdr_cursor *c, void *data_end,
				       struct mrc_immdt **hdr)
{
	struct mrc_immdt *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

static __always_inline int parse_data_ext(struct hdr_cursor *c, void *data_end,
					  struct mrc_data_ext **hdr)
{
	struct mrc_data_ext *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

static __always_inline int parse_aeth(struct hdr_cursor *c, void *data_end, struct mrc_aeth **hdr)
{
	struct mrc_aeth *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

static __always_inline int parse_ack_ext(struct hdr_cursor *c, void *data_end,
					 struct mrc_ack_ext **hdr)
{
	struct mrc_ack_ext *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

static __always_inline int parse_probe_ext(struct hdr_cursor *c, void *data_end,
					   struct mrc_probe_ext **hdr)
{
	struct mrc_probe_ext *h = c->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	c->pos = h + 1;
	*hdr = h;
	return 0;
}

#endif /* MRC_PARSE_H */
