"""`mrc-nic write`: a WRITE transfer between two hosts, through their daemons.

The connection dance of verbs, over the daemons' control sockets: the
sender's daemon opens send QPs (sq_open: QP numbers, INIT), the receiver's
opens one receive QP per send QP (rq_open: QP number, rkey, region; RTR),
then the sender's runs the transfer (write: RTR -> RTS, post, reliability,
verification) and answers when it ends; the receive QPs are closed last,
whatever happened. The caller's process never touches a packet or a map.
"""

from __future__ import annotations

from mrc_nic import ctl, hostmem, lab
from mrc_nic.faults import load_lab

SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 2**10,
    "KB": 2**10,
    "KIB": 2**10,
    "M": 2**20,
    "MB": 2**20,
    "MIB": 2**20,
    "G": 2**30,
    "GB": 2**30,
    "GIB": 2**30,
}
SIZE_MAX = 2**40


def parse_size(text: str) -> int:
    """'1G', '64MiB', '4096', '1.5M' -> bytes (binary units)."""
    t = text.strip().upper()
    i = len(t)
    while i and not (t[i - 1].isdigit() or t[i - 1] == "."):
        i -= 1
    number, unit = t[:i], t[i:].strip()
    if unit not in SIZE_UNITS or not number:
        raise ValueError(f"bad size {text!r}: use a number with an optional unit K, M or G")
    value = int(float(number) * SIZE_UNITS[unit])
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
    mpr: int = 2,
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
    half = lab.nic_memory_elems(topo) // topo.hosts // 2 * hostmem.KIB
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
    if timeout is not None:
        request["timeout"] = timeout
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
