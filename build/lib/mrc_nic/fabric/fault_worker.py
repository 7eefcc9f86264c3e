"""The process behind a timed or flapping fault.

`mrc-nic fail` starts one per such fault (python -m mrc_nic.fabric.fault_worker LAB
ID), detached, and records its pid; `heal` and `down` end it by that pid.
For flap it takes the link's carrier down and up every period/2; when the
fault's duration is up it heals the fault through the same path as
`mrc-nic heal`, so carrier and routes come back as they were.

If a step fails (the lab was taken down under it, say), the worker ends;
`mrc-nic status` then shows the fault's worker as dead and `heal` still works.
"""

from __future__ import annotations

import sys
import time

from mrc_nic.fabric import faults
from mrc_nic.fabric.builder import Fabric
from mrc_nic.lab import state


def flap(lab: str, fault: dict, deadline: float | None) -> None:
    _, topo = state.open_lab(lab)
    links = [topo.links[name] for name in fault["links"]]
    nodes = {n for lk in links for n in (lk.upper.node, lk.lower.node)}
    half = fault["period"] / 2
    with Fabric(topo) as fabric:
        next_edge = time.monotonic()
        while deadline is None or time.monotonic() < deadline:
            for link in links:
                fabric.set_link_state(link, up=False)
            next_edge += half
            time.sleep(max(0.0, next_edge - time.monotonic()))
            for link in links:
                fabric.set_link_state(link, up=True)
            fabric.restore_routes(nodes)
            next_edge += half
            time.sleep(max(0.0, next_edge - time.monotonic()))


def main(argv: list[str]) -> int:
    lab, fault_id = argv[0], int(argv[1])
    record = state.LabState.load(lab)
    fault = record.faults.get(str(fault_id)) if record else None
    if fault is None:
        return 0
    deadline = None
    if fault.get("until"):
        deadline = time.monotonic() + max(0.0, fault["until"] - time.time())
    if fault["mode"] == "flap":
        flap(lab, fault, deadline)
    elif deadline is not None:
        time.sleep(max(0.0, deadline - time.monotonic()))
    faults.heal(lab, [fault_id], from_worker=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
