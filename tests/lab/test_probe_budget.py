"""The probe budget (issue 31, item 2): a blackholed plane draws probes on
its ASSUMED_BAD EVs within the budget of docs/watch.md ("Probes"), not a
storm, and the EVs still come back once it heals."""

from __future__ import annotations

import collections
import json
import time

from mrc_nic import nic
from mrc_nic.transport import prober
from tests.helpers.env import run_cli
from tests.helpers.writes import Repeating, send_qp, wait_for

MIB = 2**20
PLANE = 2
WINDOW_S = 2.0


def plane_states(lab: str, qpn: int) -> collections.Counter:
    with nic.NicMaps.open(lab) as maps:
        return collections.Counter(
            nic.EvState(s.state).name
            for (q, _), s in maps.evs_raw().items()
            if q == qpn and s.plane == PLANE
        )


def offered(lab: str) -> tuple[int, int]:
    """(packets h0 sent into the plane, the snapshot's monotonic ns): the
    switch port's BPF counter, which counts a packet before its faults."""
    snap = json.loads(run_cli("stats", "--format", "json", "-l", lab).stdout)
    link = next(x for x in snap["links"] if x["name"] == f"p{PLANE}.t0a-h0")
    return link["up"]["pkts"], snap["monotonic_ns"]


def test_a_blackholed_plane_is_probed_within_the_budget_and_comes_back(make_lab):
    topo = make_lab("pb", "default-1g.toml")  # as test_daemon: a whole plane goes bad
    lab = topo.lab
    with Repeating(lab, 256 * MIB) as job:
        qpn = send_qp(lab)
        time.sleep(0.3)
        run_cli("fail", "plane", str(PLANE), "--mode", "blackhole", "-l", lab)
        per_plane = wait_for(
            lambda: plane_states(lab, qpn), lambda c: c["ASSUMED_BAD"] >= 32, timeout=10
        )
        assert per_plane["ASSUMED_BAD"] == 32, per_plane
        # Only probes enter the plane now: no EV of it is usable for data.
        n0, t0 = offered(lab)
        time.sleep(WINDOW_S)
        n1, t1 = offered(lab)
        seconds = (t1 - t0) / 1e9
        rate = (n1 - n0) / seconds
        budget = prober.PLANE_PROBES_PER_S + prober.PLANE_PROBE_BURST / seconds
        assert rate <= budget, f"{rate:.0f} probes/s into the dead plane, budget {budget:.0f}"
        assert n1 - n0 >= 32, "every suspect EV is still probed"

        run_cli("heal", "--all", "-l", lab)
        # A probe is at most PROBE_BACKOFF_MAX_S away, then probe_good answers.
        wait_for(lambda: plane_states(lab, qpn), lambda c: c["GOOD"] == 32, timeout=5)
        results = job.stop()
    assert results and all(r["completed"] and r["verified"] for r in results)
