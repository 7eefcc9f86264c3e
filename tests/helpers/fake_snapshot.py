"""Snapshots without a lab, for the pure tests of rates, filters, views and prom.

The structure comes from the real code (topology, aggregate.path_defs,
aggregate.planes and aggregate.paths); only the counter values are made up:
every link direction carries `pkts` packets of 1000 bytes, except where a
test says otherwise.
"""

from __future__ import annotations

from mrc_nic.lab import topology
from mrc_nic.observe import aggregate
from mrc_nic.observe.port_table import FIELDS
from tests.helpers.env import NETNS_DIR


def default_topology() -> topology.Topology:
    return topology.load(NETNS_DIR / "default.toml", lab="fake")


def counters(pkts: int, drops: int = 0, size: int = 1000) -> dict:
    c = dict.fromkeys(FIELDS, 0)
    c.update(
        pkts=pkts + drops,
        bytes=(pkts + drops) * size,
        passed_pkts=pkts,
        passed_bytes=pkts * size,
        drop_blackhole=drops,
    )
    return c


def kernel(tx: int, rx: int, queue_drops: int = 0) -> dict:
    return {
        "admin_up": True,
        "carrier": True,
        "operstate": "UP",
        "rx_packets": rx,
        "rx_bytes": rx * 1000,
        "tx_packets": tx,
        "tx_bytes": tx * 1000,
        "rx_dropped": 0,
        "tx_dropped": 0,
        "queue_drops": queue_drops,
    }


def send_qp(qpn: int, acked: int, planes: int = 4, evs_per_plane: int = 32, bad_plane=None):
    plane_rows = []
    for p in range(planes):
        states = dict.fromkeys(["GOOD", "ASSUMED_BAD", "DENIED", "SKIP", "UNKNOWN"], 0)
        states["ASSUMED_BAD" if p == bad_plane else "GOOD"] = evs_per_plane
        plane_rows.append(
            {
                "plane": p,
                "evs_by_state": states,
                "tx_pkts": acked // planes,
                "tx_bytes": acked // planes * 1024,
                "retx_pkts": 0,
                "acks": acked // planes,
                "lost_pkts": 0,
                "ecn_marks": 0,
                "nack_trimmed": 0,
                "srtt_ns": 40_000,
            }
        )
    total = {
        s: sum(r["evs_by_state"][s] for r in plane_rows) for s in plane_rows[0]["evs_by_state"]
    }
    return {
        "qpn": qpn,
        "qp": f"{qpn:#08x}",
        "host": "h0",
        "peer": "h1",
        "peer_qp": "0x010001",
        "send": {
            "state": "RTS",
            "engine": True,
            "mpr": 2,
            "window": 256,
            "cwnd": 0,
            "in_flight": 12,
            "snd_una": acked,
            "snd_nxt": acked + 12,
            "ev_min_active": 0,
            "wqes_done": 0,
            "retx_queue": 0,
            "counters": {"acked_pkts": acked, "lost_pkts": 0, "sacks": acked},
            "tx_counters": {
                "data_pkts": acked + 12,
                "data_bytes": (acked + 12) * 1024,
                "retx_pkts": 0,
            },
            "rtt_ns": {"min": 20_000, "srtt_mean": 40_000, "srtt_max": 60_000},
            "evs": {"total": planes * evs_per_plane, "by_state": total},
            "planes": plane_rows,
            "ev_list": None,
        },
        "recv": None,
        "rates": None,
    }


def recv_qp(qpn: int, placed: int) -> dict:
    return {
        "qpn": qpn,
        "qp": f"{qpn:#08x}",
        "host": "h1",
        "peer": "h0",
        "peer_qp": "0x000001",
        "send": None,
        "recv": {
            "state": "RTR",
            "mpr": 2,
            "window": 256,
            "cum_psn": placed,
            "msn": 0,
            "received_ahead": 0,
            "pending_msgs": 0,
            "counters": {"placed_pkts": placed, "placed_bytes": placed * 1024, "dup_pkts": 0},
        },
        "rates": None,
    }


def snapshot(
    topo: topology.Topology,
    seconds: float,
    *,
    pkts=lambda link, direction: 0,
    drops=lambda link, direction: 0,
    faults: list[dict] = (),
    qps: list[dict] = (),
    kernel_seconds: float | None = None,
    host_port_pkts: int = 0,
    nic_counters: dict | None = None,
) -> dict:
    """A snapshot at `seconds` (monotonic) whose link counters are pkts(link, direction)."""
    link_fault = {name: f["id"] for f in faults for name in f["links"]}
    links = [
        {
            "name": lk.name,
            "plane": lk.plane,
            "kind": lk.kind,
            "upper": f"{lk.upper.node}:{lk.upper.ifname}",
            "lower": f"{lk.lower.node}:{lk.lower.ifname}",
            "rate": lk.rate_bps,
            "state": "up",
            "fault": link_fault.get(lk.name),
            "up": counters(pkts(lk, "up"), drops(lk, "up")),
            "down": counters(pkts(lk, "down"), drops(lk, "down")),
            "rates": None,
        }
        for lk in topo.links.values()
    ]
    kernel_info = {
        h: {f"eth{p}": kernel(host_port_pkts, host_port_pkts) for p in range(topo.planes)}
        for h in topo.host_names()
    }
    hosts = [
        {
            "name": h,
            "netns": topo.netns(h),
            "ports": [
                {
                    "ifname": f"eth{p}",
                    "plane": p,
                    "address": str(topo.host_address(topo.nodes[h].index, p)),
                    "kernel": kernel_info[h][f"eth{p}"],
                    "rates": None,
                }
                for p in range(topo.planes)
            ],
        }
        for h in topo.host_names()
    ]
    k_seconds = seconds if kernel_seconds is None else kernel_seconds
    return {
        "schema": 1,
        "lab": topo.lab,
        "time": 1_700_000_000.0 + seconds,
        "monotonic_ns": int(seconds * 1e9),
        "kernel_monotonic_ns": int(k_seconds * 1e9),
        "interval_s": None,
        "topology": topo.summary(),
        "bringup_seconds": 1.0,
        "hosts": hosts,
        "links": links,
        "ports": [],
        "faults": [_fault_row(f) for f in faults],
        "planes": aggregate.planes(topo.planes, links, kernel_info),
        "paths": aggregate.paths(aggregate.path_defs(topo), links),
        "qps": [dict(q) for q in qps],
        "nic": {"counters": nic_counters, "rates": None},
        "filter": {"host": None, "plane": None},
    }


def plane_fault(topo: topology.Topology, plane: int, fault_id: int = 1) -> dict:
    return {
        "id": fault_id,
        "target": f"plane {plane}",
        "mode": "blackhole",
        "direction": "both",
        "links": [lk.name for lk in topo.links_of_plane(plane)],
    }


def _fault_row(fault: dict) -> dict:
    """A fault as a snapshot shows it: BPF faults count their drops, carrier faults do not."""
    counted = fault["mode"] in ("blackhole", "loss")
    return dict(
        fault,
        text=fault["mode"],
        worker_alive=None,
        drops=0 if counted else None,
        drops_counted=counted,
    )
