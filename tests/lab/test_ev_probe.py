"""A controller's EV probes on a real lab (mrc_ctl_ep_batch_send_wait, issue 20
item 3): no QP at either end; a healthy EV is answered with an RTT, an EV whose
path is blackholed is not answered within the timeout, and per EV: with one
spine link of a plane blackholed, the EVs ECMP hashes onto it go unanswered
and the others are answered, the same ones each time. A port status update
reaches the peer, which shows it in `nic-port status` and answers with its own;
a DISABLED port neither answers probes nor sends them."""

from __future__ import annotations

import json
import time

import pytest

from mrc_nic import nic
from mrc_nic.fabric import faults
from mrc_nic.verbs import ctl
from tests.helpers.env import run_cli

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.usefixtures("healed")]
BASE = 49152  # AUTO EVs: EV BASE + i is on plane i % 4 (EV profile 0)
TIMEOUT_NS = 300_000_000  # generous: a loaded 2-core machine


@pytest.fixture(autouse=True)
def ports_enabled(default_lab):
    """Every port of h0 and h1 ENABLED again after the test, whatever it did."""
    yield
    for host in ("h0", "h1"):
        with ctl.CtlContext(default_lab.lab, host) as c:
            for port in range(1, default_lab.planes + 1):
                ctl.modify_port(c, port, {"port_admin_state": "ENABLED"})


def h1(topo, plane: int = 0) -> str:
    return str(topo.host_address(topo.nodes["h1"].index, plane))


def probe(topo, evs: list[int], timeout_ns: int = TIMEOUT_NS) -> dict[int, ctl.EpRsp]:
    """Probe evs from h0 to h1; {EV: response} for those answered."""
    reqs = [ctl.EpReq(req_id=i, dgid=h1(topo), req_ev=ctl.Ev(ev)) for i, ev in enumerate(evs)]
    with ctl.CtlContext(topo.lab, "h0") as c:
        rsps = ctl.ep_batch_send_wait(c, ctl.EP_OP_EV_PROBE, reqs, timeout_ns)
    return {evs[r.req_id]: r for r in rsps}


def cli_probe(lab: str, evs: list[int]) -> tuple[dict, dict[int, dict]]:
    """`mrc-nic ev probe h0 --dst h1 --ev ...` with a 100 ms timeout: its JSON, and
    its rows by EV."""
    out = run_cli(
        "ev", "probe", "h0", "--dst", "h1", "--ev", ",".join(map(str, evs)),
        "--timeout", "100ms", "--lab", lab, "--format", "json",
    )  # fmt: skip
    data = json.loads(out.stdout)
    return data, {p["ev"]: p for p in data["probes"]}


def test_healthy_evs_are_answered_with_an_rtt(default_lab):
    evs = [BASE + i for i in range(8)]  # two per plane
    got = probe(default_lab, evs)
    assert sorted(got) == evs
    for ev, r in got.items():
        assert r.port == (ev - BASE) % 4 + 1  # the answer came in on the EV's plane
        assert r.ev == ev and r.dgid == h1(default_lab)
        assert 0 < r.rtt < TIMEOUT_NS
        assert r.adj_svc_time == 1 and r.rtt == r.rtt_raw - r.svc_time
        assert 0 <= r.svc_time < 100_000  # the responder's XDP pass


def test_an_ev_whose_plane_is_blackholed_is_not_answered(default_lab):
    lab = default_lab.lab
    faults.apply(lab, ("h1.eth1",), faults.FaultSpec("blackhole"))  # plane 1, at h1
    t0 = time.monotonic()
    got = probe(default_lab, [BASE, BASE + 1], timeout_ns=100_000_000)
    waited = time.monotonic() - t0
    assert sorted(got) == [BASE]  # plane 0's EV answered, plane 1's not
    assert waited >= 0.1  # the call waited out its timeout for the missing answer
    faults.heal(lab, None)
    assert sorted(probe(default_lab, [BASE, BASE + 1])) == [BASE, BASE + 1]


def test_a_blackholed_spine_link_silences_only_the_evs_hashed_onto_it(default_lab):
    lab = default_lab.lab
    plane1 = [BASE + 1 + 4 * i for i in range(16)]  # 16 EVs of plane 1
    faults.apply(lab, ("p1.t1a-t0b",), faults.FaultSpec("blackhole"))
    first = set(probe(default_lab, plane1, timeout_ns=100_000_000))
    again = set(probe(default_lab, plane1, timeout_ns=100_000_000))
    assert first and first != set(plane1)  # some went around the link, some over it
    assert first == again  # an EV is a path: the same ones each time


def test_cli_reports_each_probe_answered_or_not(default_lab):
    lab = default_lab.lab
    faults.apply(lab, ("h1.eth1",), faults.FaultSpec("blackhole"))
    data, by_ev = cli_probe(lab, [BASE, BASE + 1])
    assert (data["sent"], data["answered"]) == (2, 1)
    assert by_ev[BASE]["answered"] and by_ev[BASE]["rtt"] > 0 and by_ev[BASE]["port"] == 1
    assert not by_ev[BASE + 1]["answered"] and by_ev[BASE + 1]["rtt"] is None
    assert by_ev[BASE + 1]["port"] == 2  # the port it was sent from
    bad = run_cli("ev", "probe", "h0", "--dst", "h9", "--ev", "1", "--lab", lab, check=False)
    assert bad.returncode == 2 and "no host of lab" in bad.stderr
    bad = run_cli("ev", "probe", "h0", "--dst", "h1", "--ev", "1", "--lab", lab, check=False)
    assert bad.returncode == 2 and "--port N or 1@PORT" in bad.stderr
    bad = run_cli("ev", "probe", "h0", "--dst", "h0", "--ev", "49152", "--lab", lab, check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "this host" in bad.stderr


def _counter(lab: str, name: str) -> int:
    with nic.NicMaps.open(lab) as maps:
        return maps.counter(nic.Counter[name])


def test_a_port_status_update_reaches_the_peer_which_answers_with_its_own(default_lab):
    lab = default_lab.lab
    with ctl.CtlContext(lab, "h1") as c:  # h1's port 3 DISABLED: its own status says so
        ctl.modify_port(c, 3, {"port_admin_state": "DISABLED"})
    before = _counter(lab, "PORT_STATUS_UPDATE")
    req = ctl.EpReq(req_id=7, dgid=h1(default_lab), req_ev=ctl.Ev(BASE, 1), port_status=0b01010)
    with ctl.CtlContext(lab, "h0") as c:
        (rsp,) = ctl.ep_batch_send_wait(c, ctl.EP_OP_PORT_STATUS_UPDATE, [req], TIMEOUT_NS)
    assert (rsp.req_id, rsp.port, rsp.adj_svc_time) == (7, 1, 1) and rsp.rtt > 0
    assert rsp.peer_port_status == 0b10110  # h1: ports 1, 2 and 4 up, 3 DISABLED
    assert _counter(lab, "PORT_STATUS_UPDATE") == before + 1
    view = json.loads(run_cli("nic-port", "status", "h1", "--lab", lab, "--format", "json").stdout)
    (peer,) = view["peers"]
    assert (peer["host"], peer["port_status"], peer["via_port"]) == ("h0", 0b01010, 1)
    assert [q["state"] for q in peer["ports"]] == ["UP", "DOWN", "UP", "DOWN"]
    # The CLI: h0's own status (every port up) from each of its ports.
    out = run_cli("nic-port", "update", "h0", "--dst", "h1", "--lab", lab, "--format", "json")
    data = json.loads(out.stdout)
    assert (data["sent"], data["answered"]) == (4, 3)  # h1's DISABLED port 3 answers nothing
    by_port = {u["port"]: u for u in data["updates"]}
    assert not by_port[3]["answered"] and by_port[3]["sent"]
    assert all(by_port[n]["peer_port_status"] == 0b10110 for n in (1, 2, 4))
    view = json.loads(run_cli("nic-port", "status", "h1", "--lab", lab, "--format", "json").stdout)
    assert view["peers"][0]["port_status"] == 0b11110
    assert view["peers"][0]["updates"] == peer["updates"] + 3
    bad = run_cli("nic-port", "update", "h0", "--dst", "h1", "--status", "1,9", "--lab", lab,
                  check=False)  # fmt: skip
    assert bad.returncode == 2 and "ports are 1..4" in bad.stderr


def test_a_disabled_port_neither_answers_nor_sends_probes(default_lab):
    lab = default_lab.lab
    evs = [BASE, BASE + 1]  # ports 1 and 2
    assert sorted(probe(default_lab, evs)) == evs
    with ctl.CtlContext(lab, "h1") as c:
        ctl.modify_port(c, 2, {"port_admin_state": "DISABLED"})
    before = _counter(lab, "DROP_PORT_DISABLED")
    assert sorted(probe(default_lab, evs, timeout_ns=100_000_000)) == [BASE]
    assert _counter(lab, "DROP_PORT_DISABLED") > before  # it came in, and was not answered
    with ctl.CtlContext(lab, "h1") as c:
        ctl.modify_port(c, 2, {"port_admin_state": "ENABLED"})
    assert sorted(probe(default_lab, evs)) == evs
    # h0's own port 2 DISABLED: nothing leaves it.
    with ctl.CtlContext(lab, "h0") as c:
        ctl.modify_port(c, 2, {"port_admin_state": "DISABLED"})
    answered = _counter(lab, "EP_PROBE")
    data, by_ev = cli_probe(lab, [BASE, BASE + 1])
    assert (data["sent"], data["answered"]) == (1, 1)
    assert by_ev[BASE + 1]["sent"] is False and not by_ev[BASE + 1]["answered"]
    assert _counter(lab, "EP_PROBE") == answered + 1  # h1 answered only the one sent
