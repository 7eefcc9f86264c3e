"""The OCP controller objects on a real lab: a profile chosen by id changes what
goes on the wire, a CC profile's field reaches NSCC, a fault on one EV drops
only that EV's packets and the EV is retired; an EV that goes bad and comes
back while the daemon cannot look leaves both EV events; REPLACE_EV on an
ONLINE profile reaches the QP using it (issue 20)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from mrc_nic import nic
from mrc_nic.contract import daemonops as ops
from mrc_nic.fabric import faults
from mrc_nic.fabric.switchport import SwitchPortMaps
from mrc_nic.kernel import bpfsys
from mrc_nic.lab import client as lab_ctl
from mrc_nic.nic import wire
from mrc_nic.verbs import SendFlags, ctl
from mrc_nic.workloads import experiments, rdma_write
from tests.helpers.env import run_cli
from tests.helpers.verbspair import Side, connect, poll_n, write

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


def _probe_reply(topo, qpn: int, ev: int, plane: int, number: int) -> bytes:
    """The PROBE_REPLY h1's NIC sends for a probe of EV ev of h0's QP qpn."""
    ends = wire.Endpoints(
        src_mac="02:00:00:00:01:01",
        dst_mac="02:00:00:00:00:01",
        src_ip=str(topo.host_address(topo.nodes["h1"].index, plane)),
        dst_ip=str(topo.host_address(topo.nodes["h0"].index, plane)),
    )
    frame = wire.probe_reply(
        ends, ev=ev, dqpn=qpn, psn=number, echo_ts=time.monotonic_ns(), port_bitmap=0xF
    )
    return bytes(frame)


def test_an_ev_that_flips_bad_and_back_while_the_daemon_is_stopped_leaves_both_events(
    default_lab,
):
    """h0's daemon is stopped (SIGSTOP): no scan of EV states can run. Meanwhile the
    NIC puts an EV ASSUMED_BAD (a timeout of the WRITE lost in a blackhole) and
    brings it back GOOD (the PROBE_REPLYs it needs): a scan after would see GOOD,
    as before. The EV event queue has both changes, with the NIC's times."""
    lab = default_lab.lab
    a, b = Side(lab, "h0"), Side(lab, "h1")
    try:
        connect(a, b)
        qpn = a.qp.qp_num
        with ctl.CtlContext(lab, "h0") as c:
            ctl.create_ev_event_cq(c).poll(4096)  # what came before
        pid = lab_ctl.call(lab, "h0", ops.Ping()).pid
        with nic.NicMaps.open(lab) as maps:
            faults.apply(lab, ("h1",), faults.FaultSpec("blackhole"))  # every port of h1
            os.kill(pid, signal.SIGSTOP)
            try:
                a.qp.post_send([write(a, b, 0, 64 * 1024, wr_id=1, send_flags=SendFlags.SIGNALED)])
                deadline = time.monotonic() + 10
                while not maps.sq(qpn).in_flight and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert maps.sq(qpn).in_flight, "the WRITE went out"
                maps.timeout_kick(qpn, 0)  # what the daemon would do: in BPF
                raw = maps.sq_raw(qpn)
                evs = list(raw.evs[: raw.n_evs])
                bad = [ev for ev in evs if maps.ev(qpn, ev).state == nic.EvState.ASSUMED_BAD]
                assert bad, "the timeout put the EVs of the lost PSNs ASSUMED_BAD"
                ev = bad[0]
                plane = maps.ev(qpn, ev).plane
                for n in range(raw.probe_good):  # the peer's answers to its probes
                    frame = _probe_reply(default_lab, qpn, ev, plane, n)
                    assert bpfsys.prog_test_run(maps.program_fd(), frame).retval == 1  # consumed
                assert maps.ev(qpn, ev).state == nic.EvState.GOOD
                flipped = time.time()
            finally:
                faults.heal(lab, None)
                os.kill(pid, signal.SIGCONT)
        with ctl.CtlContext(lab, "h0") as c:
            events = ctl.create_ev_event_cq(c).poll(4096)
        mine = [e for e in events if (e["qpn"], e["wire"]) == (qpn, ev)]
        assert [(e["state"], e["cause"]) for e in mine[:2]] == [
            ("ASSUMED_BAD", "TIMEOUT"),
            ("GOOD", "PROBE_REPLY"),
        ], events
        assert all(e["time"] <= flipped for e in mine[:2])  # made while the daemon was stopped
        assert mine[0]["ev"] == {"val": ev, "port": plane + 1} and mine[0]["profile_id"] == 0
        assert [wc.wr_id for wc in poll_n(a.scq, 1, timeout=30)] == [1]  # healed: it completes
    finally:
        a.close()
        b.close()


def _exp_profile(c, pid: int, wires: list[tuple[int, int]]) -> None:
    """An EXP profile of 16-bit EVs (the wire EV is the value), ONLINE: (value, port)."""
    ctl.modify_ev_fmt_profile(
        c, 2, {"profile_state": "OFFLINE", "ev_fmt_mode": "UDP", "fmt_fields": [16]}
    )
    ctl.modify_ev_fmt_profile(c, 2, {"profile_state": "ONLINE"})
    field = {"width": 16, "min_val": 1, "max_val": 0xFFFF, "mask": 0xFFFF}
    attrs = {"profile_state": "OFFLINE", "ev_mode": "EXP", "ev_fmt_profile_id": 2}
    ctl.modify_ev_profile(c, pid, {**attrs, "ev_count": len(wires), "fields": [field]})
    entries = [{"ev": ctl.UNPOPULATED, "ev_new": {"val": v, "port": p}} for v, p in wires]
    ctl.modify_ev_profile(c, pid, {"ev_op": {"op": "REPLACE_EV", "entries": entries}})
    ctl.modify_ev_profile(c, pid, {"profile_state": "ONLINE"})


def test_replace_ev_on_an_online_profile_reaches_the_qp_using_it(default_lab):
    lab = default_lab.lab
    wires = [(0x5101, 1), (0x5102, 2), (0x5103, 3), (0x5104, 4)]
    with ctl.CtlContext(lab, "h0") as c:
        _exp_profile(c, 7, wires)
    a, b = Side(lab, "h0"), Side(lab, "h1")
    try:
        connect(a, b, ev_profile_id=7)
        qpn = a.qp.qp_num
        with nic.NicMaps.open(lab) as maps:
            raw = maps.sq_raw(qpn)
            assert sorted(raw.evs[: raw.n_evs]) == [w for w, _ in wires]
            with ctl.CtlContext(lab, "h0") as c:
                swap = {"ev": {"val": 0x5102, "port": 2}, "ev_new": {"val": 0x5202, "port": 3}}
                op = {"op": "REPLACE_EV", "entries": [swap]}
                profile = ctl.modify_ev_profile(c, 7, {"ev_op": op})
                shown = ctl.query_ev_profile(c, 7)
            assert profile["replaced_in_qps"] == [
                {"qpn": qpn, "old_wire": 0x5102, "new_wire": 0x5202}
            ]
            assert {(e["val"], e["port"]) for e in shown["evs"]} == {
                (0x5101, 1), (0x5202, 3), (0x5103, 3), (0x5104, 4)
            }  # fmt: skip
            raw = maps.sq_raw(qpn)
            assert list(raw.evs[: raw.n_evs]) == [0x5101, 0x5202, 0x5103, 0x5104]  # same slot
            assert maps.ev(qpn, 0x5202).plane == 2  # port 3
            a.mr.buf[: 256 * 1024] = os.urandom(256 * 1024)
            a.qp.post_send([write(a, b, 0, 256 * 1024, wr_id=5, send_flags=SendFlags.SIGNALED)])
            assert [wc.wr_id for wc in poll_n(a.scq, 1, timeout=30)] == [5]
            assert maps.ev(qpn, 0x5202).stats["tx_pkts"] > 0  # the new EV carries data
            raw = maps.sq_raw(qpn)
            assert 0x5102 not in list(raw.evs[: raw.n_evs])
        assert bytes(b.mr.buf[: 256 * 1024]) == bytes(a.mr.buf[: 256 * 1024])
    finally:
        a.close()
        b.close()
        with ctl.CtlContext(lab, "h0") as c:  # the profile is free again: back to INIT
            ctl.modify_ev_profile(c, 7, {"profile_state": "OFFLINE"})
            ctl.modify_ev_profile(c, 7, {"profile_state": "INIT"})


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
