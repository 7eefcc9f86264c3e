"""A snapshot as Prometheus metrics, through prometheus_client: a custom collector
over the snapshot, its text exposition (format 0.0.4) and its WSGI app for /metrics.

Families are declared once below (name, type, help); counters end in `_total`.
The library does the format: grouping, escaping of label values and help,
number formatting. Rates are left to PromQL
(rate(...)): only counters and gauges of the snapshot are exposed. Labels:
plane, path, ev, qp, host (and peer), link, direction, reason, state.
Per-EV series come only with `--by ev` (up to 256 per QP).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Metric, generate_latest, make_wsgi_app
from prometheus_client.registry import Collector

from mrc_nic.observe.aggregate import DROP_REASONS

# Drop reasons a link direction or path counts in BPF (drop_<reason> counters).
LINK_DROP_REASONS = ("blackhole", "loss", "buffer")

_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

# name: (type, help). The order here is the order of the exposition.
FAMILIES = {
    "mrc_link_packets_total": ("counter", "Packets seen on a link direction, before its faults."),
    "mrc_link_bytes_total": ("counter", "Bytes seen on a link direction, before its faults."),
    "mrc_link_passed_packets_total": ("counter", "Packets a link direction let through."),
    "mrc_link_passed_bytes_total": ("counter", "Bytes a link direction let through."),
    "mrc_link_drops_total": ("counter", "Packets a link direction dropped, by fault reason."),
    "mrc_link_up": ("gauge", "1 if both ends of the link are admin up with carrier."),
    "mrc_link_fault": ("gauge", "1 for the fault in force on a link (mode, id)."),
    "mrc_plane_offered_packets_total": ("counter", "Packets hosts sent into a plane."),
    "mrc_plane_offered_bytes_total": ("counter", "Bytes hosts sent into a plane."),
    "mrc_plane_delivered_packets_total": ("counter", "Packets a plane delivered to hosts."),
    "mrc_plane_delivered_bytes_total": ("counter", "Bytes a plane delivered to hosts."),
    "mrc_plane_drops_total": ("counter", "Packets a plane dropped, by reason."),
    "mrc_plane_ecn_marked_packets_total": (
        "counter",
        "Packets the plane's switch egress queues marked ECN CE.",
    ),
    "mrc_plane_trimmed_packets_total": (
        "counter",
        "Packets the plane's switch egress queues trimmed to their headers.",
    ),
    "mrc_plane_backlog_hwm_bytes": (
        "gauge",
        "Highest backlog any switch egress queue of the plane reached (its BPF twin).",
    ),
    "mrc_path_packets_total": ("counter", "Packets through a path's T0-T1 link (passed)."),
    "mrc_path_bytes_total": ("counter", "Bytes through a path's T0-T1 link (passed)."),
    "mrc_path_drops_total": ("counter", "Packets dropped on a path's T0-T1 link, by reason."),
    "mrc_port_ecn_marked_packets_total": ("counter", "Packets a switch egress port marked CE."),
    "mrc_port_trimmed_packets_total": ("counter", "Packets a switch egress port trimmed."),
    "mrc_port_buffer_drops_total": (
        "counter",
        "Packets a switch egress port dropped: they did not fit its buffer.",
    ),
    "mrc_port_backlog_hwm_bytes": ("gauge", "Highest backlog of a switch egress queue."),
    "mrc_host_port_packets_total": ("counter", "Packets of a host port (kernel counters)."),
    "mrc_host_port_bytes_total": ("counter", "Bytes of a host port (kernel counters)."),
    "mrc_qp_acked_packets_total": ("counter", "Packets of a send QP acknowledged."),
    "mrc_qp_sent_packets_total": ("counter", "Data packets a send QP sent (first time)."),
    "mrc_qp_sent_bytes_total": ("counter", "Data bytes a send QP sent (first time)."),
    "mrc_qp_retransmitted_packets_total": ("counter", "Packets a send QP sent again."),
    "mrc_qp_lost_packets_total": ("counter", "Packets a send QP found lost."),
    "mrc_qp_window_packets": ("gauge", "A send QP's window (MPR x 128 PSNs)."),
    "mrc_qp_cwnd_packets": ("gauge", "A send QP's congestion window (0: the window)."),
    "mrc_qp_in_flight_packets": ("gauge", "PSNs a send QP has sent and not had acked."),
    "mrc_qp_srtt_seconds": ("gauge", "Mean smoothed RTT over a send QP's EVs with samples."),
    "mrc_qp_rtt_min_seconds": ("gauge", "Lowest RTT over a send QP's EVs."),
    "mrc_qp_evs": ("gauge", "EVs of a send QP in each state."),
    "mrc_qp_plane_sent_packets_total": ("counter", "Packets a send QP sent on a plane."),
    "mrc_qp_plane_evs": ("gauge", "EVs of a send QP on a plane in each state."),
    "mrc_qp_placed_packets_total": ("counter", "Packets a receive QP placed in memory."),
    "mrc_qp_placed_bytes_total": ("counter", "Bytes a receive QP placed: its goodput."),
    "mrc_qp_duplicate_packets_total": ("counter", "Duplicate packets a receive QP saw."),
    "mrc_ev_sent_packets_total": ("counter", "Packets sent on an EV (--by ev)."),
    "mrc_ev_acks_total": ("counter", "SACKs received on an EV (--by ev)."),
    "mrc_ev_lost_packets_total": ("counter", "Packets found lost on an EV (--by ev)."),
    "mrc_ev_state": ("gauge", "1 for an EV's state (--by ev)."),
    "mrc_ev_srtt_seconds": ("gauge", "An EV's smoothed RTT (--by ev)."),
    "mrc_nic_outcomes_total": ("counter", "The NIC program's outcome counters, lab-wide."),
    "mrc_fault_drops_total": ("counter", "Packets a fault dropped since it was applied."),
}


class Exposition:
    """Samples of one snapshot grouped by family, as prometheus_client metric
    families (in the order of FAMILIES); `text()` is the library's exposition."""

    def __init__(self) -> None:
        self._samples: dict[str, list[tuple[dict[str, str], float]]] = {}

    def add(self, name: str, labels: dict[str, object], value: float | int | None) -> None:
        if value is None:
            return  # not known (e.g. no RTT sample yet): no sample at all
        if name not in FAMILIES:
            raise KeyError(f"undeclared metric family {name}")
        for label in labels:
            if not _LABEL.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"bad label name {label!r}")
        self._samples.setdefault(name, []).append(
            ({k: "" if v is None else str(v) for k, v in labels.items()}, float(value))
        )

    def families(self) -> list[Metric]:
        out = []
        for name, (kind, help_text) in FAMILIES.items():
            samples = self._samples.get(name)
            if not samples:
                continue
            # The library appends _total to a counter's name itself.
            family = Metric(
                name.removesuffix("_total") if kind == "counter" else name, help_text, kind
            )
            for labels, value in samples:
                family.add_sample(name, labels, value)
            out.append(family)
        return out

    def text(self) -> str:
        return generate_latest(_Fixed(self.families())).decode()


class _Fixed:
    """A registry-shaped holder of ready families: generate_latest only calls collect()."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class SnapshotCollector(Collector):
    """A custom collector: every scrape renders a fresh snapshot of the lab."""

    def __init__(self, take: Callable[[], dict]) -> None:
        self._take = take

    def collect(self) -> Iterator[Metric]:
        return iter(exposition(self._take()).families())


def render(snap: dict) -> str:
    """The text exposition of one snapshot."""
    return exposition(snap).text()


def exposition(snap: dict) -> Exposition:
    """Every family of one snapshot."""
    out = Exposition()
    _links(out, snap)
    _planes(out, snap)
    _paths(out, snap)
    _ports(out, snap)
    for host in snap["hosts"]:
        for port in host["ports"]:
            k = port["kernel"]
            if k is None:
                continue
            for direction in ("tx", "rx"):
                labels = {"host": host["name"], "plane": port["plane"], "direction": direction}
                out.add("mrc_host_port_packets_total", labels, k[f"{direction}_packets"])
                out.add("mrc_host_port_bytes_total", labels, k[f"{direction}_bytes"])
    for qp in snap["qps"]:
        _qp(out, qp)
    for name, value in (snap["nic"]["counters"] or {}).items():
        out.add("mrc_nic_outcomes_total", {"outcome": name}, value)
    for f in snap["faults"]:
        labels = {"fault": f["id"], "target": f["target"], "mode": f["mode"]}
        out.add("mrc_fault_drops_total", labels, f["drops"])
    return out


def _links(out: Exposition, snap: dict) -> None:
    faults = {f["id"]: f for f in snap["faults"]}
    for lk in snap["links"]:
        base = {"link": lk["name"], "plane": lk["plane"]}
        for direction in ("up", "down"):
            c = lk[direction]
            labels = {**base, "direction": direction}
            out.add("mrc_link_packets_total", labels, c["pkts"])
            out.add("mrc_link_bytes_total", labels, c["bytes"])
            out.add("mrc_link_passed_packets_total", labels, c["passed_pkts"])
            out.add("mrc_link_passed_bytes_total", labels, c["passed_bytes"])
            for reason in LINK_DROP_REASONS:
                out.add("mrc_link_drops_total", {**labels, "reason": reason}, c[f"drop_{reason}"])
        if lk["state"] is not None:
            out.add("mrc_link_up", base, int(lk["state"] == "up"))
        if lk["fault"] is not None and lk["fault"] in faults:
            mode = faults[lk["fault"]]["mode"]
            out.add("mrc_link_fault", {**base, "fault": lk["fault"], "mode": mode}, 1)


def _planes(out: Exposition, snap: dict) -> None:
    for p in snap["planes"]:
        labels = {"plane": p["plane"]}
        out.add("mrc_plane_offered_packets_total", labels, p["offered"]["pkts"])
        out.add("mrc_plane_offered_bytes_total", labels, p["offered"]["bytes"])
        out.add("mrc_plane_delivered_packets_total", labels, p["delivered"]["pkts"])
        out.add("mrc_plane_delivered_bytes_total", labels, p["delivered"]["bytes"])
        for reason in DROP_REASONS:
            out.add("mrc_plane_drops_total", {**labels, "reason": reason}, p["drops"][reason])
        queue = p.get("queue")
        if queue is not None:
            out.add("mrc_plane_ecn_marked_packets_total", labels, queue["ecn_marked"])
            out.add("mrc_plane_trimmed_packets_total", labels, queue["trimmed"])
            out.add("mrc_plane_backlog_hwm_bytes", labels, queue["backlog_hwm"])


def _ports(out: Exposition, snap: dict) -> None:
    """Switch egress queues (their BPF twin's counters)."""
    for p in snap["ports"]:
        c = p["egress"]
        if not c.get("enqueued"):
            continue  # no queue there, or nothing through it yet
        labels = {"port": f"{p['node']}:{p['ifname']}", "plane": p.get("plane")}
        out.add("mrc_port_ecn_marked_packets_total", labels, c["ecn_marked"])
        out.add("mrc_port_trimmed_packets_total", labels, c["trimmed"])
        out.add("mrc_port_buffer_drops_total", labels, c["drop_buffer"])
        out.add("mrc_port_backlog_hwm_bytes", labels, c["backlog_hwm"])


def _paths(out: Exposition, snap: dict) -> None:
    for p in snap["paths"]:
        base = {"path": p["path"], "plane": p["plane"], "host": p["host"]}
        for direction in ("up", "down"):
            c = p[direction]
            labels = {**base, "direction": direction}
            out.add("mrc_path_packets_total", labels, c["passed_pkts"])
            out.add("mrc_path_bytes_total", labels, c["passed_bytes"])
            for reason in LINK_DROP_REASONS:
                out.add("mrc_path_drops_total", {**labels, "reason": reason}, c[f"drop_{reason}"])


def _qp(out: Exposition, qp: dict) -> None:
    base = {"qp": qp["qp"], "host": qp["host"], "peer": qp["peer"]}
    send, recv = qp["send"], qp["recv"]
    if send is not None:
        out.add("mrc_qp_acked_packets_total", base, send["counters"]["acked_pkts"])
        out.add("mrc_qp_lost_packets_total", base, send["counters"]["lost_pkts"])
        out.add("mrc_qp_sent_packets_total", base, send["tx_counters"]["data_pkts"])
        out.add("mrc_qp_sent_bytes_total", base, send["tx_counters"]["data_bytes"])
        out.add("mrc_qp_retransmitted_packets_total", base, send["tx_counters"]["retx_pkts"])
        out.add("mrc_qp_window_packets", base, send["window"])
        out.add("mrc_qp_cwnd_packets", base, send["cwnd"])
        out.add("mrc_qp_in_flight_packets", base, send["in_flight"])
        out.add("mrc_qp_srtt_seconds", base, _seconds(send["rtt_ns"]["srtt_mean"]))
        out.add("mrc_qp_rtt_min_seconds", base, _seconds(send["rtt_ns"]["min"]))
        for state, n in send["evs"]["by_state"].items():
            out.add("mrc_qp_evs", {**base, "state": state}, n)
        for p in send["planes"]:
            labels = {**base, "plane": p["plane"]}
            out.add("mrc_qp_plane_sent_packets_total", labels, p["tx_pkts"])
            for state, n in p["evs_by_state"].items():
                out.add("mrc_qp_plane_evs", {**labels, "state": state}, n)
        for ev in send["ev_list"] or []:
            labels = {**base, "ev": ev["ev"], "plane": ev["plane"]}
            out.add("mrc_ev_sent_packets_total", labels, ev["counters"]["tx_pkts"])
            out.add("mrc_ev_acks_total", labels, ev["counters"]["acks"])
            out.add("mrc_ev_lost_packets_total", labels, ev["counters"]["lost_pkts"])
            out.add("mrc_ev_state", {**labels, "state": ev["state"]}, 1)
            out.add("mrc_ev_srtt_seconds", labels, _seconds(ev["srtt_ns"] or None))
    if recv is not None:
        out.add("mrc_qp_placed_packets_total", base, recv["counters"]["placed_pkts"])
        out.add("mrc_qp_placed_bytes_total", base, recv["counters"]["placed_bytes"])
        out.add("mrc_qp_duplicate_packets_total", base, recv["counters"]["dup_pkts"])


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


# ---- the endpoint ---------------------------------------------------------------------


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:9464' | 'localhost:9464' | '[::1]:9464' -> (host, port); loopback only:
    the endpoint runs as root and has no authentication."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen wants HOST:PORT such as 127.0.0.1:9464, got {text!r}")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"--listen serves on a loopback address only (127.0.0.1, ::1), not {host!r}"
        )
    return host, int(port)


def serve(
    host: str,
    port: int,
    take: Callable[[], dict],
    duration: float,
    *,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> int:
    """Serve GET /metrics (prometheus_client's WSGI app over a fresh snapshot per
    scrape) for `duration` seconds, one request at a time; returns how many
    scrapes were answered."""
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(take))
    metrics_app = make_wsgi_app(registry)
    answered = 0

    def app(environ, start_response):
        nonlocal answered
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"only /metrics is served here\n"]
        answered += 1
        return metrics_app(environ, start_response)

    class Server(WSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape would drown the terminal

    with make_server(host, port, app, server_class=Server, handler_class=QuietHandler) as server:
        bound = server.server_address[1]
        where = f"[{host}]" if ":" in host else host
        announce(f"serving http://{where}:{bound}/metrics for {duration:g}s")
        deadline = time.monotonic() + duration
        while (left := deadline - time.monotonic()) > 0:
            server.timeout = min(left, 0.5)
            server.handle_request()
    return answered
