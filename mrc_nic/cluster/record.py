"""The cluster lab's record on the machine whose CLI brought it up.

/run/mrc-nic/<lab>/cluster.json (the lab's state directory, beside a local
shard's state.json when this machine is also one of the lab's): the Ray
address, the topology, the placement, the faults applied through the cluster
(one id here, one per machine there) and the cluster's own events (an agent
or machine found dead, a down that could not reach one). Written atomically.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mrc_nic.cluster.route import FILE
from mrc_nic.lab import state


def path(lab: str) -> Path:
    return state.lab_dir(lab) / FILE


@dataclass
class ClusterRecord:
    lab: str
    address: str  # the Ray cluster's
    topology_file: str
    topology: dict
    placement: dict  # placement.Placement.as_dict()
    phase: str = "building"  # building -> up
    created_at: float = field(default_factory=time.time)
    bringup_seconds: float | None = None
    faults: dict[str, dict] = field(default_factory=dict)  # id -> {target, parts: {m: id}}
    next_fault_id: int = 1
    events: list[dict] = field(default_factory=list)

    def save(self) -> None:
        state.save_json(self.lab, path(self.lab), asdict(self))

    @classmethod
    def load(cls, lab: str) -> ClusterRecord | None:
        try:
            return cls(**json.loads(path(lab).read_text()))
        except FileNotFoundError:
            return None

    def note(self, kind: str, machine: int | None, text: str) -> None:
        """A cluster event (the agent of a machine lost, a down incomplete)."""
        self.events.append({"time": time.time(), "type": kind, "machine": machine, "text": text})

    def forget(self) -> None:
        path(self.lab).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # a local shard's files are still there
            state.lab_dir(self.lab).rmdir()
