"""A controller's EV probe batches without a lab (transport.epprobe): every
refusal is one line with mrc_ctl.h's errno; the answers the NIC recorded are
matched to their probes by slot, probe number, tx_ts and responder (a late
reply to an earlier probe of the slot is not taken), returned in arrival
order, with the responder's service time taken off the RTT; a batch ends when
all are answered or at its deadline, and frees its slots. Port status updates
go out as flagged endpoint probes carrying the status asked (or the host's
own); nothing leaves from a DISABLED port."""

from __future__ import annotations

import errno

import pytest
from click.testing import CliRunner

from mrc_nic.abi import defs
from mrc_nic.contract import ctlops
from mrc_nic.contract.framing import RequestError
from mrc_nic.lab import topology
from mrc_nic.nic import wireconst
from mrc_nic.transport import epprobe
from tests.helpers.env import NETNS_DIR

H0, H1 = 0, 1


@pytest.fixture(scope="module")
def topo():
    return topology.load(NETNS_DIR / "default.toml")


def req(req_id=0, dgid="198.18.0.2", val=49153, port=0, **kw):
    return {"req_id": req_id, "dgid": dgid, "req_ev": {"val": val, "port": port}, **kw}


def status(mask):
    """op of a PORT_STATUS_UPDATE request (struct mrc_ctl_ep_req.op.port_status_update)."""
    return {"port_status_update": {"port_status": mask}}


def check(topo, reqs, *, op_type="EV_PROBE", timeout=2_000_000, tc=0):
    return epprobe.check_requests(topo, H0, op_type, reqs, timeout, tc)


def test_requests_checked(topo):
    probes = check(topo, [req(0, val=49153), req(1, dgid="198.18.3.2", val=0x1234, port=3)])
    assert probes == [
        epprobe.Probe(0, H1, 1, 49153, "198.18.0.2"),  # AUTO EV 49153: profile 0 puts it on plane 1
        epprobe.Probe(1, H1, 2, 0x1234, "198.18.3.2"),  # any plane's address names the host
    ]


@pytest.mark.parametrize(
    "reqs, kw, code, words",
    [
        ([req(op={"port_status_update": {"port_status": 2}})], {}, errno.EINVAL, "no op"),
        ([req(op={"port_status": 2})], {"op_type": "PORT_STATUS_UPDATE"}, errno.EINVAL, "op must"),
        ([req(op=status(1))], {"op_type": "PORT_STATUS_UPDATE"}, errno.EINVAL, "port_status"),
        ([req(op=status(1 << 5))], {"op_type": "PORT_STATUS_UPDATE"}, errno.EINVAL, "ports 1..4"),
        ([req(op=status("up"))], {"op_type": "PORT_STATUS_UPDATE"}, errno.EINVAL, "port_status"),
        ([req()], {"op_type": "PING"}, errno.EINVAL, "op_type"),
        ([], {}, errno.EINVAL, "at least one"),
        ([req(i) for i in range(epprobe.EP_SLOTS + 1)], {}, errno.EINVAL, "at most"),
        ([req()], {"timeout": 0}, errno.EINVAL, "rsp_timeout"),
        ([req()], {"timeout": 11_000_000_000}, errno.EINVAL, "rsp_timeout"),
        ([req()], {"tc": 64}, errno.EINVAL, "req_tc"),
        ([req(0), req(0)], {}, errno.EINVAL, "already in the batch"),
        ([req(70000)], {}, errno.EINVAL, "req_id"),
        ([req(dgid="10.1.1.1")], {}, errno.EINVAL, "no host's address"),
        ([req(dgid="h1")], {}, errno.EINVAL, "IPv4 address"),
        ([req(dgid="198.18.2.1")], {}, errno.EINVAL, "this host"),
        ([req(sgid="198.18.0.2")], {}, errno.EINVAL, "sgid"),
        ([req(val=0)], {}, errno.EINVAL, "req_ev.val"),
        ([req(val=70000)], {}, errno.EINVAL, "req_ev.val"),
        ([req(val=1234)], {}, errno.EINVAL, "give req_ev.port"),
        ([req(port=5)], {}, errno.EINVAL, "req_ev.port"),
        ([req(ev_fmt_mode="SRV6")], {}, errno.EINVAL, "ev_fmt_mode"),
        ([{"req_id": 0, "req_ev": {"val": 49152}}], {}, errno.EINVAL, "dgid is missing"),
        ([{**req(), "extra": 1}], {}, errno.EINVAL, "unknown field"),
        ([{"req_id": 0, "dgid": "198.18.0.2", "req_ev": 49152}], {}, errno.EINVAL, "req_ev"),
    ],
)
def test_bad_batches_are_refused_with_one_line(topo, reqs, kw, code, words):
    with pytest.raises(RequestError) as e:
        check(topo, reqs, **kw)
    assert e.value.errno == code
    assert words in str(e.value) and "\n" not in str(e.value)


class FakeMaps:
    """The prober host's nic_ep_probes entry, and a port whose frames are kept."""

    def __init__(self) -> None:
        self.slots = [defs.NicEpProbe() for _ in range(epprobe.EP_SLOTS)]
        self.disabled = 0

    def ports_disabled(self, host):
        return self.disabled

    def ep_probes(self, host):
        assert host == H0
        return [defs.NicEpProbe.from_buffer_copy(bytes(s)) for s in self.slots]

    def port_bitmap(self, host):
        return 0b1111

    def port(self, host, plane):
        return {"mac": f"02:00:00:00:00:0{plane}", "nh_mac": f"02:00:00:00:01:0{plane}"}

    def answer(self, sent, *, rx_ns, svc_ns=300, flags=wireconst.PROBE_F_SVC, **kw):
        """What rx_ep_probe_reply records for the reply to one sent probe."""
        e = self.slots[sent.slot]
        e.rx_ns, e.tx_ts, e.psn, e.svc_ns = rx_ns, sent.tx_ts, sent.psn, svc_ns
        e.src_ip, e.ev, e.plane, e.flags = sent.src_ip, sent.probe.ev, sent.probe.plane, flags
        for k, v in kw.items():
            setattr(e, k, v)


class FakeSock:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send(self, frame):
        self.frames.append(frame)


@pytest.fixture
def ep(topo, monkeypatch):
    p = epprobe.EpProber(topo, H0, FakeMaps())
    sock = FakeSock()
    monkeypatch.setattr(epprobe.prober, "plane_socket", lambda socks, plane: sock)
    p.sock = sock
    return p


def batch(ep, reqs, timeout=2_000_000, op_type="EV_PROBE"):
    request = ctlops.EpBatchSendWait(reqs=reqs, rsp_timeout=timeout, op_type=op_type)
    return ep.start(request, conn="c")


def test_probes_go_out_on_their_ev_to_the_endpoint_qpn(ep):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from mrc_nic.nic import wire

    b = batch(ep, [req(0, val=49153), req(1, val=49156)])
    assert len(ep.sock.frames) == 2
    for frame, s in zip(ep.sock.frames, b.sent, strict=True):
        pkt = Ether(frame)
        assert pkt[UDP].sport == s.probe.ev and pkt[wire.MRCProbe].ev == s.probe.ev
        assert pkt[IP].src == f"198.18.{s.probe.plane}.1"
        assert pkt[IP].dst == f"198.18.{s.probe.plane}.2"
        assert pkt[wire.BTH].dqpn == wire.EP_QPN and pkt[wire.BTH].psn == s.psn
        assert pkt[wire.MRCProbe].tx_ts == s.tx_ts
    assert len({s.slot for s in b.sent}) == 2


def test_answers_in_arrival_order_with_the_service_time_taken_off(ep):
    b = batch(ep, [req(0, val=49152), req(1, val=49153)])
    first, second = b.sent
    t = max(first.tx_ts, second.tx_ts)
    ep.maps.answer(second, rx_ns=t + 50_000, svc_ns=300)
    assert ep.step(now_ns=t + 60_000) == []  # one still out: wait
    ep.maps.answer(first, rx_ns=t + 70_000, svc_ns=0, flags=0)
    ((conn, rsps, unsent),) = ep.step(now_ns=t + 80_000)
    assert unsent == []
    assert conn == "c"
    assert [r["req_id"] for r in rsps] == [1, 0]  # arrival order
    assert rsps[0] == {
        "req_id": 1,
        "port": 2,
        "rtt": t + 50_000 - second.tx_ts - 300,
        "adj_svc_time": 1,
        "ev": 49153,
        "dgid": "198.18.0.2",
        "rtt_raw": t + 50_000 - second.tx_ts,
        "svc_time": 300,
        "ecn": False,
    }
    assert (rsps[1]["rtt"], rsps[1]["adj_svc_time"]) == (t + 70_000 - first.tx_ts, 0)
    assert not ep.batches and len(ep._free) == epprobe.EP_SLOTS


def test_a_probe_unanswered_at_the_deadline_is_left_out(ep):
    b = batch(ep, [req(0, val=49152), req(1, val=49153)], timeout=1_000_000)
    ep.maps.answer(b.sent[0], rx_ns=b.sent[0].tx_ts + 10_000)
    assert ep.step(now_ns=b.sent[0].tx_ts + 500_000) == []
    ((_, rsps, _),) = ep.step(now_ns=b.deadline_ns)
    assert [r["req_id"] for r in rsps] == [0]


@pytest.mark.parametrize(
    "stale",
    [
        {"psn": 12345},  # a reply to an earlier probe of the slot
        {"tx_ts": 1},  # ... or to a probe of an earlier daemon with the same number
        {"src_ip": 0x0100A8C0},  # from someone else
        {"rx_ns": 0},  # never written
    ],
)
def test_a_record_that_is_not_this_probes_reply_is_not_taken(ep, stale):
    b = batch(ep, [req(0)], timeout=1_000)
    ep.maps.answer(b.sent[0], **({"rx_ns": b.sent[0].tx_ts + 10} | stale))
    ((_, rsps, _),) = ep.step(now_ns=b.deadline_ns)
    assert rsps == []


def test_batches_share_the_slots_and_eagain_when_none_are_left(ep):
    a = batch(ep, [req(i) for i in range(epprobe.EP_SLOTS - 1)])
    with pytest.raises(RequestError) as e:
        batch(ep, [req(0), req(1)])
    assert e.value.errno == errno.EAGAIN
    b = batch(ep, [req(0)])
    assert b.sent[0].slot not in {s.slot for s in a.sent}
    ep.step(now_ns=a.deadline_ns)  # both end unanswered: their slots are free again
    c = batch(ep, [req(0)])
    assert c.sent[0].psn % epprobe.EP_SLOTS == c.sent[0].slot
    assert c.sent[0].psn not in {s.psn for s in a.sent + b.sent}  # a new probe number


def test_port_status_updates_carry_the_status_asked_or_the_hosts_own(ep):
    from scapy.layers.l2 import Ether

    from mrc_nic.nic import wire

    b = batch(
        ep,
        [req(0, val=49153, op=status(0b01010)), req(1, val=49152)],  # ports 1 and 3 up; own
        op_type="PORT_STATUS_UPDATE",
    )
    sent = [Ether(f)[wire.MRCProbe] for f in ep.sock.frames]
    assert [(m.flags, m.port_bitmap) for m in sent] == [
        (wire.PROBE_F_PORT_STATUS, 0b0101),  # on the wire: bit p for plane p
        (wire.PROBE_F_PORT_STATUS, 0b1111),  # FakeMaps.port_bitmap: this host's own
    ]
    assert [Ether(f)[wire.BTH].dqpn for f in ep.sock.frames] == [wire.EP_QPN] * 2
    first, second = b.sent
    t = max(first.tx_ts, second.tx_ts)
    flags = wireconst.PROBE_F_SVC | wireconst.PROBE_F_PORT_STATUS
    ep.maps.answer(first, rx_ns=t + 10, flags=flags, port_bitmap=0b0011)
    ep.maps.answer(second, rx_ns=t + 20, flags=flags, port_bitmap=0b1111)
    ((_, rsps, _),) = ep.step(now_ns=t + 30)
    assert [(r["req_id"], r["peer_port_status"]) for r in rsps] == [(0, 0b00110), (1, 0b11110)]


def test_a_disabled_port_sends_no_probe_nor_update(ep):
    ep.maps.disabled = 0b0010  # port 2 (plane 1)
    for op_type, extra in (("EV_PROBE", {}), ("PORT_STATUS_UPDATE", {"op": status(2)})):
        ep.sock.frames.clear()
        b = batch(ep, [req(0, val=49152, **extra), req(1, val=49153, **extra)], op_type=op_type)
        assert [s.probe.req_id for s in b.sent] == [0] and b.unsent == [1]
        assert len(ep.sock.frames) == 1  # only plane 0's left
        ep.maps.answer(b.sent[0], rx_ns=b.sent[0].tx_ts + 10)
        ((_, rsps, unsent),) = ep.step(now_ns=b.sent[0].tx_ts + 20)  # done: nothing else waits
        assert [r["req_id"] for r in rsps] == [0] and unsent == [1]
    assert ep.unsent == 2 and len(ep._free) == epprobe.EP_SLOTS


def test_cli_ev_list_parsing():
    from mrc_nic.cli.ev_cmds import parse_probe_evs

    assert parse_probe_evs("49152,49153") == [(49152, 0), (49153, 0)]
    assert parse_probe_evs("49152-49154") == [(49152, 0), (49153, 0), (49154, 0)]
    assert parse_probe_evs("0x1234@2") == [(0x1234, 2)]


@pytest.mark.parametrize(
    "args, words",
    [
        (["ev", "probe", "h0", "--dst", "h1", "--ev", "49152,x"], "VALUE, FIRST-LAST"),
        (["ev", "probe", "h0", "--dst", "h1", "--ev", "49160-49150"], "FIRST <= LAST"),
        (["ev", "probe", "h0", "--dst", "h1", "--ev", "1", "--timeout", "soon"], "duration"),
        (["ev", "probe", "h0", "--ev", "49152"], "--dst"),
    ],
)
def test_cli_bad_arguments_are_one_line(args, words):
    from mrc_nic.cli import cli

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert words in result.output


def test_device_attr_says_ev_probes_are_supported():
    from mrc_nic.transport import profiles

    attr = profiles.ProfileTable(4).device_attr()
    assert "EP_OP_EV_PROBE" in attr["opt_attr"]
