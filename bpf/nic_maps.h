/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nic_maps.h: the NIC program's maps. Lab-wide (the program is compiled once
 * per lab and attached to every host port), keyed by what is unique in a lab:
 * QP numbers, region ids, host ids. mrc_nic/nic pins the pinned ones under
 * /sys/fs/bpf/mrc-nic/<lab>/; "scratch" maps are per-CPU and BPF's alone.
 */
#ifndef MRC_NIC_MAPS_H
#define MRC_NIC_MAPS_H

#include "nic_structs.h"

/* Receive state per QP, slot QPN & (NIC_MAX_QPS - 1): user space sets it up, BPF owns it after. */
BPF_ARRAY(nic_rx_qps, struct nic_rq, NIC_MAX_QPS);
/* The owner of each nic_rx_qps slot (QPN | NIC_RQ_TAG_USED, 0: free); user space only. */
BPF_ARRAY(nic_rx_slots, __u32, NIC_MAX_QPS);
#ifndef BPF_F_INNER_MAP
#define BPF_F_INNER_MAP (1U << 12) /* linux/bpf.h: an inner map of any max_entries */
#endif
/* The daemons' registered memory, NIC_MR_ELEM_SIZE bytes per element (every
 * region of the lab that is not an application's): the receiver writes, user
 * space mmaps. BPF reaches it only as an entry of nic_mems. */
BPF_F_TABLE("array", __u32, struct nic_mr_elem, nic_mr, NIC_MR_ELEMS,
	    BPF_F_MMAPABLE | BPF_F_INNER_MAP);
/* The template of a region's memory: an array of elements of any length
 * (BPF_F_INNER_MAP); never an entry of nic_mems. */
BPF_F_TABLE("array", __u32, struct nic_mr_elem, nic_mem_template, 1,
	    BPF_F_MMAPABLE | BPF_F_INNER_MAP);
/* The memory of each region, key = region id: nic_mr for a daemon's region, a
 * map of its own for an application's MR (docs/api.md, "Isolation"), whose
 * fd only the session that registered it gets; user space only. */
BPF_TABLE("array_of_maps$nic_mem_template", __u32, int, nic_mems, NIC_MAX_REGIONS);
/* Region table, key = region id; user space only. */
BPF_ARRAY(nic_regions, struct nic_region, NIC_MAX_REGIONS);
/* Receive locks, entry QPN % NIC_RX_LOCKS; BPF only (not pinned). */
BPF_ARRAY(nic_rx_locks, struct nic_rx_lock, NIC_RX_LOCKS);
/* Port bitmap per host id (bit p: plane p up), copied into every answer; user space. */
BPF_ARRAY(nic_port_up, __u32, NIC_MAX_HOSTS);
/* Outcome counters (enum nic_counter), per CPU; BPF adds, user space sums. */
BPF_PERCPU_ARRAY(nic_counters, __u64, NIC_CNT_MAX);
/* Payload bytes placed per time bin, per CPU; the receiver writes. */
BPF_PERCPU_ARRAY(nic_rx_timeline, struct nic_timeline_bin, NIC_TIMELINE_BINS);
/* Scratch: a payload that does not start on an element, on its way (struct nic_copy_buf). */
BPF_PERCPU_ARRAY(nic_copy_scratch, struct nic_copy_buf, 1);
/* Scratch: completions gathered under a receive lock, sent after it. */
BPF_PERCPU_ARRAY(nic_cqe_scratch, struct nic_cqe_batch, 1);
/* Send state per QP, key = QPN: user space sets it up, BPF owns it after. */
BPF_HASH(nic_tx_qps, __u32, struct nic_sq, NIC_MAX_QPS);
/* Per-EV state, key = (QPN, EV value): user space creates, both change state. */
BPF_HASH(nic_evs, struct nic_ev_key, struct nic_ev, NIC_MAX_EVS);
/* PSN -> EV tables of the send QPs (struct nic_sq.ring): the engine writes, mmapable. */
BPF_F_TABLE("array", __u32, struct nic_tx_ring, nic_tx_ring, NIC_TX_RINGS, BPF_F_MMAPABLE);
/* Scratch: what the locked part of rx_ack decided. */
BPF_PERCPU_ARRAY(nic_ack_scratch, struct nic_ack_scratch, 1);
/* Events to the daemon (struct nic_event and the other NIC_EV_* records); BPF writes. */
BPF_RINGBUF_OUTPUT(nic_events, NIC_EVENT_PAGES);
/* The template of a CQ's ring buffer: never written, never an entry of
 * nic_cq_rings; its size (NIC_CQ_RING_PAGES) is what applications create theirs with. */
BPF_RINGBUF_OUTPUT(nic_cq_template, NIC_CQ_RING_PAGES);
/* Completion queues (verbs), index CQ - 1: ring buffers that applications create
 * and poll; user space puts their fds here, BPF writes completion records.
 * (BPF_ARRAY_OF_MAPS with a __u32 key: the macro's is int.) */
BPF_TABLE("array_of_maps$nic_cq_template", __u32, int, nic_cq_rings, NIC_MAX_CQS);
/* Completions each CQ lost (index CQ - 1): its ring was full. Mmapable: the
 * library sees its CQ overrun (IBV_EVENT_CQ_ERR) without a syscall. */
BPF_F_TABLE("array", __u32, __u64, nic_cq_lost, NIC_MAX_CQS, BPF_F_MMAPABLE);
/* The template of a send queue: one struct nic_wq, mmapable (user space posts
 * WQEs); never an entry of nic_wqs. */
BPF_F_TABLE("array", __u32, struct nic_wq, nic_wq_template, 1, BPF_F_MMAPABLE);
/* The send queue of each send QP, key = struct nic_sq.ring: a map of its own,
 * whose fd only the QP's session gets (docs/api.md, "Isolation"); user space only. */
BPF_TABLE("array_of_maps$nic_wq_template", __u32, int, nic_wqs, NIC_TX_RINGS);
/* Entry 0: nic_xdp, where the applications' doorbell program (nic_doorbell)
 * hands its frames on; user space (the loader) only. */
BPF_PROG_ARRAY(nic_doorbell_jump, 1);
/* Host port addresses, key = host * NIC_MAX_PLANES + plane: the data packets' MACs; user space. */
BPF_ARRAY(nic_ports, struct nic_port, NIC_MAX_HOSTS * NIC_MAX_PLANES);
/* Host ports as devices (ifindex), same key: where the engine redirects; user space. */
BPF_DEVMAP(nic_tx_ports, NIC_MAX_HOSTS * NIC_MAX_PLANES);
/* ACK fan-out (docs/nic-program.md, "ACK coalescing"): entry host * NIC_FANOUT_MAX
 * + k - 1 is a devmap whose first k entries are the host's `doorbell` device
 * (written by user space from the host's namespace); a broadcast redirect to it
 * makes k kicks. The template is only the inner maps' shape. */
BPF_TABLE("devmap", __u32, __u32, nic_fanout_template, NIC_FANOUT_MAX);
BPF_TABLE("array_of_maps$nic_fanout_template", __u32, int, nic_fanout,
	  NIC_MAX_HOSTS * NIC_FANOUT_MAX);
/* Reverse EV sets, slot QPN & (NIC_MAX_QPS - 1) as nic_rx_qps: the receiver's daemon writes, BPF reads. */
BPF_ARRAY(nic_rev_evs, struct nic_rev_ev_set, NIC_MAX_QPS);
/* PROBE_REPLYs for reverse EVs, same slots: BPF writes, the receiver's daemon reads. */
BPF_ARRAY(nic_rev_probes, struct nic_rev_probes, NIC_MAX_QPS);
/* Endpoint PROBE_REPLYs per host id (connectionless EV probes): BPF writes, the host's daemon reads. */
BPF_ARRAY(nic_ep_probes, struct nic_ep_probes, NIC_MAX_HOSTS);
/* Per host id: its daemon's word to the NIC (DISABLED ports, its EV event queue); user space writes. */
BPF_ARRAY(nic_host_ctl, struct nic_host_ctl, NIC_MAX_HOSTS);
/* Port status updates per host id, by peer (struct nic_peer_ports): BPF writes, the host's daemon reads. */
BPF_ARRAY(nic_peer_ports, struct nic_peer_ports, NIC_MAX_HOSTS);
/* Scratch: what the locked part of the engine decided. */
BPF_PERCPU_ARRAY(nic_tx_scratch, struct nic_tx_scratch, 1);
/* Scratch: a timeout kick's lost PSNs and their EVs, marked after the QP's lock. */
BPF_PERCPU_ARRAY(nic_timeout_scratch, struct nic_timeout_scratch, 1);

#endif /* MRC_NIC_MAPS_H */
