"""`mrc-nic doctor`: what this machine carries, measured on a small lab of its own.

A lab is faithful while its links, not the machine's CPU, bound its traffic
(observe.fidelity). What a machine carries is packet-hops a second: every
data packet crosses the same hops on any shape (host, T0, T1, T0, host, and
its SACK back), so one measurement on the smallest lab of the default
shape's depth (2 hosts, 1 plane, two tiers: 6 namespaces, quick to build)
gives the rates of every shape by arithmetic (lab.doctor_store):

1. the fastest a single QP goes with the links out of the way (every link at
   UNCAPPED_BPS): data packets a second, packet-hops a second, and the
   machine's CPU time per packet-hop;
2. a short bisection over the link rate (changed live: every TBF and its
   BPF queue twin), each step a write sized for STEP_S seconds, for the
   highest rate at which the write is link-bound (observe.fidelity) and
   reaches FAITHFUL_SHARE of the links' payload capacity: the faithful rate
   of one QP.

3. one short write at the rate whose design RTT slows the daemons' tick
   to its slowest (topology.sending_tick_s): what the two host daemons cost
   there, beside what they cost at the faithful rate's tick.

Then: the per-link rate at which each shipped topology is faithful, if its
main workload (a write on a pair; every host sending on bigger labs) asks
the same packet-hops a second and its hosts' daemons fit beside them. The
figures are stored (doctor_store) for `up`'s warning and the verdicts'
advice.
"""

from __future__ import annotations

import math
import os
import time
import tomllib
from typing import Any

from mrc_nic import nic, resources
from mrc_nic.contract import framing
from mrc_nic.fabric import queues, testbed
from mrc_nic.fabric.builder import Fabric
from mrc_nic.lab import client, doctor_store, state, topology, workers
from mrc_nic.lab.topology import Topology
from mrc_nic.nic import wire
from mrc_nic.observe import fidelity
from mrc_nic.workloads import rdma_write

UNCAPPED_BPS = 32 * 10**9  # far above what the machine carries: the TBFs never bind
# A faithful write: the verdict is `links` and its goodput this share of the
# links' payload capacity. Not 0.95: a write of a second or so spends its
# start and its last round trips below the rate, and reached 0.90-0.93 at
# every rate from 161 to 744 Mbit/s on one plane here (docs/fidelity.md).
FAITHFUL_SHARE = 0.9
STEP_S = 1.5  # each bisection step's write lasts about this long at its rate
STEPS = 4
FIRST_STEP = 0.6  # the first rate tried: this share of what the uncapped write reached
MIN_SIZE = 4 * 2**20
SLOW_PACKETS = 64  # the slow step's write: at least this many packets
ETH = fidelity.ETH_HLEN
DAEMON_WAIT_S = 30.0  # a restarted daemon answers within this, even on a loaded machine


def lab_name() -> str:
    return f"dr{os.getpid() % 10**6}"[:12]


def doctor_topology(lab: str, rate_bps: int = UNCAPPED_BPS) -> Topology:
    """The default shape's depth with one plane (2 hosts, two tiers), every link at rate_bps."""
    path = resources.DEFAULT_TOPOLOGY
    data = tomllib.loads(path.read_text())
    data["fabric"]["planes"] = 1
    data["links"]["rate"] = data["links"]["fabric_rate"] = f"{rate_bps}bit"
    return topology.from_dict(path, data, lab=lab)


def set_rate(topo: Topology, rate_bps: int) -> Topology:
    """Every link of doctor's running lab at rate_bps: its TBFs and its
    switch ports' queue twins live, and a design RTT that fits the rate (a
    full frame's time on each hop of a path, as scenario_topology gives a
    scenario's slowed lab), which the lab record keeps and the host daemons,
    restarted, take (NSCC's base RTT and link rate are set as they start).
    Returns the topology with the new rate."""
    data = dict(topo.raw)
    data["links"] = {**data["links"], "rate": f"{rate_bps}bit", "fabric_rate": f"{rate_bps}bit"}
    data["queues"] = {k: v for k, v in data.get("queues", {}).items() if k != "base_rtt"}
    new = topology.from_dict(topo.path, data, lab=topo.lab)
    with Fabric(new) as fabric:
        for link in new.links.values():
            for port in link.ends():
                fabric.set_queue_buffer(link, port, new.buffer_bytes)
    queues.configure(new)
    record = state.LabState.load(new.lab)
    record.topology = new.raw
    record.save()
    for host in new.host_names():
        workers.stop(testbed.daemon_pid(new.lab, host), new.lab)
    try:
        testbed.start_daemons(new, new.host_names())
    except testbed.LabError:
        _await_daemons(new)  # slow to answer on a loaded machine: give them longer
    return new


def _await_daemons(topo: Topology, limit_s: float = DAEMON_WAIT_S) -> None:
    """Every host daemon of the lab answers, within limit_s; else LabError."""
    deadline = time.monotonic() + limit_s
    for host in topo.host_names():
        while True:
            try:
                client.call(topo.lab, host, framing.Ping(), timeout=1.0)
                break
            except client.DaemonError:
                if time.monotonic() > deadline or testbed.daemon_pid(topo.lab, host) is None:
                    raise testbed.LabError(f"doctor: the {host} daemon did not restart") from None
                time.sleep(0.05)


def frame_bytes(topo: Topology) -> int:
    """A full data frame as the TBF counts it (Ethernet included)."""
    return fidelity.ETH_HLEN + wire.WRITE_OVERHEAD + nic.seg_size(topo.mtu)


def measure_write(topo: Topology, size: int, qps: int = 1) -> dict[str, Any]:
    """One write h0 -> h1 on the running lab `topo` (over `qps` QPs), judged
    against topo's rates; its fidelity object under "fidelity"."""
    conn = rdma_write.Connection(topo.lab, "h0", "h1", qps=qps, size_hint=size)
    meter = fidelity.Meter(topo=topo)
    try:
        r = conn.write(size, keep_open=False, meter=meter)
    finally:
        meter.close()
        conn.close()
    if not r["completed"]:
        raise RuntimeError(f"doctor's write failed: {r['error']}")
    packets = -(-r["bytes"] // nic.seg_size(topo.mtu)) + r["retransmits"]
    fid = r["fidelity"]
    secs = r["seconds"]
    busy = fid["cpu"]["busy"] or 0
    cpu_s = busy * (os.cpu_count() or 1) * secs
    daemons = fid["cpu"].get("lab_daemons") or 0.0  # the two host daemons (and the event log)
    hops = packets * doctor_store.HOPS_PER_PACKET
    return {
        "rate_bps": topo.rate_bps,
        "goodput_bps": round(r["goodput_bps"]),
        "share": fidelity.links_share(r["goodput_bps"], topo),
        "seconds": secs,
        "packets": packets,
        "pps": round(packets / secs) if secs else None,
        "cpu_us_per_hop": round(cpu_s / hops * 1e6, 2) if hops else None,
        # the fabric's own: the daemons' time taken out
        "fabric_us_per_hop": round((cpu_s - daemons * secs) / hops * 1e6, 2) if hops else None,
        "daemon_cores": daemons,
        "tick_s": topology.sending_tick_s(topo.queues.base_rtt_ns),
        "verdict": fid["verdict"],
        "busy": fid["cpu"]["busy"],
        "fidelity": fid,
    }


def measure_daemons(topo: Topology, log=print) -> dict[str, Any]:
    """A short write at the highest rate whose design RTT slows the daemons'
    tick to its slowest: what the pair's two daemons cost there."""
    per_bit = topology.PATH_HOPS_PER_TIER * topo.tiers * (topo.mtu + ETH) * 8
    rate = int(per_bit / (4 * topology.SENDING_TICK_MAX_S))
    topo = set_rate(topo, rate)
    seg = nic.seg_size(topo.mtu)
    size = max(SLOW_PACKETS * seg, int(rate / 8 * seg / frame_bytes(topo) * STEP_S))
    step = measure_write(topo, size)
    log(
        f"doctor: {rate / 1e6:.2g} Mbit/s (the daemons tick every {step['tick_s'] * 1e3:g} ms): "
        f"the two daemons took {step['daemon_cores']:.3f} cores"
    )
    return step


def _faithful(step: dict[str, Any]) -> bool:
    share = step["share"]
    return bool(step["verdict"] == "links" and share and share["of_payload"] >= FAITHFUL_SHARE)


def shipped_rates(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Each shipped topology: its link rate and the rate doctor finds faithful for it."""
    rows = []
    for path in sorted(resources.TOPOLOGY_DIR.glob("*.toml")):
        topo = topology.load(path, lab="x")
        rate = doctor_store.faithful_rate(figures, topo.hosts, topo.planes, topo=topo)
        rows.append(
            {
                "topology": path.name,
                "hosts": topo.hosts,
                "planes": topo.planes,
                "senders": doctor_store.senders_of(topo.hosts),
                "rate_bps": topo.rate_bps,
                "faithful_rate_bps": round(rate) if rate else None,
                "faithful": bool(rate and topo.rate_bps and topo.rate_bps <= rate),
            }
        )
    return rows


def run(log=print) -> dict[str, Any]:
    """Bring up doctor's lab, measure, take it down; the figures (not yet stored)."""
    started = time.monotonic()
    topo = doctor_topology(lab_name())
    if topo.lab in testbed.labs_present():
        raise SystemExit(f"lab {topo.lab} already exists here: not touched")
    log(f"doctor: bringing up lab {topo.lab} (2 hosts, 1 plane, 2 tiers) ...")
    testbed.up(topo)
    steps = []
    try:
        up_s = time.monotonic() - started
        frame = frame_bytes(topo)
        seg = nic.seg_size(topo.mtu)
        free = measure_write(topo, 64 * 2**20)
        log(
            f"doctor: links out of the way: {free['goodput_bps'] / 1e9:.3g} Gbit/s, "
            f"{free['pps']:,} data packets/s, {free['cpu_us_per_hop']} us of CPU per packet-hop"
        )
        top = free["goodput_bps"] * frame / seg  # the raw rate that goodput would fill
        lo, hi = None, top
        rate = FIRST_STEP * top
        for _ in range(STEPS):
            rate = int(rate)
            topo = set_rate(topo, rate)
            size = max(MIN_SIZE, int(rate / 8 * seg / frame * STEP_S))
            step = measure_write(topo, size)
            steps.append(step)
            ok = _faithful(step)
            log(
                f"doctor: {rate / 1e6:.0f} Mbit/s: {step['share']['of_payload']:.0%} of the "
                f"link's payload capacity, {step['verdict']}-bound: "
                + ("faithful" if ok else "not faithful")
            )
            if ok:
                lo = rate
            else:
                hi = rate
            rate = math.sqrt(lo * hi) if lo else rate * FIRST_STEP
        faithful = next((st for st in reversed(steps) if _faithful(st)), free)
        slow = measure_daemons(topo, log)
    finally:
        testbed.down(topo.lab)
    faithful_bps = lo or 0
    figures = {
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - started, 1),
        "bringup_seconds": round(up_s, 1),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "frame_bytes": frame,
        "payload_bytes": seg,
        "hops_per_packet": doctor_store.HOPS_PER_PACKET,
        "uncapped": free,
        "hop_pps": round(free["pps"] * doctor_store.HOPS_PER_PACKET) if free["pps"] else None,
        "steps": steps,
        "faithful_aggregate_bps": faithful_bps,
        "faithful_hop_pps": round(faithful_bps / (8 * frame) * doctor_store.HOPS_PER_PACKET),
        "slow": slow,
        "cpu_s_per_hop": faithful["fabric_us_per_hop"] / 1e6,
        "cpu_budget_cores": round((os.cpu_count() or 1) * fidelity.CPU_BUSY, 2),
        "daemons": {
            "fast": {"tick_s": faithful["tick_s"], "cores": faithful["daemon_cores"]},
            "slow": {"tick_s": slow["tick_s"], "cores": slow["daemon_cores"]},
        },
    }
    figures["topologies"] = shipped_rates(figures)
    return figures
