"""`mrc-nic write`: a WRITE transfer between two hosts, through their daemons.

The connection dance of verbs, over the daemons' control sockets: the
sender's daemon opens send QPs (sq_open: QP numbers, INIT), the receiver's
opens one receive QP per send QP (rq_open: QP number, rkey, region; RTR),
then the sender's runs the transfer (write: RTR -> RTS, post, reliability,
verification) and answers when it ends; the receive QPs are closed last,
whatever happened. The caller's process never touches a packet or a map.
"""

from __future__ import annotations

from mrc_nic import ctl, hostmem, lab, topology
from mrc_nic.faults import load_lab

# Transfer sizes: binary units, as RDMA tools count (perftest, ib_write_bw).
WRITE_SIZE_UNITS = {
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
}
SIZE_MAX = 2**40
# A lab with slow links has a long design RTT ([queues] base_rtt): a QP's
# retransmission timeout and reorder window must scale with it, or queueing
# alone fires them (10 Mbit/s links: a 4.8 ms base RTT, above the default
# timeout of 4.2 ms). Defaults when not given: the timeout at least this many
# base RTTs, the reorder window this many (never below the daemon's defaults,
# which fit the default lab's 100 us).
TIMEOUT_RTTS = 8
REORDER_RTTS = 4


def parse_size(text: str) -> int:
    """'1G', '64MiB', '4096' -> bytes; 1 byte .. 1 TiB."""
    value = topology.parse_size(text, WRITE_SIZE_UNITS)
    if not 1 <= value <= SIZE_MAX:
        raise ValueError(f"size must be 1 byte .. 1 TiB, not {text!r}")
    return value


def lab_defaults(topo: topology.Topology) -> tuple[int, int]:
    """(timeout exponent, reorder window ns) that fit a lab's design RTT."""
    from mrc_nic import qp, sendjob

    rtt = topo.queues.base_rtt_ns
    timeout = sendjob.DEFAULT_TIMEOUT
    while qp.TIMEOUT_UNIT_S * 2**timeout * 1e9 < TIMEOUT_RTTS * rtt and timeout < qp.TIMEOUT_MAX:
        timeout += 1
    reorder = min(max(sendjob.DEFAULT_REORDER_NS, REORDER_RTTS * rtt), sendjob.REORDER_NS_MAX)
    return timeout, reorder


def write(
    lab_name: str,
    src: str,
    dst: str,
    size: int,
    *,
    qps: int = 1,
    imm: bool = False,
    verify: bool = False,
    mpr: int = 8,
    cwnd: int | None = None,
    reorder_ns: int | None = None,
    timeout: int | None = None,
    retry: dict | None = None,
    seed: int = 1,
    wait: float = 3600.0,
    cc_profile: int | None = None,
    cc: dict | None = None,
    chunk: int | None = None,
    on_open=None,
) -> dict:
    """Run one transfer; returns the sender daemon's result (see sendjob.Job.result).

    cc_profile: the send QPs' CC profile (mrc_nic.nscc.PROFILES; default NSCC),
    cc: NSCC fields to override. chunk: the size of each WRITE (default: what
    host memory allows, hostmem.chunk_bytes). on_open: called with the receive
    QPs ([{qpn, rkey, region}]) once they exist, before the transfer starts
    (a caller that watches their counters)."""
    _, topo = load_lab(lab_name)
    for name in (src, dst):
        if name not in topo.host_names():
            raise ValueError(
                f"no host {name!r} in lab {lab_name!r} (hosts: {', '.join(topo.host_names())})"
            )
    if src == dst:
        raise ValueError("source and destination must be different hosts")
    half = hostmem.half_elems(lab.nic_memory_elems(topo), topo.hosts) * hostmem.KIB
    if chunk is None:
        chunk = hostmem.chunk_bytes(-(-size // qps), qps, half, peers=topo.hosts - 1)
    scaled_timeout, scaled_reorder = lab_defaults(topo)
    timeout = scaled_timeout if timeout is None else timeout
    reorder_ns = scaled_reorder if reorder_ns is None else reorder_ns
    opened = ctl.call(lab_name, src, {"op": "sq_open", "count": qps, "chunk": chunk})
    remote = ctl.call(
        lab_name,
        dst,
        {"op": "rq_open", "peer": src, "peer_qpns": opened["qpns"], "chunk": chunk, "mpr": mpr},
    )["qps"]
    request = {
        "op": "write",
        "dst": dst,
        "qpns": opened["qpns"],
        "remote": remote,
        "size": size,
        "chunk": chunk,
        "mpr": mpr,
        "imm": imm,
        "verify": verify,
        "seed": seed,
    }
    optional = (
        ("timeout", timeout),
        ("cwnd", cwnd),
        ("reorder_ns", reorder_ns),
        ("cc_profile", cc_profile),
        ("cc", cc),
    )
    for key, value in optional:
        if value is not None:
            request[key] = value
    if retry:
        request["retry"] = retry
    try:
        if on_open is not None:
            on_open(remote)
        result = ctl.call(lab_name, src, request, timeout=wait)
    finally:
        closed = ctl.call(lab_name, dst, {"op": "rq_close", "qpns": [q["qpn"] for q in remote]})
    result["receiver"] = closed.get("stats", {})
    result["chunk"] = chunk
    result["src"], result["dst"] = src, dst
    return result
