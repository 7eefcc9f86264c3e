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


def parse_size(text: str) -> int:
    """'1G', '64MiB', '4096' -> bytes; 1 byte .. 1 TiB."""
    value = topology.parse_size(text, WRITE_SIZE_UNITS)
    if not 1 <= value <= SIZE_MAX:
        raise ValueError(f"size must be 1 byte .. 1 TiB, not {text!r}")
    return value


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
) -> dict:
    """Run one transfer; returns the sender daemon's result (see sendjob.Job.result)."""
    _, topo = load_lab(lab_name)
    for name in (src, dst):
        if name not in topo.host_names():
            raise ValueError(
                f"no host {name!r} in lab {lab_name!r} (hosts: {', '.join(topo.host_names())})"
            )
    if src == dst:
        raise ValueError("source and destination must be different hosts")
    half = hostmem.half_elems(lab.nic_memory_elems(topo), topo.hosts) * hostmem.KIB
    chunk = hostmem.chunk_bytes(-(-size // qps), qps, half)
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
    for key, value in (("timeout", timeout), ("cwnd", cwnd), ("reorder_ns", reorder_ns)):
        if value is not None:
            request[key] = value
    if retry:
        request["retry"] = retry
    try:
        result = ctl.call(lab_name, src, request, timeout=wait)
    finally:
        closed = ctl.call(lab_name, dst, {"op": "rq_close", "qpns": [q["qpn"] for q in remote]})
    result["receiver"] = closed.get("stats", {})
    result["chunk"] = chunk
    result["src"], result["dst"] = src, dst
    return result
