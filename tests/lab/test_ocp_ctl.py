"""The OCP controller objects on a real lab: a profile chosen by id changes what
goes on the wire, a CC profile's field reaches NSCC, a fault on one EV drops
only that EV's packets and the EV is retired (issue 20)."""

from __future__ import annotations

import json

import pytest

from mrc_nic import nic
from mrc_nic.fabric.switchport import SwitchPortMaps
from mrc_nic.verbs import ctl
from mrc_nic.workloads import experiments, rdma_write
from tests.helpers.env import run_cli

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.usefixtures("healed")]
MIB = 2**20


def test_a_qp_on_a_generated_4_ev_profile_sends_on_those_4_source_ports(default_lab):
    lab = default_lab.lab
    with ctl.CtlContext(lab, "h0") as c:
        ctl.modify_ev_fmt_profile(
            c, 1, {"profile_state": "OFFLINE", "ev_fmt_mode": "UDP", "fmt_fields": [8, 8]}
        )
        ctl.modify_ev_fmt_profile(c, 1, {"profile_state": "ONLINE"})
        fields = [
            {"width": 8, "init_val": 0x30, "mask": 0},
            {"width": 8, "min_val": 1, "max_val": 250, "mask": 0xFF},
        ]
        attrs = {"profile_state": "OFFLINE", "ev_mode": "GEN", "ev_fmt_profile_id": 1}
        ctl.modify_ev_profile(c, 4, {**attrs, "ev_count": 4, "ev_min_active": 1, "fields": fields})
        ctl.modify_ev_profile(c, 4, {"profile_state": "ONLINE"})
        wire = {e["wire"]: e["port"] - 1 for e in ctl.query_ev_profile(c, 4)["evs"]}
    assert len(wire) == 4 and all(0x3001 <= w <= 0x30FA for w in wire)
    with rdma_write.Connection(lab, "h0", "h1", size_hint=16 * MIB) as conn:
        r = conn.write(16 * MIB, ev_profile=4, keep_open=True)
        assert r["completed"]
        qpn = conn.qpns[0]
        with nic.NicMaps.open(lab) as maps:
            raw = maps.sq_raw(qpn)
            used = list(raw.evs[: raw.n_evs])
            sent = {ev: maps.ev(qpn, ev).stats["tx_pkts"] for ev in used}
            planes = {ev: maps.ev(qpn, ev).plane for ev in used}
        with ctl.CtlContext(lab, "h0") as c:
            busy = ctl.query_ev_profile(c, 4, evs=False)
            with pytest.raises(ctl.VerbsError, match="used by QP"):
                ctl.modify_ev_profile(c, 4, {"profile_state": "OFFLINE"})
    # The profile's EVs on its ports. On a loaded machine the NIC may retire one mid-write;
    # its replacement is drawn from the same profile's range and keeps the plane.
    kept = [ev for ev in used if ev in wire]
    assert len(used) == 4 and len(kept) >= 3, (used, wire)
    assert all(0x3001 <= ev <= 0x30FA for ev in used)
    assert all(planes[ev] == wire[ev] for ev in kept)
    assert sorted(planes.values()) == sorted(wire.values())
    assert all(sent[ev] > 0 for ev in kept) and sum(sent.values()) >= 16 * MIB // 3072
    assert busy["qps"] == [qpn]
    assert r["qps"][0]["ev_profile_id"] == 4


def test_a_cc_profile_max_cwnd_bounds_the_nic_window(default_lab):
    lab = default_lab.lab
    with ctl.CtlContext(lab, "h0") as c:
        ctl.modify_cc_profile(c, 9, {"profile_state": "OFFLINE", "algorithm": ctl.NSCC})
        ctl.modify_cc_profile(
            c, 9, {"profile_state": "ONLINE", "cc_config": {"max_cwnd": 4 * 3072}}
        )
    with rdma_write.Connection(lab, "h0", "h1", size_hint=8 * MIB) as conn:
        r = conn.write(8 * MIB, cc_profile=9, keep_open=True)
        with nic.NicMaps.open(lab) as maps:
            cwnd = maps.sq(conn.qpns[0]).cwnd
    assert r["completed"] and r["qps"][0]["cc_profile_id"] == 9
    assert 1 <= cwnd <= 4  # NSCC's window, in packets, under the profile's max_cwnd


def test_one_lossy_ev_of_16_loses_only_its_packets_and_is_retired(default_lab):
    lab = default_lab.lab
    with SwitchPortMaps.open(lab) as sp:
        link = default_lab.host_port_link("h0", "eth1")
        before = sp.counters(link.upper.port_id, 0).drop_loss
        r = experiments.single_ev_loss(lab, size=64 * MIB, evs=16, rate=0.2, plane=1)
        after = sp.counters(link.upper.port_id, 0).drop_loss
    assert r["completed"]
    assert r["fault_dropped"] > 0 and r["fault_pkts"] > r["fault_dropped"]
    assert after - before == r["fault_dropped"]  # every drop at that port was the EV's
    assert r["lossy_ev_final_state"] == "RETIRED" and r["replaced_by"] != r["lossy_ev"]


def test_scenario_rounds_pair_healthy_and_lossy_runs_and_report_the_spread(default_lab):
    p = run_cli(
        "scenario", "single-ev-loss", "--size", "16M", "--rounds", "2", "--format", "json",
        "-l", default_lab.lab, timeout=300,
    )  # fmt: skip
    r = json.loads(p.stdout)
    assert r["rounds"] == 2 and len(r["runs"]) == 2 and r["completed"]
    ratios = [run["goodput_ratio"] for run in r["runs"]]
    assert r["min"] == min(ratios) and r["max"] == max(ratios) and r["key"] == "goodput_ratio"
    assert all(run["fault_dropped"] > 0 for run in r["runs"])  # each run had its own fault
