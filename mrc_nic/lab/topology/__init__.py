"""Topology files: parse and validate a lab's TOML, and derive every name.

A topology file describes a multi-plane Clos fabric as MRC deploys it: every
host has one NIC port per plane (port p is the uplink to plane p), and each
plane is an independent network of one switch (tiers = 1) or of T0 leaves and
T1 spines (tiers = 2). From the file this module derives, without touching the
system, everything the builder creates: node and namespace names, links and
their names as the CLI shows them (``p1.t0a-h0``), interface names, addresses,
routes and the id of every switch port in the BPF port program's maps.

Naming (planes and hosts count from 0):
  host            h0, h1, ...            namespace  mrc-<lab>-h0
  switch          p1.t0a, p1.t1b, ...    namespace  mrc-<lab>-p1.t0a
  link            p1.t0a-h0 (upper end first), p1.t1a-t0b
  host port       eth<p> in the host's namespace
  switch port     named after its peer: h0, t1a, t0b
Lab names are [a-z0-9]{1,12}: no dash, so the names of lab "a" are never a
prefix of another lab's names.

The package, by job: schema (the sections, keys and limits a file may hold),
reader (a file read and checked, key by key), model (the value types and the
Topology with its names, addresses and routes), build (nodes, links and port
ids derived from the numbers). Units of sizes, rates and thresholds:
mrc_nic.units. Import from here: `from mrc_nic.lab import topology`.
"""

from __future__ import annotations

from pathlib import Path

from mrc_nic.lab.topology.model import (
    SENDING_TICK_MAX_S,
    SENDING_TICK_MIN_S,
    Link,
    Node,
    Port,
    QueueParams,
    Route,
    Shard,
    Topology,
    TopologyError,
    Tunnel,
    design_rtt_ns,
    plane_subnet,
    sending_tick_s,
    switch_letter,
    tbf_burst_bytes,
)
from mrc_nic.lab.topology.reader import from_dict, load, with_forwarding
from mrc_nic.lab.topology.schema import (
    ACK_DELAY_US_DEFAULT,
    ACK_EVERY_DEFAULT,
    ACK_EVERY_MAX,
    BASE_RTT_NS,
    FORWARDING_DEFAULT,
    FORWARDING_MODES,
    GATEWAY_HOST_OCTET,
    LAB_NAME_RE,
    MAX_HOSTS,
    MAX_PLANES,
    MAX_SWITCHES_PER_TIER,
    MAX_TBF_RATE_BPS,
    MTU_MAX,
    MTU_MIN,
    NIC_MEMORY_DEFAULT,
    NIC_MEMORY_DEFAULT_LAB,
    NIC_MEMORY_MAX,
    NIC_MEMORY_MIN,
    NIC_MEMORY_PAGE,
    NS_PREFIX,
    PATH_HOPS_PER_TIER,
    QUEUE_BYTES_MAX,
    SCHEMA,
    TBF_BURST_SECONDS,
    VXLAN_OVERHEAD,
    VXLAN_PORT,
)

__all__ = [
    "ACK_DELAY_US_DEFAULT",
    "ACK_EVERY_DEFAULT",
    "ACK_EVERY_MAX",
    "BASE_RTT_NS",
    "PATH_HOPS_PER_TIER",
    "FORWARDING_DEFAULT",
    "FORWARDING_MODES",
    "GATEWAY_HOST_OCTET",
    "LAB_NAME_RE",
    "MAX_HOSTS",
    "MAX_PLANES",
    "MAX_SWITCHES_PER_TIER",
    "MAX_TBF_RATE_BPS",
    "MTU_MAX",
    "MTU_MIN",
    "NIC_MEMORY_DEFAULT",
    "NIC_MEMORY_DEFAULT_LAB",
    "NIC_MEMORY_MAX",
    "NIC_MEMORY_MIN",
    "NIC_MEMORY_PAGE",
    "NS_PREFIX",
    "QUEUE_BYTES_MAX",
    "SCHEMA",
    "TBF_BURST_SECONDS",
    "VXLAN_OVERHEAD",
    "VXLAN_PORT",
    "Link",
    "Node",
    "Path",
    "Port",
    "QueueParams",
    "Route",
    "Shard",
    "Topology",
    "TopologyError",
    "Tunnel",
    "from_dict",
    "load",
    "plane_subnet",
    "switch_letter",
    "design_rtt_ns",
    "sending_tick_s",
    "SENDING_TICK_MAX_S",
    "SENDING_TICK_MIN_S",
    "tbf_burst_bytes",
    "with_forwarding",
]
