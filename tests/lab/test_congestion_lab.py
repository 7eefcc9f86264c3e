"""Congestion end to end: a 7:1 incast on clos-8 (links slowed to 10 Mbit/s,
so that the links and not this machine are the bottleneck) through the
daemons, with NSCC.

What must hold whatever the machine's speed: every transfer completes with
no QP in ERR; the last hop towards the receiver trims (NACK(TRIMMED_LASTHOP),
no ECN there), the spines' downlinks towards its T0 mark ECN; the senders
retransmit what was trimmed; and NSCC moved the senders' windows (the NIC
counted NIC_KICK_CWND kicks and the windows went below their start). The
figures themselves (bystander against its fair share, NSCC against a fixed
window) are scripts/bench_congestion.py's.
"""

from __future__ import annotations

from mrc_nic import nic
from mrc_nic.transport import nscc
from mrc_nic.workloads import scenario
from tests.helpers.env import unique_lab


def test_incast_7_to_1_with_nscc_trims_marks_and_finishes():
    topo = scenario.scenario_topology("clos-8", unique_lab("cg"), rate="10mbit")
    with scenario.with_lab(topo):
        with nic.NicMaps.open(topo.lab) as maps:
            kicks = maps.counter(nic.Counter.CWND_KICKS)
        r = scenario.incast(topo.lab, senders=7, duration=2.0, cc_profile=nscc.DEFAULT_NSCC)
        with nic.NicMaps.open(topo.lab) as maps:
            kicks = maps.counter(nic.Counter.CWND_KICKS) - kicks
    assert r["qps_in_err"] == 0, r["flows"]
    assert not [f for f in r["flows"] if f["error"]], r["flows"]
    assert all(set(f["qp_states"]) == {"RTS"} for f in r["flows"])
    assert r["switch"]["lasthop"]["trimmed"] > 0 and r["switch"]["lasthop"]["ecn_marked"] == 0
    assert r["switch"]["down"]["ecn_marked"] > 0
    assert r["nic"]["nack_trimmed_lasthop"] > 0 and r["nic"]["tx_retx"] > 0
    assert kicks > 0, "NSCC set windows through the NIC"
    incast = [f for f in r["flows"] if f["role"] == "incast"]
    assert all(f["cwnd_min"] is not None for f in incast)
    assert min(f["cwnd_min"] for f in incast) < max(f["cwnd_mean"] for f in incast)
    assert r["bystander"]["goodput_bps"], r["bystander"]
