"""Traffic scenarios on the emulated NICs: N:1 incast with a bystander, permutation.

A scenario is a set of flows, each a WRITE from one host to another as
`mrc-nic write` makes it (mrc_nic.workloads.rdma_write, on the verbs API),
started together (the bystander a little later), with every flow's goodput
taken from its receive QP's counters
(placed bytes, sampled every few tens of ms) over the time all the flows it
is compared with were running. Flows are sized so that each lasts about
`duration` at its fair share: the max-min fair rates of the flows over the
hosts' links (every host sends and receives at most its planes x link rate;
the fabric is assumed not to be the bottleneck, which it is not by design on
the shipped topologies). What the switches did (ECN marks, trims, buffer
drops, by tier) comes from the BPF port counters, before and after.

- incast: `senders` hosts WRITE to one receiver at once. The bystander is a
  flow between two other hosts that shares the spines' downlinks with the
  incast but not the receiver: it goes to a host under the receiver's T0
  (the classic victim of an incast), from a host under another T0. On
  clos-8 (8 hosts) every host but the receiver is a sender, so the
  bystander's source is a sender too, and its fair share is what its
  uplink leaves: 6/7 of a host's rate.
- permutation: every host WRITEs to another (a derangement: host i to host
  i + hosts_per_t0, so that every flow crosses the spines; or a seeded
  random derangement), each flow against its link rate.

scripts/bench_congestion.py runs both with NSCC and with a fixed window.
A scenario needs the lab's daemons (`mrc-nic up`); with_lab() brings up a
lab of its own from a topology (optionally with other link rates) and
takes it down by name afterwards.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import random
import threading
import time
import tomllib
from collections.abc import Callable

from mrc_nic import nic
from mrc_nic.fabric import testbed
from mrc_nic.fabric.switchport import EGRESS
from mrc_nic.kernel import cpustat
from mrc_nic.kernel.fdwait import readable
from mrc_nic.lab import topology
from mrc_nic.lab.names import topology_file
from mrc_nic.lab.state import open_lab
from mrc_nic.lab.topology import Topology
from mrc_nic.nic import wire
from mrc_nic.observe import fidelity
from mrc_nic.observe.port_table import PortCounterTable
from mrc_nic.transport import nscc
from mrc_nic.workloads import hostprocs, rdma_write, scenario_hosts

MIB = 2**20
SAMPLE_S = 0.02  # receive counters read this often
FIDELITY_EVERY_S = 0.25  # the fidelity verdict's samples (CPU, TBF bytes): this often
# With more flows than SAMPLE_FLOWS, receive counters are read proportionally
# less often: each sample reads every flow's QPs from the NIC's maps, CPU the
# flows themselves need on a large lab.
SAMPLE_FLOWS = 8
WARMUP_S = 0.1  # a window of comparison starts this long after its last flow started
BYSTANDER_DELAY = 0.25  # the bystander starts this fraction of the duration after the incast
BYSTANDER_SPAN = 0.5  # and is sized to last this fraction of it at its fair share
MIN_FLOW_BYTES = MIB
START_S = 180.0  # every host's process up and connected (a loaded machine: Python's imports)
START_MARGIN_S = 0.3  # the flows' time 0: after every host has been told to go
REPORT_GRACE_S = 10.0  # a host stops its flows at the deadline; its reports may come this late
# What a link carries per full packet of goodput (seg bytes: nic.seg_size of
# the lab's MTU): a full data frame (Ethernet included, as the TBF counts it:
# 1114 bytes for 1 KiB), and, on a link that also carries the SACKs of a flow
# coming the other way, one 94-byte SACK per packet. So with 1 KiB packets
# payload can fill at most 91.9% of a link, and 84.8% of each link of a
# permutation, where every host both sends and receives (the ceiling the
# goodput is held against); with 3 KiB packets 97.2% and 94.4%.
ETH_HLEN = 14
ACK_FRAME = ETH_HLEN + wire.IPV4_UDP_LEN + wire.ACK_HDRS_LEN + wire.ICRC_LEN


def data_frame(seg: int = nic.MR_ELEM_SIZE) -> int:
    return ETH_HLEN + wire.WRITE_OVERHEAD + seg


def ceiling_one_way(seg: int = nic.MR_ELEM_SIZE) -> float:
    return seg / data_frame(seg)


def ceiling_both_ways(seg: int = nic.MR_ELEM_SIZE) -> float:
    return seg / (data_frame(seg) + ACK_FRAME)


@dataclasses.dataclass
class Flow:
    name: str
    src: str
    dst: str
    role: str  # incast, bystander, permutation
    start: float = 0.0  # seconds after the scenario starts
    size: int = 0  # bytes
    fair_bps: float = 0.0
    # filled in while it runs
    recv_qpns: list[int] = dataclasses.field(default_factory=list)
    opened_at: float | None = None
    done_at: float | None = None
    result: dict | None = None
    error: str | None = None
    samples: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    cwnds: list[int] = dataclasses.field(default_factory=list)


# ---- topologies ---------------------------------------------------------------------------


def scenario_topology(
    name: str,
    lab_name: str,
    *,
    rate: str | None = None,
    base_rtt: str | None = None,
    fabric_rate: str | None = None,
    mtu: int | None = None,
) -> Topology:
    """A topology for a scenario's own lab: the file's, with every link at
    `rate` if given (T0-T1 links at `fabric_rate` if given; every link's MTU
    `mtu` if given: 3152 or more sends 3 KiB per packet). A slower link
    needs a longer design RTT ([queues] base_rtt, against which switch queues
    mark and NSCC sizes windows): with `rate` and no `base_rtt`, the file's is
    dropped for the default of that rate (topology.design_rtt_ns: a frame's
    time on each link of a path)."""
    path = topology_file(name)
    data = tomllib.loads(path.read_text())
    links = data.setdefault("links", {})
    queues = data.setdefault("queues", {})
    if rate is not None:
        links["rate"] = rate
        links["fabric_rate"] = rate
        if base_rtt is None:  # the file's fits the file's rate
            queues.pop("base_rtt", None)
    if fabric_rate is not None:
        links["fabric_rate"] = fabric_rate
    if mtu is not None:
        links["mtu"] = mtu
    if base_rtt is not None:
        queues["base_rtt"] = base_rtt
    return topology.from_dict(path, data, lab=lab_name)


def unique_lab_name(tag: str = "scn") -> str:
    return f"{tag}{os.getpid() % 10**6}"[:12]


@contextlib.contextmanager
def with_lab(topo: Topology):
    """Bring up a lab for a scenario; take it down by its name afterwards, also on error."""
    try:
        testbed.up(topo)
        yield topo
    finally:
        with contextlib.suppress(Exception):
            testbed.down(topo.lab)


# ---- flows --------------------------------------------------------------------------------


def host_t0(topo: Topology, host: str) -> str:
    """The T0 a host hangs from (its plane-0 port's switch, without the plane)."""
    return topo.nodes[topo.host_port_link(host, "eth0").upper.node].local_name


def host_rate_bps(topo: Topology) -> float | None:
    """A host's line rate: its planes x the host link rate (None: uncapped)."""
    return topo.rate_bps * topo.planes if topo.rate_bps else None


def incast_flows(
    topo: Topology,
    senders: int,
    *,
    receiver: str | None = None,
    bystander: tuple[str, str] | None | bool = True,
) -> list[Flow]:
    """`senders` hosts to one receiver, plus (bystander True) the bystander
    flow the module describes, or the one given as (src, dst)."""
    hosts = topo.host_names()
    receiver = receiver or hosts[0]
    if receiver not in hosts:
        raise ValueError(f"no host {receiver!r} (hosts: {', '.join(hosts)})")
    others = [h for h in hosts if h != receiver]
    if not 1 <= senders <= len(others):
        raise ValueError(f"senders must be 1..{len(others)} on {topo.hosts} hosts, not {senders}")
    home = host_t0(topo, receiver)
    # Senders from other T0s first (they cross the spines), then the receiver's neighbours.
    ordered = sorted(others, key=lambda h: (host_t0(topo, h) == home, hosts.index(h)))
    chosen = sorted(ordered[:senders], key=hosts.index)
    flows = [Flow(f"{h}>{receiver}", h, receiver, "incast") for h in chosen]
    if bystander is True:
        bystander = pick_bystander(topo, receiver, chosen)
    if bystander:
        src, dst = bystander
        for h in (src, dst):
            if h not in hosts:
                raise ValueError(f"no host {h!r} (hosts: {', '.join(hosts)})")
        if receiver in (src, dst) or src == dst:
            raise ValueError("the bystander goes between two hosts other than the receiver")
        flows.append(Flow(f"{src}>{dst}", src, dst, "bystander"))
    return flows


def pick_bystander(topo: Topology, receiver: str, senders: list[str]) -> tuple[str, str] | None:
    """A flow that shares the spines' downlinks towards the receiver's T0 but
    not the receiver: to its neighbour under that T0 (else any other host),
    from a host under another T0 (one that is not a sender if there is one)."""
    hosts = [h for h in topo.host_names() if h != receiver]
    home = host_t0(topo, receiver)
    dsts = sorted(hosts, key=lambda h: (host_t0(topo, h) != home, h in senders))
    for dst in dsts:
        srcs = [h for h in hosts if h != dst and host_t0(topo, h) != host_t0(topo, dst)]
        srcs.sort(key=lambda h: (h in senders, -topo.host_names().index(h)))
        if srcs:
            return srcs[0], dst
    return None


def permutation_flows(topo: Topology, *, seed: int | None = None) -> list[Flow]:
    """Every host to another: host i to host i + hosts_per_t0 (mod hosts), so
    that every flow crosses the spines; with a seed, a random derangement."""
    hosts = topo.host_names()
    if len(hosts) < 2:
        raise ValueError("a permutation needs at least 2 hosts")
    if seed is None:
        shift = topo.hosts_per_t0 if topo.hosts_per_t0 < len(hosts) else 1
        dsts = [hosts[(i + shift) % len(hosts)] for i in range(len(hosts))]
    else:
        rng = random.Random(seed)
        while True:
            dsts = hosts[:]
            rng.shuffle(dsts)
            if all(a != b for a, b in zip(hosts, dsts, strict=True)):
                break
    return [Flow(f"{s}>{d}", s, d, "permutation") for s, d in zip(hosts, dsts, strict=True)]


def fair_shares(flows: list[Flow], capacity_bps: float) -> dict[str, float]:
    """Max-min fair rates of flows whose only resources are their source's
    uplink and their destination's downlink, each of capacity_bps
    (progressive filling)."""
    rate = {f.name: 0.0 for f in flows}
    left = {}
    for f in flows:
        left[("up", f.src)] = capacity_bps
        left[("down", f.dst)] = capacity_bps
    active = {f.name: f for f in flows}
    while active:
        users: dict[tuple[str, str], list[str]] = {}
        for f in active.values():
            users.setdefault(("up", f.src), []).append(f.name)
            users.setdefault(("down", f.dst), []).append(f.name)
        inc, tight = min((left[r] / len(names), r) for r, names in users.items())
        for name in active:
            rate[name] += inc
        for r, names in users.items():
            left[r] -= inc * len(names)
        frozen = set(users[tight])
        for r, names in users.items():
            if left[r] <= capacity_bps * 1e-9:
                frozen |= set(names)
        for name in frozen:
            active.pop(name, None)
    return rate


def size_flows(
    flows: list[Flow], capacity_bps: float, duration: float, payload: float = 1.0
) -> None:
    """Fair rates, sizes (each lasts about `duration` at its fair rate; the
    bystander BYSTANDER_SPAN of it) and start times (the bystander later).
    payload: the fraction of a link's rate that goodput can fill (a ceiling,
    above): fair rates are goodputs."""
    fair = fair_shares(flows, capacity_bps * payload)
    for f in flows:
        f.fair_bps = fair[f.name]
        span = duration * (BYSTANDER_SPAN if f.role == "bystander" else 1.0)
        f.start = duration * BYSTANDER_DELAY if f.role == "bystander" else 0.0
        size = int(f.fair_bps * span / 8) // 1024 * 1024
        f.size = max(MIN_FLOW_BYTES, size)


# ---- running ------------------------------------------------------------------------------


def run_flows(
    lab_name: str,
    flows: list[Flow],
    *,
    cc_profile: int,
    cc: dict | None = None,
    cwnd: int | None = None,
    timeout: float = 120.0,
) -> dict:
    """Run every flow from its source host's process (one process per host in
    its namespace, scenario_hosts: each holds its host's ends of the flows),
    each started at its start time; sample the receive QPs until all end (or
    `timeout`), and return what the switches and the CPUs did."""
    _, topo = open_lab(lab_name)
    by_name = {f.name: f for f in flows}
    procs: dict[str, hostprocs.HostProc] = {}
    try:
        for h, args in host_args(lab_name, topo, flows).items():
            procs[h] = hostprocs.HostProc(
                topo.netns(h), scenario_hosts.__name__, args, lab=lab_name, host=h
            )
        order = list(procs.values())
        lines = hostprocs.gather(order, "ready", time.monotonic() + START_S)
        ready = dict(zip(procs, lines, strict=True))
        orders = connect_orders(flows, ready, cc_profile=cc_profile, cc=cc, cwnd=cwnd)
        for h, p in procs.items():
            p.tell(orders[h])
        hostprocs.gather(order, "connected", time.monotonic() + START_S)
        return _drive(lab_name, topo, procs, by_name, timeout)
    finally:
        for p in procs.values():
            with contextlib.suppress(RuntimeError):
                p.tell({"end": True})
        for p in procs.values():
            with contextlib.suppress(Exception):
                p.proc.wait(timeout=10)
        hostprocs.end_all(list(procs.values()))


def host_args(lab_name: str, topo: Topology, flows: list[Flow]) -> dict[str, dict]:
    """Each host's process arguments (scenario_hosts): its ends of the flows.
    A host's process is one session, which holds a share of its NIC's memory
    (half by default) for all its ends: a host with more ends than the lab's
    other hosts (a permutation on 2 hosts: one to send, one to receive)
    splits it between them, as a receiver does between its peers."""
    hosts = sorted({h for f in flows for h in (f.src, f.dst)}, key=topo.host_names().index)
    ends = collections.Counter(h for f in flows for h in (f.src, f.dst))
    chunk = {
        f.name: rdma_write.default_chunk(
            topo, f.size, peers=max(topo.hosts - 1, ends[f.src], ends[f.dst])
        )
        for f in flows
    }
    return {
        h: {
            "lab": lab_name,
            "host": h,
            "sends": [
                {"name": f.name, "size": f.size, "chunk": chunk[f.name]}
                for f in flows if f.src == h
            ],
            "recvs": [{"name": f.name, "chunk": chunk[f.name]} for f in flows if f.dst == h],
        }
        for h in hosts
    }  # fmt: skip


def connect_orders(
    flows: list[Flow], ready: dict[str, dict], *, cc_profile: int, cc: dict | None, cwnd: int | None
) -> dict[str, dict]:
    """Each host's "connect" order from every host's "ready" line: the peers of
    its ends, and the QPs' options. Sets each flow's receive QP."""
    opts = {"mpr": None, "cc_profile": cc_profile, "cc": cc, "cwnd": cwnd}
    orders = {}
    for h in ready:
        peers = {f.name: ready[f.dst]["ready"]["recvs"][f.name] for f in flows if f.src == h}
        peers |= {f.name: ready[f.src]["ready"]["sends"][f.name] for f in flows if f.dst == h}
        orders[h] = {"connect": {"peers": peers, "opts": opts}}
    for f in flows:
        f.recv_qpns = [int(ready[f.dst]["ready"]["recvs"][f.name]["qpn"])]
    return orders


def _drive(
    lab_name: str,
    topo: Topology,
    procs: dict[str, hostprocs.HostProc],
    flows: dict[str, Flow],
    timeout: float,
) -> dict:
    """Start the flows (their hosts' processes time them), read each flow's
    start and end as its host reports them, and sample the receive QPs meanwhile."""
    lock = threading.Lock()
    t0 = time.monotonic() + START_MARGIN_S  # every host has heard "go" by then
    deadline = t0 + timeout
    judged: list = []  # (seconds, fidelity raw sample) every FIDELITY_EVERY_S
    with (
        PortCounterTable(lab_name) as ports,
        nic.NicMaps.open(lab_name) as maps,
        fidelity.Meter(topo=topo) as meter,
    ):
        before = port_totals(topo, ports.read())
        nic_before = maps.counters()
        cpu0 = cpustat.sample()
        for h, p in procs.items():
            starts = {f.name: int((t0 + f.start) * 1e9) for f in flows.values() if f.src == h}
            p.tell({"go": True, "starts_ns": starts, "deadline_ns": int(deadline * 1e9),
                    "wait": timeout})  # fmt: skip
        out = {p.proc.stdout.fileno(): p for p in procs.values()}
        pending = set(flows)
        every = SAMPLE_S * max(1.0, len(flows) / SAMPLE_FLOWS)
        while pending and time.monotonic() < deadline + REPORT_GRACE_S:
            _sample(maps, list(flows.values()), t0, lock)
            if time.monotonic() - t0 >= len(judged) * FIDELITY_EVERY_S:
                judged.append((time.monotonic() - t0, meter.raw()))
            for fd in readable(out, every):
                p = out[fd]
                alive = p.feed()
                for line in p.lines:
                    take_line(line, flows, pending, t0, p.netns)
                p.lines.clear()
                if not alive:
                    out.pop(fd)
                    for name in [n for n in pending if flows[n].src == _host_of(procs, p)]:
                        flows[name].error = f"the process of {flows[name].src} ended"
                        flows[name].done_at = time.monotonic() - t0
                        pending.discard(name)
        _sample(maps, list(flows.values()), t0, lock)
        cpu = cpustat.busy_cores(cpu0, cpustat.sample())
        fid = meter.stop()
        fid_meter = meter
        after = port_totals(topo, ports.read())
        nic_after = maps.counters()
    for f in flows.values():
        if f.done_at is None:
            f.error = f.error or f"did not end within {timeout:g} s"
    switch = {tier: {k: after[tier][k] - before[tier][k] for k in after[tier]} for tier in after}
    nic_delta = {k: nic_after.get(k, 0) - nic_before.get(k, 0) for k in nic_after}
    return {
        "seconds": round(time.monotonic() - t0, 3),
        "cpu_busy_cores": cpu,
        "fidelity": fid,
        # raw samples for the verdict over the report's window (run_scenario)
        "_fidelity": (fid_meter, judged),
        "host_processes": len(procs),
        "switch": switch,
        "nic": {
            k: nic_delta.get(k, 0)
            for k in ("nack_trimmed", "nack_trimmed_lasthop", "tx_retx", "timeout_kicks")
        },
    }


def _host_of(procs: dict[str, hostprocs.HostProc], proc: hostprocs.HostProc) -> str:
    return next(h for h, p in procs.items() if p is proc)


def take_line(line: dict, flows: dict[str, Flow], pending: set[str], t0: float, where: str) -> None:
    """A host process's report: a flow started or ended (or the process failed)."""
    if "started" in line:
        flows[line["started"]].opened_at = line["at_ns"] / 1e9 - t0
    elif "done" in line:
        f = flows[line["done"]]
        f.result, f.error = line["result"], line["error"]
        f.done_at = (line.get("at_ns") or time.monotonic_ns()) / 1e9 - t0
        pending.discard(f.name)
    elif "error" in line:
        for name in list(pending):
            flows[name].error = f"{where}: {line['error']}"
        pending.clear()


def _sample(maps: nic.NicMaps, flows: list[Flow], t0: float, lock: threading.Lock) -> None:
    """Each running flow's bytes placed and when the last of them was placed,
    both from its receive QPs' counters (nic_rq_stats.placed_bytes and
    last_place_ns, read together under the QP's lock; bpf_ktime_get_ns is
    CLOCK_MONOTONIC): exact however late this thread runs on a busy machine."""
    with lock:
        wanted = {q: f for f in flows if f.done_at is None for q in f.recv_qpns}
    placed: dict[int, int] = {}
    last: dict[int, int] = {}
    for qpn, flow in wanted.items():
        with contextlib.suppress(KeyError, OSError):
            st = maps.rq_raw(qpn).stats
            placed[id(flow)] = placed.get(id(flow), 0) + st.placed_bytes
            last[id(flow)] = max(last.get(id(flow), 0), st.last_place_ns)
    peers = {q: f for q, f in wanted.items()}
    with contextlib.suppress(OSError):
        for qpn in maps.tx_qpns():
            with contextlib.suppress(KeyError):
                raw = maps.sq_raw(qpn)
                flow = peers.get(raw.peer_qpn)
                if flow is not None and raw.cwnd:
                    flow.cwnds.append(raw.cwnd)
    for flow in {id(f): f for f in wanted.values()}.values():
        if last.get(id(flow)):
            sample = (last[id(flow)] / 1e9 - t0, placed[id(flow)])
            if not flow.samples or sample[0] > flow.samples[-1][0]:
                flow.samples.append(sample)


def port_totals(topo: Topology, table: PortCounterTable) -> dict[str, dict[str, int]]:
    """Egress queue counters summed by where the port is: lasthop (T0 to host),
    up (T0 to T1), down (T1 to T0)."""
    keys = ("enqueued", "ecn_marked", "trimmed", "drop_buffer")
    out = {tier: dict.fromkeys(keys, 0) for tier in ("lasthop", "up", "down")}
    for port in topo.switch_ports():
        kind = topo.nodes[port.node].kind
        peer = port.ifname
        tier = "lasthop" if peer.startswith("h") else "up" if kind == "t0" else "down"
        row = table.as_dict(port.port_id, EGRESS)
        for k in keys:
            out[tier][k] += row.get(k, 0)
    return out


# ---- measuring ----------------------------------------------------------------------------


def window_goodput(flow: Flow, start: float, end: float) -> float | None:
    """Bits per second a flow placed between two times (from its samples),
    None if the window holds fewer than two samples."""
    inside = [(t, b) for t, b in flow.samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
        return None
    (ta, ba), (tb, bb) = inside[0], inside[-1]
    return (bb - ba) * 8 / (tb - ta)


def whole_goodput(flow: Flow) -> float | None:
    r = flow.result or {}
    return r.get("goodput_bps") if r.get("seconds") else None


def _flow_row(flow: Flow, goodput: float | None, against: float) -> dict:
    r = flow.result or {}
    qps = r.get("qps") or []
    cw = flow.cwnds
    return {
        "name": flow.name,
        "src": flow.src,
        "dst": flow.dst,
        "role": flow.role,
        "bytes": r.get("bytes", 0),
        "size": flow.size,
        "seconds": r.get("seconds"),
        "goodput_bps": goodput,
        "whole_goodput_bps": whole_goodput(flow),
        "fair_bps": flow.fair_bps,
        "ratio": None if goodput is None or not against else round(goodput / against, 3),
        "retransmits": r.get("retransmits"),
        "timeouts": r.get("timeouts"),
        "error": flow.error,
        "qp_states": [q.get("state") for q in qps],
        "cwnd_mean": round(sum(cw) / len(cw), 1) if cw else None,
        "cwnd_min": min(cw) if cw else None,
    }


def _jain(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    if not values or not any(values):
        return None
    return round(sum(values) ** 2 / (len(values) * sum(v * v for v in values)), 3)


def _qps_in_err(flows: list[Flow]) -> int:
    n = 0
    for f in flows:
        qps = (f.result or {}).get("qps") or []
        n += sum(1 for q in qps if q.get("state") == "ERR")
        if f.error and not qps:
            n += 1  # no QP record came back: count the flow as failed
    return n


def incast_report(flows: list[Flow], capacity_bps: float | None, seg: int) -> dict:
    incast = [f for f in flows if f.role == "incast"]
    bys = [f for f in flows if f.role == "bystander"]
    starts = [f.opened_at for f in incast if f.opened_at is not None]
    ends = [f.done_at for f in incast if f.done_at is not None]
    win = (max(starts) + WARMUP_S, min(ends)) if starts and ends else (0.0, 0.0)
    rows = []
    for f in incast:
        g = window_goodput(f, *win)
        rows.append(_flow_row(f, g, f.fair_bps))
    total = sum(r["goodput_bps"] or 0 for r in rows)
    out: dict = {
        "window_s": [round(win[0], 3), round(win[1], 3)],
        "incast": {
            "senders": len(incast),
            "receiver": incast[0].dst if incast else None,
            "aggregate_bps": total,
            "receiver_link_bps": capacity_bps,
            "utilization": round(total / capacity_bps, 3) if capacity_bps else None,
            "ceiling": round(ceiling_one_way(seg), 3),  # the most payload fills of a link
            "jain_fairness": _jain([r["goodput_bps"] for r in rows]),
        },
        "flows": rows,
        "qps_in_err": _qps_in_err(flows),
    }
    if bys:
        b = bys[0]
        # While the incast lasts: from the bystander's start until it ends or
        # the last sender ends, whichever is first.
        bwin = ((b.opened_at or 0) + WARMUP_S, min(b.done_at or 0, max(ends, default=0)))
        g = window_goodput(b, *bwin)
        row = _flow_row(b, g, b.fair_bps)
        out["flows"].append(row)
        out["bystander"] = {
            "name": b.name,
            "goodput_bps": g,
            "fair_bps": b.fair_bps,
            "ratio": row["ratio"],
            "window_s": [round(bwin[0], 3), round(bwin[1], 3)],
            # incast senders still sending at the window's start and end
            "senders_running": [
                sum(1 for f in incast if (f.done_at or 0) > t and (f.opened_at or 0) < t)
                for t in bwin
            ],
        }
    return out


def permutation_report(flows: list[Flow], capacity_bps: float | None, seg: int) -> dict:
    starts = [f.opened_at for f in flows if f.opened_at is not None]
    ends = [f.done_at for f in flows if f.done_at is not None]
    win = (max(starts) + WARMUP_S, min(ends)) if starts and ends else (0.0, 0.0)
    rows = [_flow_row(f, window_goodput(f, *win), capacity_bps or 0) for f in flows]
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    return {
        "window_s": [round(win[0], 3), round(win[1], 3)],
        "link_bps": capacity_bps,
        "flows": rows,
        "min_ratio": min(ratios) if ratios else None,
        "mean_ratio": round(sum(ratios) / len(ratios), 3) if ratios else None,
        # each host link carries data one way and the SACKs of another flow
        "ceiling": round(ceiling_both_ways(seg), 3),
        "min_of_ceiling": round(min(ratios) / ceiling_both_ways(seg), 3) if ratios else None,
        "jain_fairness": _jain([r["goodput_bps"] for r in rows]),
        "qps_in_err": _qps_in_err(flows),
    }


# ---- the scenarios ------------------------------------------------------------------------


def _profile(no_cc: bool, cc_profile: int | None) -> int:
    if no_cc:
        return nscc.FIXED
    pid = nscc.DEFAULT_NSCC if cc_profile is None else cc_profile
    nscc.profile(pid)  # ValueError if there is none
    return pid


def _header(name: str, topo: Topology, profile: int, duration: float) -> dict:
    p = nscc.profile(profile)
    return {
        "scenario": name,
        "lab": topo.lab,
        "cc_profile": profile,
        "cc": p.name,
        "duration_s": duration,
        "topology": {
            "hosts": topo.hosts,
            "planes": topo.planes,
            "link_bps": topo.rate_bps,
            "fabric_bps": topo.fabric_rate_bps,
            "base_rtt_ns": topo.queues.base_rtt_ns,
        },
        "host_bps": host_rate_bps(topo),
    }


def incast(
    lab_name: str,
    *,
    senders: int = 7,
    receiver: str | None = None,
    bystander: tuple[str, str] | None | bool = True,
    **opts,
) -> dict:
    """The N:1 incast with its bystander (see the module); a report dict.
    opts: those of run_scenario."""
    # Fair goodputs: of what payload can fill of each link (data one way; the
    # SACKs a host sends share its uplink with its data, a few percent here).
    return run_scenario(
        "incast",
        lab_name,
        lambda topo: incast_flows(topo, senders, receiver=receiver, bystander=bystander),
        ceiling_one_way,
        incast_report,
        **opts,
    )


def permutation(lab_name: str, *, seed: int | None = None, **opts) -> dict:
    """Every host WRITEs to another at once; each flow against its link rate.
    opts: those of run_scenario."""
    return run_scenario(
        "permutation",
        lab_name,
        lambda topo: permutation_flows(topo, seed=seed),
        ceiling_both_ways,
        permutation_report,
        **opts,
    )


def run_scenario(
    name: str,
    lab_name: str,
    make_flows,
    payload: Callable[[int], float],
    report,
    *,
    duration: float = 4.0,
    no_cc: bool = False,
    cc_profile: int | None = None,
    cc: dict | None = None,
    cwnd: int | None = None,
    timeout: float | None = None,
    topo: Topology | None = None,
    runner: Callable[..., dict] | None = None,
) -> dict:
    """Flows from make_flows(topology), sized for `duration` at their fair
    goodput (payload(seg): the fraction of a link goodput can fill with the
    lab's packets), run with CC
    profile cc_profile (profile 0 with no_cc; cc: NSCC fields to override;
    cwnd: the fixed window), given up after `timeout` (default 15 durations,
    at least 60 s); report(flows, capacity, seg) makes the figures.
    topo and runner: another site's (a cluster lab's: its topology, and a
    run_flows of its machines); default this machine's lab and run_flows."""
    if topo is None:
        _, topo = open_lab(lab_name)
    profile = _profile(no_cc, cc_profile)
    flows = make_flows(topo)
    capacity = host_rate_bps(topo) or 1e9 * topo.planes
    seg = nic.seg_size(topo.mtu)
    size_flows(flows, capacity, duration, payload(seg))
    run = (runner or run_flows)(
        lab_name,
        flows,
        cc_profile=profile,
        cc=cc,
        cwnd=cwnd,
        timeout=timeout or max(60.0, 15 * duration),
    )
    out = _header(name, topo, profile, duration) | run | report(flows, capacity, seg)
    # Judged over the window the figures come from (all flows running), when
    # it holds two samples; else over the whole run.
    meter, samples = out.pop("_fidelity")
    pair = fidelity.in_window(samples, *out["window_s"])
    if pair is not None:
        out["fidelity"] = {**meter.judge_between(*pair), "over": "window"}
    return out
