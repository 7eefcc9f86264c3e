"""What a topology file may say: its sections and keys, and the limits of each value."""

from __future__ import annotations

import re

from mrc_nic import units
from mrc_nic.contract import devices

# links.mtu: at least a 1 KiB payload (a region element) with MRC's 80 bytes
# of IP, UDP and RDMA headers; at most what veth takes with an XDP program
# that is not frags-aware attached (one page less XDP headroom and
# skb_shared_info): above it the NIC cannot attach to the host ports.
# nic.seg_size turns the MTU into the payload per packet.
MTU_MIN = 1024 + 80
MTU_MAX = 3506


NS_PREFIX = devices.NS_PREFIX  # a node's namespace: where applications look (contract.devices)
# Cross-machine links of a cluster lab: VXLAN over IPv4 on the IANA port; it
# adds 50 bytes (outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14).
VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
LAB_NAME_RE = devices.LAB_NAME_RE
# [tenants] group: a name useradd/groupadd accept (shadow-utils' default rule,
# at most 32 characters); a number is not taken, a group is named.
GROUP_NAME_RE = re.compile(r"[a-z_][a-z0-9_-]{0,30}[$]?")
MAX_PLANES = 16
MAX_HOSTS = 253  # .1 to .253 in a plane's /24; .254 is the T0 gateway
LETTERS = "abcdefghijklmnopqrstuvwxyz"  # switch letters: t0a, t0b, ...
MAX_SWITCHES_PER_TIER = len(LETTERS)
MAX_TBF_RATE_BPS = 32 * 10**9  # TBF's rate field is a u32 in bytes/s
GATEWAY_HOST_OCTET = 254

# The TBF of every capped egress sends this much at line rate after idle (its
# bucket): its hrtimer refills continuously, so ~250 us keeps the CPU cost low
# without shaping coarsely. The BPF queue twin subtracts it (switch_port.h).
TBF_BURST_SECONDS = 250e-6
# Thresholds and buffers the BPF queue twin can hold (switch_port.h SP_Q_BYTES_MAX).
QUEUE_BYTES_MAX = units.QUEUE_BYTES_MAX

# Who forwards MRC packets in the switches ([fabric] forwarding; bpf/switch_port.h,
# "Forwarding"): the port program itself, or the IP stack. The IP stack by
# default until the BPF path's failover and 20%-loss figures are shown not to
# regress on a quiet machine (docs/benchmarks.md, "Line rate": 12-17% more
# goodput, but a longer blackhole gap in 3 of 3 loaded runs).
BASE_RTT_NS = 100_000  # [queues] base_rtt floor: the design RTT of a fast lab
PATH_HOPS_PER_TIER = 2  # links a host-to-host path crosses per switch tier (T0-T1-T0: 4)
# [nic] ack_every / ack_delay_us: ACK coalescing (docs/nic-program.md, "ACK coalescing").
# Off (1) by default: a held answer leaves a late original unechoed, and the
# EV blame rule then takes a later packet's SACK for proof of its loss
# (docs/nic-program.md, "ACK coalescing").
ACK_EVERY_DEFAULT = 1
ACK_EVERY_MAX = 64
ACK_DELAY_US_DEFAULT = 50
FORWARDING_MODES = ("bpf", "kernel")
FORWARDING_DEFAULT = "kernel"

# Every key a topology file may hold, per section, with a short description
# used in error messages.
SCHEMA: dict[str, dict[str, str]] = {
    "lab": {"name": "lab name, [a-z0-9]{1,12}"},
    "fabric": {
        "hosts": f"number of hosts, 1..{MAX_HOSTS}",
        "planes": f"number of planes (NIC ports per host), 1..{MAX_PLANES}",
        "tiers": "switch tiers per plane: 1 (one switch) or 2 (T0 leaves, T1 spines)",
        "t0_per_plane": f"T0 leaves per plane, 1..{MAX_SWITCHES_PER_TIER}",
        "t1_per_plane": f"T1 spines per plane (tiers = 2), 1..{MAX_SWITCHES_PER_TIER}",
        "hosts_per_t0": "hosts attached to each T0 (default: hosts spread evenly)",
        "forwarding": (
            'who forwards MRC packets in the switches: "bpf" (the port program, '
            'bpf_fib_lookup and bpf_redirect) or "kernel" (the IP stack)'
        ),
    },
    "links": {
        "rate": 'host link rate, e.g. "1gbit", "400mbit", or "none" for no cap',
        "fabric_rate": "T0-T1 link rate (default: rate)",
        "mtu": (
            f"IP MTU of every link, {MTU_MIN}..{MTU_MAX}: a data packet carries 1 KiB, "
            "2 KiB from 2128, 3 KiB from 3152"
        ),
        "buffer": 'queue size of every switch egress port, e.g. "256KiB"',
    },
    "nic": {
        "memory": (
            'NIC memory per host (registered memory), e.g. "64MiB" (default), "320MiB": '
            "an MR takes at most half of it; the lab's total is at most 2 GiB"
        ),
        "ack_every": (
            f"ACK coalescing: a receiver answers one data packet in this many, "
            f"1..{ACK_EVERY_MAX} (default {ACK_EVERY_DEFAULT}; 1: every packet)"
        ),
        "ack_delay_us": (
            f"ACK coalescing: the longest a receiver holds an answer, in us "
            f"(default {ACK_DELAY_US_DEFAULT})"
        ),
    },
    "addressing": {
        "hosts": "IPv4 /16 for host addresses: plane p is its p-th /24, host h is .h+1",
        "fabric": "IPv4 /16 for T0-T1 links: plane p is its p-th /24, one /31 per link",
    },
    "cluster": {
        "machines": "how many machines of the cluster a lab spreads over (default: all)",
        "place": 'nodes pinned to machines, e.g. { h1 = 1, "p0.t1a" = "10.0.0.2" }',
    },
    "queues": {
        "base_rtt": 'base RTT of a plane, e.g. "100us": a port\'s BDP is its link rate x base_rtt',
        "ecn": "mark CE on ECT packets between kmin and kmax (true/false)",
        "ecn_last_hop": "also mark on T0 ports facing hosts (default false, as MRC deploys it)",
        "kmin": 'marking starts: a fraction of the BDP (0.2, "0.2bdp") or a size ("20KB")',
        "kmax": 'every ECT packet marked: a fraction of the BDP (0.8) or a size ("80KB")',
        "trim": 'trim MRC data above this backlog: a fraction of the BDP, a size, or "off"',
        "seed": "seed of the marking draws (port p uses seed + p)",
    },
    # Who may open the lab's NICs, and the shares of each host's NIC per
    # application session (mrc_nic/contract/shares.py)
    "tenants": {
        "group": (
            "the group whose members may open the lab's NICs, as the rdma group opens "
            '/dev/infiniband (default: root only; docs/api.md, "Running without root")'
        ),
        "memory": (
            'NIC memory one session may hold: a fraction of the host\'s (0.5, "50%") '
            'or a size ("8MiB")'
        ),
        "qps": 'QPs one session may hold: a fraction of the host\'s (0.5, "50%") or a count',
        "cqs": 'CQs one session may hold: a fraction of the host\'s (0.5, "50%") or a count',
        "pds": 'PDs one session may hold: a fraction of the host\'s (0.5, "50%") or a count',
    },
}


# [nic] memory: per host, in whole pages of NIC memory; the lab's nic_mr holds
# every host's (one BPF array, at most NIC_MEMORY_MAX). By default 64 MiB a
# host, and 1 GiB for the lab at most.
NIC_MEMORY_DEFAULT = 64 * 2**20
NIC_MEMORY_DEFAULT_LAB = 2**30
NIC_MEMORY_MIN = 1 * 2**20
NIC_MEMORY_MAX = 2 * 2**30
NIC_MEMORY_PAGE = 4096
