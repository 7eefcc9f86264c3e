#!/usr/bin/env python3
"""Benchmark of the NIC fast path against peers measured in the same run (issue 3).

Absolute figures drift on this shared 2-core machine; what holds is the ratio
to a peer measured side by side, on the same links, with the same traffic, in
the same run (docs/design.md). Each part runs its cases in rounds,
interleaved, and reports medians.

1. SACK generation vs a bare XDP_TX reflector. Two namespaces zbfp-<pid>a/b
   and one veth pair. On b, in turn: the NIC program (bpf/nic_xdp.c) with a
   receive QP that places and SACKs the data (XDP_TX), and a minimal reflector
   (swap MACs, IPs and UDP ports, XDP_TX) compiled here with bcc. On a: a
   counter that counts and drops what comes back. Traffic: one MRC data frame
   (mrc_nic.nic.wire.data_packet; 64 B, 1 KiB and 3 KiB payloads, the program
   and the veth at MTU 3200) injected at a by an XDP program run with
   BPF_PROG_RUN on live frames
   (BPF_F_TEST_XDP_LIVE_FRAMES): it writes the template, stamps the PSN and
   RETH address and XDP_TXes it into the veth, for a fixed time (a timer
   signal ends the run). The injecting thread is pinned to one CPU, and the
   veth NAPI work it triggers runs there too, so each figure is the packet
   rate of the whole chain (inject -> program on b -> count on a) on one
   core; "extra ns/pkt" is the NIC's added cost per packet over the reflector.
   Two NIC cases:
     - new PSNs: consecutive PSNs from the QP's cum_psn, each placed (copied
       into the region) and SACKed; the counters prove it (placed = sacked);
     - duplicate PSNs: PSNs below cum_psn, SACKed (DUP flag) but not placed:
       the same path minus the copy.
2. Single-QP WRITE goodput on the default lab's shape with uncapped links
   (netns/uncapped.toml, lab bfp<pid>) through mrc_nic.testkit.transfer.write (4
   planes, 128 EVs, byte-exact check), vs `iperf3 -u -b 0 -l SEG` (the same
   payload per packet, SEG = nic.seg_size of the lab's MTU) on one plane
   between the same two hosts. Stretch peer:
   MPTCP with 4 subflows, one per plane (iperf3 3.12 has no --mptcp and
   mptcpize is not installed here, so the peer is a bulk sender and receiver
   on IPPROTO_MPTCP sockets, 1 MiB per sendall and 4 MiB per recv_into: the
   per-packet work is the kernel's, as with iperf3). CPU is the busy time of all CPUs
   from /proc/stat over each timed section (system-wide: other load on the
   machine counts too).

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_fastpath.py [--quick] [--json FILE] [--only sack|write]

Everything it makes carries this process's id (namespaces zbfp-<pid>a/b,
labs bfp<pid> and pins bfp<pid>x) and is removed by exact name, also on
error or interruption. Every load loop is bounded in time.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import errno
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mrc_nic import nic, resources
from mrc_nic.kernel import bpfsys, cpustat, netns, xdp
from mrc_nic.nic import wire
from mrc_nic.testkit import transfer
from mrc_nic.workloads.benchkit import (
    exit_on_sigterm,
    log,
    median,
    own_lab,
    ratio,
    require_root,
)

PID = os.getpid()
MIB = 2**20

# The kernel's cap on frames per batch of a live-frames BPF_PROG_RUN
# (TEST_XDP_MAX_BATCH in net/bpf/test_run.c): a larger batch_size is E2BIG.

# ---- part 1: the helpers compiled with bcc ------------------------------------------

TMPL_MAX = 4096
CNT_FRAMES, CNT_BYTES, CNT_ACKS, CNT_DATA, CNT_FIRST_NS, CNT_LAST_NS = range(6)

HELPERS_C = r"""
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>

#define TMPL_MAX %(tmpl_max)d
#define OFF_BTH 42               /* Ethernet 14 + IPv4 20 + UDP 8 */
#define OFF_PSN (OFF_BTH + 9)    /* low 24 bits of BTH's A|PSN word */
#define OFF_VA (OFF_BTH + 12)    /* RETH.va, right after the 12-byte BTH */
#define MR_ELEMS %(mr_elems)d

/* The frame the injector sends, the PSN sequence (psn = seq %% span) and
 * the region elements one packet fills (its RETH.va steps by that many KiB). */
struct tmpl {
	u32 len;
	u32 span;
	u32 elems;
	u32 pad;
	u8 data[TMPL_MAX];
};
BPF_ARRAY(bfp_tmpl, struct tmpl, 1);
BPF_PERCPU_ARRAY(bfp_seq, u64, 1);
/* frames, bytes, ACK frames, data frames, first and last arrival (ns) */
BPF_PERCPU_ARRAY(bfp_cnt, u64, 6);

/*
 * Run with BPF_PROG_RUN on live frames (data_in: a 64-byte stub; ctx names
 * side a's veth). Live-frame pages are recycled with whatever the receiver
 * left in them (a SACK is 94 bytes), so every run rewrites the whole frame,
 * and sets its length with adjust_tail: a context that differs from the
 * stub's makes the kernel rebuild the xdp_frame from it (ctx_was_changed).
 */
int bfp_inject(struct xdp_md *ctx)
{
	u32 zero = 0;
	struct tmpl *t = bfp_tmpl.lookup(&zero);
	u64 *seq = bfp_seq.lookup(&zero);
	u64 len, va;
	u32 psn, span, elems;
	long cur;
	u8 *p, *end;
	int i;

	if (!t || !seq)
		return XDP_ABORTED;
	len = t->len;
	asm volatile("" : "+r"(len));
	if (len > TMPL_MAX)
		return XDP_ABORTED;
	asm volatile("" : "+r"(len));
	if (len < 64)
		return XDP_ABORTED;
	cur = (long)ctx->data_end - (long)ctx->data;
	if (cur != (long)len && bpf_xdp_adjust_tail(ctx, (int)((long)len - cur)))
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, t->data, len))
		return XDP_ABORTED;
	span = t->span ? t->span : 1;
	psn = (u32)(*seq %% span) & 0xffffff;
	*seq += 1;
	p = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (p + OFF_VA + 8 > end)
		return XDP_ABORTED;
	p[OFF_PSN] = psn >> 16;
	p[OFF_PSN + 1] = psn >> 8;
	p[OFF_PSN + 2] = psn;
	elems = t->elems ? t->elems : 1;
	va = (u64)(psn %% (MR_ELEMS / elems)) * elems * 1024;
#pragma unroll
	for (i = 0; i < 8; i++)
		p[OFF_VA + i] = va >> (56 - 8 * i);
	return XDP_TX;
}

/* The peer: a bare reflector. */
int bfp_reflect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	u8 mac[ETH_ALEN];
	u32 addr;
	u16 port;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	return XDP_TX;
}

static __always_inline void bump(u32 k, u64 v)
{
	u64 *c = bfp_cnt.lookup(&k);

	if (c)
		*c += v;
}

/* Side a: count what comes back (and what it is), then drop it. */
int bfp_count(struct xdp_md *ctx)
{
	u8 *p = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	u64 now = bpf_ktime_get_ns();
	u32 k = %(first)d;
	u64 *c = bfp_cnt.lookup(&k);

	if (c && !*c)
		*c = now;
	k = %(last)d;
	c = bfp_cnt.lookup(&k);
	if (c)
		*c = now;
	bump(%(frames)d, 1);
	bump(%(bytes)d, end - p);
	if (p + OFF_BTH + 1 <= end) {
		if (p[OFF_BTH] == 0x11)
			bump(%(acks)d, 1);
		else if (p[OFF_BTH] == 0x0a)
			bump(%(data)d, 1);
	}
	return XDP_DROP;
}
"""

# Part 1's receive QP and addresses (the NIC checks them: plane 0, host 0 -> host 1).
P1_RX_QPN = transfer.qpn(1)
P1_TX_QPN = transfer.qpn(0)
P1_REGION, P1_RKEY = 1, 0x1234
P1_MR_ELEMS = 1024  # 1 MiB region: va = (psn % (1024 / elems)) * elems KiB
P1_MTU = 3200  # the program's and the veth's: room for the 3 KiB payload case
P1_PAYLOADS = (64, 1024, nic.seg_size(P1_MTU))
P1_MPR = nic.MPR_MAX
P1_DUP_CUM = 2 * P1_MR_ELEMS  # dup case: cum_psn above every PSN sent (psn % 1024)
P1_STUB = bytes(64)

CASES = ("reflector", "nic_new", "nic_dup")
CASE_LABEL = {
    "reflector": "reflector (XDP_TX)",
    "nic_new": "NIC, new PSNs",
    "nic_dup": "NIC, duplicate PSNs",
}


# ---- small tools ------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


@contextlib.contextmanager
def pinned(cpu: int):
    """The calling thread on one CPU for the body."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# ---- part 1: SACK generation vs a reflector ------------------------------------------


class SackBench:
    """Two namespaces, one veth pair, the helpers and a NIC program of our own."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.ns_a, self.ns_b = f"zbfp-{PID}a", f"zbfp-{PID}b"
        self.pin_lab = f"bfp{PID}x"  # pins of our NIC program (no lab is brought up)
        self._made: list[str] = []
        self._bpf: Any = None
        self._nic: nic.NicProgram | None = None
        self._pinned = False  # our NIC program's pins exist: remove them at close
        self._maps: nic.NicMaps | None = None
        self._on_b: int | None = None  # fd of the program attached on side b

    # -- setup and teardown --
    def __enter__(self) -> SackBench:
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _setup(self) -> None:
        from bcc import BPF
        from pyroute2 import IPRoute

        source = HELPERS_C % {
            "tmpl_max": TMPL_MAX,
            "mr_elems": P1_MR_ELEMS,
            "frames": CNT_FRAMES,
            "bytes": CNT_BYTES,
            "acks": CNT_ACKS,
            "data": CNT_DATA,
            "first": CNT_FIRST_NS,
            "last": CNT_LAST_NS,
        }
        self._bpf = BPF(text=source.encode())
        self.inject = self._bpf.load_func(b"bfp_inject", BPF.XDP)
        self.reflect = self._bpf.load_func(b"bfp_reflect", BPF.XDP)
        self.count = self._bpf.load_func(b"bfp_count", BPF.XDP)
        if nic.pin_dir(self.pin_lab).exists():
            raise FileExistsError(f"{nic.pin_dir(self.pin_lab)} exists: not ours, not touched")
        self._nic = nic.NicProgram.load(
            self.pin_lab,
            mr_elems=P1_MR_ELEMS,
            max_qps=16,
            max_regions=4,
            event_pages=4,
            max_evs=16,
            tx_rings=2,
            mtu=P1_MTU,
        )
        self._pinned = True
        self._maps = nic.NicMaps.open(self.pin_lab)
        for ns in (self.ns_a, self.ns_b):
            netns.create(ns)
            self._made.append(ns)
        self._ipa = IPRoute(netns=self.ns_a, flags=0)
        self._ipb = IPRoute(netns=self.ns_b, flags=0)
        fd_b = os.open(netns.path(self.ns_b), os.O_RDONLY)
        try:
            self._ipa.link(
                "add", ifname="bfpa", kind="veth", peer={"ifname": "bfpb", "net_ns_fd": fd_b}
            )
        finally:
            os.close(fd_b)
        self.if_a = self._ipa.link_lookup(ifname="bfpa")[0]
        self.if_b = self._ipb.link_lookup(ifname="bfpb")[0]
        for ipr, index in ((self._ipa, self.if_a), (self._ipb, self.if_b)):
            ipr.link("set", index=index, mtu=P1_MTU, state="up")
        # Side a counts and drops; an XDP program there is also what lets b's
        # XDP_TX into the veth through (docs/design.md).
        xdp.attach(self._ipa, self.if_a, self.count.fd)
        mac_a = self._ipa.get_links(self.if_a)[0].get_attr("IFLA_ADDRESS")
        mac_b = self._ipb.get_links(self.if_b)[0].get_attr("IFLA_ADDRESS")
        self.ends = wire.Endpoints(
            src_mac=mac_a, dst_mac=mac_b, src_ip="198.18.0.1", dst_ip="198.18.0.2"
        )
        self._maps.set_region(P1_REGION, first_elem=0, n_elems=P1_MR_ELEMS, rkey=P1_RKEY)
        self._maps.set_port_bitmap(1, 1)

    def close(self) -> None:
        for ipr in (getattr(self, "_ipa", None), getattr(self, "_ipb", None)):
            if ipr is not None:
                with contextlib.suppress(Exception):
                    ipr.close()
        for ns in self._made:  # the veth pair and its XDP programs go with them
            with contextlib.suppress(Exception):
                netns.remove(ns)
        self._made = []
        if self._maps is not None:
            self._maps.close()
            self._maps = None
        if self._nic is not None:
            self._nic.close()
            self._nic = None
        if self._pinned:
            nic.unpin(self.pin_lab)
            self._pinned = False
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None

    # -- one case --
    def frame(self, payload: int) -> bytes:
        data = bytes((i * 7 + 3) & 0xFF for i in range(payload))
        pkt = wire.data_packet(
            self.ends,
            ev=transfer.EV_BASE,
            dqpn=P1_RX_QPN,
            psn=0,
            va=0,
            rkey=P1_RKEY,
            payload=data,
            last=False,  # a middle packet of a long WRITE: no message slot
        )
        return bytes(pkt)

    def run(self, case: str, payload: int, seconds: float) -> dict[str, Any]:
        assert self._maps is not None and self._nic is not None
        fd = self.reflect.fd if case == "reflector" else self._nic.fd
        if self._on_b != fd:
            xdp.attach(self._ipb, self.if_b, fd)
            self._on_b = fd
        frame = self.frame(payload)
        table = self._bpf[b"bfp_tmpl"]
        value = table.Leaf()
        value.len = len(frame)
        value.span = P1_MR_ELEMS if case == "nic_dup" else 1 << 24
        value.elems = -(-payload // nic.MR_ELEM_SIZE)
        ctypes.memmove(ctypes.addressof(value.data), frame, len(frame))
        table[ctypes.c_int(0)] = value
        # The same QP for every case (the reflector ignores it): new PSNs start
        # at cum_psn 0; duplicates are all below cum_psn.
        self._maps.setup_rq(
            P1_RX_QPN,
            local_host=1,
            peer_host=0,
            peer_qpn=P1_TX_QPN,
            region=P1_REGION,
            mpr=P1_MPR,
            psn=P1_DUP_CUM if case == "nic_dup" else 0,
        )
        seq = self._bpf[b"bfp_seq"]
        seq[ctypes.c_int(0)] = seq.Leaf(*([0] * bpfsys.possible_cpus()))
        counts = self._bpf[b"bfp_cnt"]
        counts.clear()
        nic_before = self._maps.counters()
        ctx = bytes(bpfsys.XdpMd(data=0, data_end=len(P1_STUB), ingress_ifindex=self.if_a))
        cap = int(20e6 * seconds)  # more than the chain can do: the timer ends the run
        previous = signal.signal(signal.SIGALRM, lambda *_: None)
        interrupted = False
        try:
            with netns.entered(self.ns_a), pinned(self.cpu):  # ingress_ifindex is a's
                cpu0, t0 = cpustat.sample(), time.monotonic()
                signal.setitimer(signal.ITIMER_REAL, seconds)
                try:
                    bpfsys.prog_test_run(
                        self.inject.fd,
                        P1_STUB,
                        repeat=cap,
                        data_size_out=0,
                        ctx_in=ctx,
                        flags=bpfsys.BPF_F_TEST_XDP_LIVE_FRAMES,
                    )
                except OSError as e:
                    if e.errno != errno.EINTR:
                        raise
                    interrupted = True
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                wall, cpu1 = time.monotonic() - t0, cpustat.sample()
        finally:
            signal.signal(signal.SIGALRM, previous)
        time.sleep(0.02)  # the last NAPI polls
        got = [sum(counts[ctypes.c_int(k)]) for k in range(CNT_FIRST_NS)]
        firsts = [v for v in counts[ctypes.c_int(CNT_FIRST_NS)] if v]
        last = max(counts[ctypes.c_int(CNT_LAST_NS)])
        injected = sum(seq[ctypes.c_int(0)])
        after = self._maps.counters()
        moved = {k: after[k] - nic_before.get(k, 0) for k in after if after[k] != nic_before.get(k)}
        returned = got[CNT_FRAMES]
        span_ns = last - min(firsts) if firsts else 0
        mpps = returned / span_ns * 1e3 if returned > 1 and span_ns > 0 else None
        return {
            "case": case,
            "payload": payload,
            "frame_bytes": len(frame),
            "seconds": round(wall, 3),
            "timer_ended_it": interrupted,
            "injected": injected,
            "returned": returned,
            "returned_acks": got[CNT_ACKS],
            "returned_data": got[CNT_DATA],
            "returned_fraction": round(returned / injected, 4) if injected else None,
            "mpps": round(mpps, 4) if mpps is not None else None,
            "mpps_wall": round(returned / wall / 1e6, 4) if wall else None,
            "cpu_cores": cpustat.busy_cores(cpu0, cpu1),
            "nic_counters": moved,
        }


def nic_outcome(run: dict[str, Any]) -> str:
    """What the NIC did with the frames, from its counters."""
    c, n = run["nic_counters"], run["returned"] or 1
    if run["case"] == "reflector":
        return f"data back {run['returned_data'] / n:.0%}"
    nacks = sum(v for k, v in c.items() if k.startswith("nack_"))
    drops = sum(v for k, v in c.items() if k.startswith("drop_"))
    parts = [f"sack {c.get('sack', 0) / n:.0%}"]
    parts.append(f"placed {c.get('placed', 0) / n:.0%}")
    parts.append(f"dup {c.get('dup', 0) / n:.0%}")
    if nacks:
        parts.append(f"nack {nacks}")
    if drops:
        parts.append(f"drop {drops}")
    return " ".join(parts)


def part_sack(args: argparse.Namespace, log) -> dict[str, Any]:
    payloads = P1_PAYLOADS
    runs: list[dict[str, Any]] = []
    with SackBench(args.cpu) as bench:
        for r in range(args.rounds):
            for payload in payloads:
                order = CASES[r % 3 :] + CASES[: r % 3]  # rotate: no case always first
                for case in order:
                    run = bench.run(case, payload, args.sack_seconds)
                    run["round"] = r
                    runs.append(run)
                    log(
                        f"  sack round {r + 1}/{args.rounds} {payload:4d} B {case:9s} "
                        f"{fmt(run['mpps'], '.3f')} Mpps"
                    )
    summary = []
    for payload in payloads:
        row: dict[str, Any] = {"payload": payload}
        for case in CASES:
            mine = [x for x in runs if x["payload"] == payload and x["case"] == case]
            row["frame_bytes"] = mine[0]["frame_bytes"]
            best = sorted(mine, key=lambda x: x["mpps"] or 0)[len(mine) // 2]  # the median run
            row[case] = {
                "mpps": median([x["mpps"] for x in mine]),
                "mpps_runs": [x["mpps"] for x in mine],
                "returned_fraction": median([x["returned_fraction"] for x in mine]),
                "cpu_cores": median([x["cpu_cores"] for x in mine]),
                "outcome": nic_outcome(best),
            }
        ref = row["reflector"]["mpps"]
        for case in ("nic_new", "nic_dup"):
            mpps = row[case]["mpps"]
            row[case]["ratio"] = ratio(mpps, ref)
            row[case]["extra_ns_per_pkt"] = (
                round(1e3 / mpps - 1e3 / ref, 1) if mpps and ref else None
            )
        summary.append(row)
    return {
        "what": "packet rate of the chain inject(a) -> XDP on b -> XDP_TX -> count(a), one veth",
        "namespaces": [f"zbfp-{PID}a", f"zbfp-{PID}b"],
        "injector_cpu": args.cpu,
        "seconds_per_run": args.sack_seconds,
        "rounds": args.rounds,
        "target_ratio": 0.8,
        "rows": summary,
        "runs": runs,
    }


# ---- part 2: WRITE goodput vs iperf3 -u (and MPTCP) ----------------------------------


def mrc_write(topo, mpr: int, size: int, timeout: float, auth: bool = False) -> dict[str, Any]:
    res = transfer.write(topo, "h0", "h1", size, mpr=mpr, timeout=timeout, auth=auth)
    cpu = res.cpu_cores
    # What the EVs ended in: with no daemon yet, an EV marked ASSUMED_BAD stays so.
    states: dict[str, int] = {}
    with nic.NicMaps.open(topo.lab) as maps:
        for ev in transfer.ev_profile(topo.planes):
            state = maps.ev(transfer.qpn(0), ev).state
            name = state.name if isinstance(state, nic.EvState) else str(state)
            states[name] = states.get(name, 0) + 1
        acked = maps.sq(transfer.qpn(0)).stats["acked_pkts"] * nic.seg_size(topo.mtu)
    ok = res.complete and res.byte_exact
    pkts = -(-size // nic.seg_size(topo.mtu))
    return {
        "mpr": mpr,
        "bytes": size,
        "seconds": round(res.seconds, 4),
        "complete": res.complete,
        "byte_exact": res.byte_exact,
        "gbps": round(res.goodput_bps / 1e9, 3) if ok else None,
        "mpps": round(pkts / res.seconds / 1e6, 4) if ok else None,
        "acked_bytes": acked,
        "cpu_cores": cpu,
        "cpu_scope": "while packets flowed (transfer.write)",
        "per_plane_pkts": res.per_plane_pkts,
        "retransmits": res.retransmits,
        "top_up_kicks": res.top_up_kicks,
        "ev_states_after": states,
    }


def link_tx_bytes(ns: str, names: list[str]) -> dict[str, int]:
    out = {}
    with netns.iproute(ns) as ipr:
        for msg in ipr.get_links():
            name = msg.get_attr("IFLA_IFNAME")
            if name in names:
                out[name] = (msg.get_attr("IFLA_STATS64") or {}).get("tx_bytes", 0)
    return out


def iperf3_udp(topo, seconds: float, port: int) -> dict[str, Any]:
    """iperf3 -u -b 0 -l SEG from h0 to h1 on plane 0, SEG the payload of an MRC
    data packet on this lab (nic.seg_size: 3072 at MTU 3200); the receiver's figures."""
    h0, h1 = topo.netns("h0"), topo.netns("h1")
    src, dst = str(topo.host_address(0, 0)), str(topo.host_address(1, 0))
    duration = max(1, round(seconds))
    server = subprocess.Popen(
        ["ip", "netns", "exec", h1, "iperf3", "-s", "-1", "-B", dst, "-p", str(port), "-J"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client_cmd = ["ip", "netns", "exec", h0, "iperf3", "-c", dst, "-B", src, "-p", str(port)]
        seg = str(nic.seg_size(topo.mtu))
        client_cmd += ["-u", "-b", "0", "-l", seg, "-t", str(duration), "-J"]
        ports = [f"eth{p}" for p in range(topo.planes)]
        for attempt in range(10):  # until the server listens
            tx0 = link_tx_bytes(h0, ports)
            cpu0 = cpustat.sample()
            proc = subprocess.run(client_cmd, capture_output=True, text=True, timeout=duration + 20)
            cpu1 = cpustat.sample()
            report = json.loads(proc.stdout or "{}")
            if "error" not in report or attempt == 9:
                break
            time.sleep(0.2)
        tx1 = link_tx_bytes(h0, ports)
        if "error" in report or "end" not in report:
            return {"error": report.get("error") or proc.stderr.strip() or "no report"}
        end = report["end"]
        rcv = end.get("sum_received") or end["sum"]
        got = rcv["packets"] - rcv["lost_packets"]
        secs = rcv["seconds"]
        return {
            "seconds": round(secs, 3),
            "gbps": round(rcv["bits_per_second"] / 1e9, 3),
            "mpps": round(got / secs / 1e6, 4),
            "lost_percent": round(rcv["lost_percent"], 3),
            "sent_gbps": round(end.get("sum_sent", end["sum"])["bits_per_second"] / 1e9, 3),
            "cpu_cores": cpustat.busy_cores(cpu0, cpu1),
            "iperf3_cpu_percent": end.get("cpu_utilization_percent"),
            "tx_bytes_per_port": {k: tx1[k] - tx0.get(k, 0) for k in tx1},
        }
    finally:
        if server.poll() is None:
            server.kill()  # our own iperf3 server, by its pid
        server.wait(timeout=10)


IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
SOL_MPTCP, MPTCP_INFO = 284, 1


def _mptcp_server(port: int, seconds: float) -> dict[str, Any]:
    """Runs in h1's namespace: accept one MPTCP connection, read it to EOF.

    The listener is on every address: the subflows h0 opens to the addresses
    h1 announced (MP_JOIN SYNs) look the listener up by their own address
    and get a reset from one bound to the plane-0 address only."""
    deadline = time.monotonic() + seconds + 15
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(1)
        s.settimeout(10)
        conn, _ = s.accept()
        with conn:
            conn.settimeout(5)
            buf = bytearray(4 * MIB)
            total, first = 0, None
            while time.monotonic() < deadline:
                n = conn.recv_into(buf)
                if not n:
                    break
                if first is None:
                    first = time.monotonic()
                total += n
            end = time.monotonic()
    return {"bytes": total, "seconds": end - first if first else 0.0}


def _mptcp_client(src: str, dst: str, port: int, seconds: float) -> dict[str, Any]:
    """Runs in h0's namespace: send for `seconds`, then close and wait for EOF."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP) as s:
        s.bind((src, 0))
        s.settimeout(5)
        for attempt in range(25):  # until the server listens
            try:
                s.connect((dst, port))
                break
            except ConnectionRefusedError:
                if attempt == 24:
                    raise
                time.sleep(0.1)
        chunk = memoryview(bytes(MIB))
        sent, stop = 0, time.monotonic() + seconds
        subflows = 0
        while time.monotonic() < stop:
            s.sendall(chunk)
            sent += len(chunk)
            with contextlib.suppress(OSError):  # extra subflows (the initial one not counted)
                subflows = max(subflows, s.getsockopt(SOL_MPTCP, MPTCP_INFO, 4)[0])
        s.shutdown(socket.SHUT_WR)
        s.settimeout(15)
        while s.recv(4096):
            pass
    return {"bytes": sent, "subflows": subflows + 1}


def mptcp_setup(topo) -> list[str]:
    """Limits on both hosts; h1 announces its plane 1..3 addresses (ADD_ADDR), so
    h0 opens one subflow per plane. (Subflow endpoints on h0 would aim at h1's
    plane-0 address, which is only on-link on plane 0: h0's routes are the
    connected /24s, one per plane.)"""
    steps = []
    for node in ("h0", "h1"):
        steps.append(["ip", "mptcp", "limits", "set", "subflow", "4", "add_addr_accepted", "4"])
        steps[-1][:0] = ["ip", "netns", "exec", topo.netns(node)]
    for p in range(1, topo.planes):
        address = str(topo.host_address(1, p))
        steps.append(["ip", "mptcp", "endpoint", "add", address, "dev", f"eth{p}", "signal"])
        steps[-1][:0] = ["ip", "netns", "exec", topo.netns("h1")]
    done = []
    for cmd in steps:
        subprocess.run(cmd, check=True, capture_output=True, timeout=10)
        done.append(" ".join(cmd[4:]))
    return done


def mptcp_run(topo, seconds: float, port: int) -> dict[str, Any]:
    h0, h1 = topo.netns("h0"), topo.netns("h1")
    src, dst = str(topo.host_address(0, 0)), str(topo.host_address(1, 0))
    ports = [f"eth{p}" for p in range(topo.planes)]
    server = netns.start_in(h1, _mptcp_server, port, seconds)
    client = None
    try:
        tx0, cpu0 = link_tx_bytes(h0, ports), cpustat.sample()
        client = netns.start_in(h0, _mptcp_client, src, dst, port, seconds)
        sent = client.result(timeout=seconds + 30)
        cpu1, tx1 = cpustat.sample(), link_tx_bytes(h0, ports)
        got = server.result(timeout=30)
        client = server = None
    finally:
        for child in (client, server):  # only if it did not report: ours, by pid
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(child.pid, 0)
                with contextlib.suppress(OSError):
                    os.close(child._fd)
    secs = got["seconds"]
    return {
        "seconds": round(secs, 3),
        "gbps": round(got["bytes"] * 8 / secs / 1e9, 3) if secs else None,
        "subflows": sent["subflows"],
        "cpu_cores": cpustat.busy_cores(cpu0, cpu1),
        "tx_bytes_per_port": {k: tx1[k] - tx0.get(k, 0) for k in tx1},
    }


def mptcp_tooling() -> str:
    help_text = subprocess.run(
        ["iperf3", "--help"], capture_output=True, text=True, timeout=10
    ).stdout
    version = subprocess.run(
        ["iperf3", "--version"], capture_output=True, text=True, timeout=10
    ).stdout.split("\n")[0]
    has_flag = "--mptcp" in help_text
    has_mptcpize = shutil.which("mptcpize") is not None
    return (
        f"{version.strip()}: --mptcp {'present' if has_flag else 'absent'}; "
        f"mptcpize {'installed' if has_mptcpize else 'not installed'}; peer used: "
        "bulk sender/receiver on IPPROTO_MPTCP sockets (Python, 1 MiB sendall / 4 MiB recv_into)"
    )


def part_write(args: argparse.Namespace, log) -> dict[str, Any]:
    from mrc_nic.lab import topology

    name = f"bfp{PID}"
    topo = topology.load(resources.TOPOLOGY_DIR / "uncapped.toml", lab=name)
    mprs = [m for m in args.mprs if m <= nic.MPR_MAX]
    why = f"above MPR_MAX = {nic.MPR_MAX} (mrc_nic/nic/: a {nic.BITMAP_BITS}-PSN bitmap)"
    skipped = [{"mpr": m, "reason": why} for m in args.mprs if m > nic.MPR_MAX]
    out: dict[str, Any] = {
        "lab": name,
        "topology": "netns/uncapped.toml",
        "mtu": topo.mtu,
        "seg": nic.seg_size(topo.mtu),  # payload per packet, MRC's and iperf3's
        "size_bytes": args.size_mib * MIB,
        "rounds": args.rounds,
        "mpr_skipped": skipped,
        "iperf3_seconds": args.peer_seconds,
    }
    mrc_runs: list[dict[str, Any]] = []
    udp_runs: list[dict[str, Any]] = []
    mp_runs: list[dict[str, Any]] = []
    mptcp_note = None
    with own_lab(topo) as up_seconds:  # never takes down a lab this run did not make
        out["lab_up_seconds"] = round(up_seconds, 2)
        log(f"  lab {name} up in {out['lab_up_seconds']} s")
        if not args.no_mptcp:
            try:
                mptcp_note = {"tooling": mptcp_tooling(), "config": mptcp_setup(topo)}
            except (subprocess.SubprocessError, OSError) as e:
                mptcp_note = {"skipped": f"MPTCP setup failed: {e}"}
        else:
            mptcp_note = {"skipped": "--no-mptcp"}
        for r in range(args.rounds):
            for mpr in mprs:
                run = mrc_write(topo, mpr, args.size_mib * MIB, args.write_timeout, args.auth)
                run["round"] = r
                mrc_runs.append(run)
                log(
                    f"  write round {r + 1}/{args.rounds} mpr {mpr}: "
                    f"{fmt(run['gbps'])} Gbit/s in {run['seconds']} s, "
                    f"complete {run['complete']}, exact {run['byte_exact']}"
                )
            run = iperf3_udp(topo, args.peer_seconds, 5201 + r)
            run["round"] = r
            udp_runs.append(run)
            log(f"  iperf3 -u round {r + 1}/{args.rounds}: {fmt(run.get('gbps'))} Gbit/s")
            if "skipped" not in mptcp_note:
                try:
                    run = mptcp_run(topo, args.peer_seconds, 6201 + r)
                except Exception as e:  # reported, not fatal: a stretch peer
                    run = {"error": f"{type(e).__name__}: {e}"}
                run["round"] = r
                mp_runs.append(run)
                log(f"  mptcp round {r + 1}/{args.rounds}: {fmt(run.get('gbps'))} Gbit/s")
    rows = []
    for mpr in mprs:
        mine = [x for x in mrc_runs if x["mpr"] == mpr]
        ok = [x for x in mine if x["complete"] and x["byte_exact"]]
        rows.append(
            {
                "peer": f"mrc_mpr{mpr}",
                "gbps": median([x["gbps"] for x in ok]),
                "mpps": median([x["mpps"] for x in ok]),
                "cpu_cores": median([x["cpu_cores"] for x in ok]),
                "complete": f"{len(ok)}/{len(mine)}",
                "retransmits": median([x["retransmits"] for x in ok]),
            }
        )
    udp_ok = [x for x in udp_runs if "error" not in x]
    udp = {
        "peer": "iperf3_udp",
        "gbps": median([x["gbps"] for x in udp_ok]),
        "mpps": median([x["mpps"] for x in udp_ok]),
        "cpu_cores": median([x["cpu_cores"] for x in udp_ok]),
        "lost_percent": median([x["lost_percent"] for x in udp_ok]),
        "complete": f"{len(udp_ok)}/{len(udp_runs)}",
    }
    mp_ok = [x for x in mp_runs if "error" not in x]
    mp = {
        "peer": "mptcp_4_subflows",
        "gbps": median([x["gbps"] for x in mp_ok]),
        "cpu_cores": median([x["cpu_cores"] for x in mp_ok]),
        "subflows": median([x["subflows"] for x in mp_ok]),
        "complete": f"{len(mp_ok)}/{len(mp_runs)}",
    }
    for row in rows:
        row["ratio_vs_iperf3_udp"] = ratio(row["gbps"], udp["gbps"])
        row["ratio_vs_mptcp"] = ratio(row["gbps"], mp["gbps"])
    out.update(
        {
            "workarounds": [],
            "target_ratio_vs_iperf3_udp": 1.0,
            "mrc": rows,
            "iperf3_udp": udp,
            "mptcp": mp,
            "mptcp_setup": mptcp_note,
            "runs": {"mrc": mrc_runs, "iperf3_udp": udp_runs, "mptcp": mp_runs},
        }
    )
    return out


# ---- output ------------------------------------------------------------------------


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def report_sack(res: dict[str, Any]) -> str:
    rows = []
    for row in res["rows"]:
        for case in CASES:
            c = row[case]
            frac = c["returned_fraction"]
            rows.append(
                [
                    f"{row['payload']} B" if case == "reflector" else "",
                    f"{row['frame_bytes']} B" if case == "reflector" else "",
                    CASE_LABEL[case],
                    fmt(c["mpps"], ".3f"),
                    fmt(c.get("ratio"), ".2f"),
                    fmt(c.get("extra_ns_per_pkt"), "+.0f"),
                    f"{frac:.1%}" if frac is not None else "-",
                    fmt(c["cpu_cores"]),
                    c["outcome"],
                ]
            )
    head = (
        f"1. SACK generation vs a bare XDP_TX reflector: one veth ({res['namespaces'][0]} <-> "
        f"{res['namespaces'][1]}), injector and NAPI on CPU {res['injector_cpu']}, "
        f"{res['seconds_per_run']} s per run, median of {res['rounds']}"
    )
    verdicts = []
    for row in res["rows"]:
        for case in ("nic_new", "nic_dup"):
            r = row[case]["ratio"]
            if r is not None:
                ok = "meets" if r >= res["target_ratio"] else "BELOW"
                verdicts.append(f"{row['payload']} B {case}: {r:.2f} ({ok})")
    body = table(
        ["payload", "frame", "case", "Mpps", "ratio", "ns/pkt", "returned", "CPUs", "outcome"],
        rows,
    )
    foot = f"target ratio >= {res['target_ratio']}: " + "; ".join(verdicts)
    return "\n".join([head, body, foot])


def peer_cells(label: str, r: dict[str, Any], extra: str, runs: str) -> list[str]:
    """One line of part 2's table: rate, packet rate (if measured), CPUs, rate per CPU."""
    mpps = fmt(r["mpps"], ".3f") if "mpps" in r else "-"
    per_cpu = fmt(ratio(r["gbps"], r["cpu_cores"]))
    return [label, fmt(r["gbps"]), mpps, fmt(r["cpu_cores"]), per_cpu, extra, runs]


def report_write(res: dict[str, Any]) -> str:
    rows = []
    for row in res["mrc"]:
        mpr = row["peer"].removeprefix("mrc_mpr")
        label = f"MRC WRITE, 1 QP, mpr {mpr} (4 planes)"
        retx = f"retx {fmt(row['retransmits'], '.0f')}"
        rows.append(peer_cells(label, row, retx, f"{row['complete']} complete+exact"))
    u = res["iperf3_udp"]
    label = f"iperf3 -u -b 0 -l {res['seg']} (plane 0)"
    rows.append(peer_cells(label, u, f"loss {fmt(u['lost_percent'])}%", f"{u['complete']} runs"))
    m = res["mptcp"]
    note = res.get("mptcp_setup") or {}
    if "skipped" in note:
        rows.append(["MPTCP, 4 subflows", "-", "-", "-", "-", "-", f"skipped: {note['skipped']}"])
    else:
        label = "MPTCP, 4 subflows (python sockets)"
        subflows = f"subflows {fmt(m['subflows'], '.0f')}"
        rows.append(peer_cells(label, m, subflows, f"{m['complete']} runs"))
    head = (
        f"2. Single-QP WRITE goodput vs peers: lab {res['lab']} ({res['topology']}), "
        f"{res['size_bytes'] // MIB} MiB per WRITE, peers {res['iperf3_seconds']} s, "
        f"median of {res['rounds']}"
    )
    body = table(["peer", "Gbit/s", "Mpps", "CPUs", "Gbit/s/CPU", "loss/retx", "runs"], rows)
    foot = []
    for row in res["mrc"]:
        r = row["ratio_vs_iperf3_udp"]
        verdict = "-" if r is None else ("meets" if r >= 1.0 else "BELOW")
        foot.append(
            f"{row['peer']}: /iperf3 -u = {fmt(r)} (target >= 1.0: {verdict}); "
            f"/MPTCP = {fmt(row['ratio_vs_mptcp'])}"
        )
    for s in res["mpr_skipped"]:
        foot.append(f"mpr {s['mpr']} skipped: {s['reason']}")
    for run in res["runs"]["mrc"]:
        if not (run["complete"] and run["byte_exact"]):
            states = ", ".join(f"{k} {v}" for k, v in sorted(run["ev_states_after"].items()))
            foot.append(
                f"mpr {run['mpr']} round {run['round'] + 1}: not complete in {run['seconds']} s "
                f"({run['acked_bytes'] / MIB:.1f} MiB acked); EVs at the end: {states}"
            )
    for workaround in res["workarounds"]:
        foot.append(f"workaround: {workaround}")
    if "tooling" in note:
        foot.append(f"MPTCP tooling: {note['tooling']}")
    return "\n".join([head, body, *foot])


# ---- main --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one round, shorter runs (< 1 minute)")
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON to FILE")
    p.add_argument("--only", choices=("sack", "write"), help="run one part only")
    p.add_argument("--rounds", type=int, help="rounds per part (default 3, quick 1)")
    p.add_argument("--cpu", type=int, help="CPU of part 1's injector (default: the first allowed)")
    p.add_argument("--size-mib", type=int, default=64, help="WRITE size (default 64 MiB)")
    p.add_argument(
        "--mpr", dest="mprs", type=int, action="append", help="MPRs to try (default 2, 8, 32)"
    )
    p.add_argument("--no-mptcp", action="store_true", help="skip the MPTCP peer")
    p.add_argument(
        "--auth", action="store_true", help="part 2: MAC every packet (per-packet authentication)"
    )
    args = p.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.sack_seconds = 0.75 if args.quick else 1.5
    args.peer_seconds = 2.0 if args.quick else 3.0
    args.write_timeout = 3.0 if args.quick else 5.0
    args.mprs = args.mprs or [2, 8, 32]
    allowed = sorted(os.sched_getaffinity(0))
    args.cpu = allowed[0] if args.cpu is None else args.cpu
    if args.cpu not in allowed:
        p.error(f"--cpu {args.cpu} is not one of the allowed CPUs {allowed}")
    if args.size_mib < 1 or args.size_mib > 64:
        p.error("--size-mib must be 1..64 (the lab's NIC memory holds source and destination)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_root(__file__)
    exit_on_sigterm()  # unwinds through every finally: cleanup runs

    started = time.monotonic()
    result: dict[str, Any] = {
        "version": 1,
        "mode": "quick" if args.quick else "full",
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "pid": PID,
    }
    outputs = []
    if args.only in (None, "sack"):
        log("part 1: SACK generation vs reflector")
        result["sack_vs_reflector"] = part_sack(args, log)
        outputs.append(report_sack(result["sack_vs_reflector"]))
    if args.only in (None, "write"):
        log("part 2: WRITE goodput vs iperf3 -u / MPTCP")
        result["write_vs_peers"] = part_write(args, log)
        outputs.append(report_write(result["write_vs_peers"]))
    result["seconds"] = round(time.monotonic() - started, 1)
    mode = "quick" if args.quick else "full"
    print(
        f"mrc-nic fast path benchmark ({mode}, {os.cpu_count()} CPUs, kernel "
        f"{platform.release()}, {result['seconds']} s)\n"
    )
    print("\n\n".join(outputs))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
