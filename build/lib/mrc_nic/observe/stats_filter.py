"""`--host` and `--plane`: a snapshot narrowed to what one host or plane touches.

Kept: planes (by number), paths and host ports (by host and plane), links
on a kept path (a host's links: its host links and the T0-T1 links above
its T0s), switch ports at either end of a kept link, faults on a kept link,
QPs whose local or peer host is the host (with their per-plane numbers and
EVs narrowed to the plane). The lab-wide NIC counters stay as they are.
The snapshot's `filter` field says what was applied.
"""

from __future__ import annotations

from mrc_nic.errors import MrcNicError
from mrc_nic.lab.topology import Topology


class FilterError(MrcNicError, ValueError):
    """A --host or --plane that the lab does not have."""


def check(topo: Topology, host: str | None, plane: int | None) -> None:
    if host is not None and host not in topo.host_names():
        raise FilterError(
            f"no host {host!r} in lab {topo.lab} (hosts: {', '.join(topo.host_names())})"
        )
    if plane is not None and not 0 <= plane < topo.planes:
        raise FilterError(f"no plane {plane}: lab {topo.lab} has planes 0..{topo.planes - 1}")


def select(snap: dict, *, host: str | None = None, plane: int | None = None) -> dict:
    """A shallow copy of snap holding only what host and plane touch (None: all)."""
    if host is None and plane is None:
        return snap

    def plane_ok(p: int) -> bool:
        return plane is None or p == plane

    out = dict(snap, filter={"host": host, "plane": plane})
    out["planes"] = [p for p in snap["planes"] if plane_ok(p["plane"])]
    out["paths"] = [p for p in snap["paths"] if plane_ok(p["plane"]) and host in (None, p["host"])]
    if host is None:
        kept_links = {lk["name"] for lk in snap["links"] if plane_ok(lk["plane"])}
    else:
        kept_links = {name for p in out["paths"] for name in p["links"]}
    out["links"] = [lk for lk in snap["links"] if lk["name"] in kept_links]
    ends = {end for lk in out["links"] for end in (lk["upper"], lk["lower"])}
    out["ports"] = [p for p in snap["ports"] if f"{p['node']}:{p['ifname']}" in ends]
    out["hosts"] = [
        dict(h, ports=[p for p in h["ports"] if plane_ok(p["plane"])])
        for h in snap["hosts"]
        if host in (None, h["name"])
    ]
    out["faults"] = [f for f in snap["faults"] if kept_links & set(f["links"])]
    out["qps"] = [
        _qp_on_plane(q, plane) for q in snap["qps"] if host in (None, q["host"], q["peer"])
    ]
    return out


def _qp_on_plane(qp: dict, plane: int | None) -> dict:
    if plane is None or qp["send"] is None:
        return qp
    send = dict(qp["send"])
    send["planes"] = [p for p in send["planes"] if p["plane"] == plane]
    if send["ev_list"] is not None:
        send["ev_list"] = [e for e in send["ev_list"] if e["plane"] == plane]
    rates = qp["rates"]
    if rates and rates.get("send"):
        rates = dict(rates, send=dict(rates["send"]))
        rates["send"]["planes"] = [p for p in rates["send"]["planes"] if p["plane"] == plane]
    return dict(qp, send=send, rates=rates)
