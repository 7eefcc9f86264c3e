/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_window.h: the send window of a QP (docs/nic-program.md, "Send QPs" and
 * "Receive QPs", OCP attributes): the PSN range the engine may have in flight
 * (mpr, dynamic MPR, cwnd) and max_wimm, the WRITE_WITH_IMM WQEs it may have
 * started and not completed. Callers hold sq->lock.
 */
#ifndef MRC_NIC_WINDOW_H
#define MRC_NIC_WINDOW_H

#include "nic_common.h"

/* PSNs acknowledged above snd_una: the acked ring's bits. */
static __always_inline __u32 sq_acked_count(const struct nic_sq *sq)
{
	__u32 n = 0;
	int i;

#pragma unroll
	for (i = 0; i < NIC_BITMAP_WORDS; i++)
		n += popcount64(sq->acked[i]);
	return n;
}

/*
 * The PSN range the engine may have in flight: mpr x 128, or, with dynamic
 * MPR (MRC_QP_CAP_DYNAMIC_MPR), the smaller of that and the MPR the peer's
 * latest ACK advertised. Until an ACK has advertised one (0), the smallest
 * MPR, 1: a first burst beyond the peer's window would be NACKed
 * PSN_OOR_WINDOW and resent over and over while its window catches up.
 */
static __always_inline __u32 sq_window(const struct nic_sq *sq)
{
	__u32 mpr = sq->mpr, peer = sq->dyn_mpr ? sq->peer_mpr : mpr;

	if (peer == 0)
		peer = 1;
	if (peer < mpr)
		mpr = peer;
	return mpr * MRC_MPR_UNIT;
}

/* No room for a new PSN: the range [snd_una, snd_nxt) fills the window (or
 * is negative), or, with a cwnd below the window, its PSNs not acknowledged
 * fill the cwnd (0: no cwnd). */
static __always_inline int sq_window_full(const struct nic_sq *sq)
{
	__u32 window = sq_window(sq), cwnd = sq->cwnd;
	__s32 range = MRC_PSN_DIFF(sq->snd_nxt, sq->snd_una);

	return range < 0 || range >= (__s32)window ||
	       (cwnd && cwnd < window && (__u32)range - sq_acked_count(sq) >= cwnd);
}

/* max_wimm: may the engine plan the segment at byte `off` of a WQE of this
 * opcode? Only the first segment of a WRITE_WITH_IMM is held (counted in
 * wimm_full) while max_wimm of them are out (0: no bound); one that may
 * start is counted out. */
static __always_inline int sq_wimm_start(struct nic_sq *sq, __u32 opcode, __u32 off)
{
	if (off != 0 || opcode != MRC_OP_WRITE_IMM)
		return 1;
	if (sq->max_wimm && sq->wimm_out >= sq->max_wimm) {
		sq->wimm_full++; /* held until a WRITE_WITH_IMM completes */
		return 0;
	}
	sq->wimm_out++;
	return 1;
}

/* max_wimm: a completed WQE of this opcode; a WRITE_WITH_IMM frees its place
 * (branch-free: engine_complete's loop keeps one path for the verifier). */
static __always_inline void sq_wimm_done(struct nic_sq *sq, __u32 opcode)
{
	sq->wimm_out -= opcode == MRC_OP_WRITE_IMM && sq->wimm_out;
}

#endif /* MRC_NIC_WINDOW_H */
