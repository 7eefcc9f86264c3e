"""Build or remove one machine's shard, in a process of its own.

The agent runs this as `python -m mrc_nic.cluster.shard` with a JSON request
on stdin and reads one JSON line back. Not in the agent itself: a Ray worker
has dozens of threads, and pyroute2 forks to make a namespace; a child forked
from a threaded process can deadlock on a lock another thread held (it did:
the first cluster `up` hung in netns creation), while a fresh process has
only its main thread.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def up(lab: str, topology_file: str, raw: dict, shard: dict, mtu: int) -> dict:
    """Clear what an earlier run left on this machine, then build the shard."""
    from mrc_nic.cluster.agent import check_underlay
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import state, topology

    check_underlay(shard["machines"][shard["machine"]], mtu)
    cleared = clear(lab, shard["nodes"])
    topo = topology.from_dict(Path(topology_file), raw, lab)
    topo.shard = state.shard_from_record(shard)
    report = testbed.up(topo, cluster=shard)
    return {"seconds": report.seconds, "namespaces": len(shard["nodes"]), "cleared": cleared}


def clear(lab: str, nodes: list[str]) -> list[str]:
    """Remove this lab's record, processes and pins on this machine and the
    namespaces of its record and of these nodes (never another machine's)."""
    from mrc_nic.fabric import testbed
    from mrc_nic.lab.topology import NS_PREFIX

    return testbed.down(lab, only=[f"{NS_PREFIX}{lab}-{n}" for n in nodes])


OPS = {"up": up, "clear": clear}


def main() -> int:
    request = json.loads(sys.stdin.read())
    op = OPS[request.pop("op")]
    try:
        result = {"ok": op(**request)}
    except Exception as e:  # noqa: BLE001 (one line for the agent to relay)
        from mrc_nic.errors import MrcNicError

        what = str(e) if isinstance(e, MrcNicError) else f"{type(e).__name__}: {e}"
        result = {"error": what}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
