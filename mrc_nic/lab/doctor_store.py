"""What `mrc-nic doctor` measured on this machine, kept for `up` and the verdicts.

Kept in /var/lib/mrc-nic/doctor.json (MRC_NIC_DOCTOR_FILE overrides): the
figures describe the machine, not a lab, so they outlive every lab (lab
state under /run/mrc-nic goes with its lab and with a reboot) and `up`
reads them before a lab exists. The file names the machine it was measured
on (CPUs, kernel, CPU model); figures from another machine are not used.

The model (docs/fidelity.md, "What this machine carries"): a run stays
link-bound while the packet-hops a second it asks for are below what the
machine forwards with headroom. A single QP over P planes at r bit/s per
link sends P x r / (8 x frame) data packets a second, each crossing
HOPS_PER_PACKET packet-hops with its SACK; N hosts all sending (a
permutation, an all-reduce) ask N times that. So the faithful per-link rate
of a lab of N hosts and P planes is

    faithful_pps x 8 x frame / (HOPS_PER_PACKET x N_senders x P)

where faithful_pps is the packet-hops a second doctor found link-bound.

Each host also runs a Python daemon, whose CPU grows with the hosts, not
with the packets: on a 2-core machine 32 of them took most of both cores at
2 Mbit/s per link (docs/fidelity.md). So a lab of more than two hosts must
also fit the machine's CPU budget (`cpu_budget_cores`, the cores at the
verdicts' busy threshold):

    cpu_s_per_hop x packet-hops/s + hosts x daemon_cores(tick) <= budget

where cpu_s_per_hop is the fabric's CPU per packet-hop (doctor's faithful
write, its daemons' time taken out), and daemon_cores is one host's daemon
sending and receiving (a pair's two daemons) at the lab's tick, which slows
with the lab's design RTT (topology.sending_tick_s): doctor measures it at
its own tick and at the slowest, and it is taken linear in the ticks a
second between them. The faithful rate is the lower of the two.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from mrc_nic.lab import topology

DOCTOR_FILE = "/var/lib/mrc-nic/doctor.json"
SCHEMA = 1
# A data packet's packet-hops with its SACK on the default shape: host ->
# T0 -> T1 -> T0 -> host is 4 veth crossings for the data and about 2.5 for
# its SACK, which XDP_TX turns back at the receiver (docs/benchmarks.md).
HOPS_PER_PACKET = 6.5


def machine() -> dict[str, Any]:
    """What identifies this machine kind for the stored figures."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "kernel": platform.release(), "cpu_model": model}


def store_path() -> Path:
    """Where the figures are kept (MRC_NIC_DOCTOR_FILE overrides, read each time)."""
    return Path(os.environ.get("MRC_NIC_DOCTOR_FILE", DOCTOR_FILE))


def save(figures: dict[str, Any], path: Path | None = None) -> Path:
    path = path or store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, "machine": machine(), **figures}, indent=1))
    tmp.replace(path)
    return path


def load(path: Path | None = None) -> dict[str, Any] | None:
    """The stored figures if they were measured on this machine kind, else None."""
    path = path or store_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    if data.get("machine") != machine():
        return None
    return data


def faithful_rate(
    figures: dict[str, Any],
    hosts: int,
    planes: int,
    *,
    senders: int | None = None,
    topo: topology.Topology | None = None,
) -> float | None:
    """The per-link rate (bit/s) at which a lab of `hosts` hosts and
    `planes` planes stays link-bound with every host sending (or `senders`
    of them), by the model above, from doctor's figures. With the lab's
    topology (its design RTT sets its daemons' tick), more than two hosts
    must also fit the CPU budget with their daemons; 0.0 when no rate does."""
    pps = figures.get("faithful_hop_pps")
    frame = figures.get("frame_bytes")
    if not pps or not frame:
        return None
    n = senders if senders is not None else senders_of(hosts)
    rate = pps * 8 * frame / (HOPS_PER_PACKET * n * planes)
    if hosts <= 2 or topo is None or not figures.get("daemons"):
        return rate  # a pair's daemons were in doctor's own write

    def fits(rate_bps: float) -> bool:
        rtt = max(
            topo.queues.base_rtt_ns, topology.design_rtt_ns(int(rate_bps), topo.mtu, topo.tiers)
        )
        hop_pps = n * planes * rate_bps / (8 * frame) * HOPS_PER_PACKET
        cpu = figures["cpu_s_per_hop"] * hop_pps
        cpu += hosts * daemon_cores(figures, topology.sending_tick_s(rtt))
        return cpu <= figures["cpu_budget_cores"]

    if fits(rate):
        return rate
    lo, hi = 0.0, rate
    for _ in range(40):  # to well under a bit/s of the 1 Gbit/s scale
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo if lo >= 1000 else 0.0  # below 1 kbit/s a link carries no packet a second


def daemon_cores(figures: dict[str, Any], tick_s: float) -> float:
    """One host's daemon, sending and receiving, at this tick: doctor's two
    measures (a pair's daemons at its own tick and at the slowest), linear
    in the ticks a second between them."""
    fast, slow = figures["daemons"]["fast"], figures["daemons"]["slow"]
    f_fast, f_slow, f = 1 / fast["tick_s"], 1 / slow["tick_s"], 1 / tick_s
    if f_fast == f_slow:
        return fast["cores"]
    w = min(1.0, max(0.0, (f - f_slow) / (f_fast - f_slow)))
    return slow["cores"] + w * (fast["cores"] - slow["cores"])


def senders_of(hosts: int) -> int:
    """How many hosts send at once in a lab's main workload: one in a pair
    (a write), every host in a bigger lab (permutation, all-reduce)."""
    return 1 if hosts <= 2 else hosts
