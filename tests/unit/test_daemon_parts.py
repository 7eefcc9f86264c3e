"""The host daemon's parts (mrc_nic.transport), each on its own, with no root.

Every part gets a HostContext built from the default topology and a
recorder of the NIC maps (the real ones need the lab's BPF maps: the daemon
with them runs in tests/lab/test_daemon.py and test_verbs*.py). No daemon
object and no other part is faked: a part's collaborators are real, or a
recorder of the one call it makes.
"""

from __future__ import annotations

import errno
import os
import socket
import types

import pytest

from mrc_nic import nic
from mrc_nic.contract import appops, ctlops
from mrc_nic.lab import topology
from mrc_nic.lab.service import Conn
from mrc_nic.transport import appsupervise, evevents
from mrc_nic.transport.appresources import AppResources
from mrc_nic.transport.appsupervise import Supervision
from mrc_nic.transport.evevents import EvEvents
from mrc_nic.transport.host import HostContext
from mrc_nic.transport.ports import Ports
from mrc_nic.transport.profileops import ProfileOps
from mrc_nic.transport.profiles import ProfileError
from mrc_nic.transport.qp import QpError, QpState
from mrc_nic.transport.qplife import QpLifecycle
from tests.helpers.env import NETNS_DIR


class MapsRecorder:
    """The NicMaps calls the parts make: writes recorded, reads from what was written."""

    mr_elems, max_qps, max_cqs, max_regions = 1 << 16, 1 << 12, 64, 1 << 10
    cq_ring_bytes = 1 << 16

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.evs: dict[tuple[int, int], nic.EvState] = {}
        self.sq_state: dict[int, nic.QpState] = {}
        self.ports_disabled = self.port_bits = 0

    def __getattr__(self, name: str):
        """Any other write: recorded by name and arguments."""
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kw: self.calls.append((name, args, kw))

    def named(self, name: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == name]

    def setup_sq(self, qpn: int, **kw) -> None:
        self.calls.append(("setup_sq", (qpn,), kw))
        self.sq_state[qpn] = nic.QpState.RTS
        self.evs.update(dict.fromkeys(((qpn, ev) for ev in kw["evs"]), nic.EvState.GOOD))

    def ev(self, qpn: int, ev: int):
        return types.SimpleNamespace(state=self.evs[qpn, ev])

    def set_ev_state(self, qpn: int, ev: int, state: nic.EvState) -> None:
        self.evs[qpn, ev] = state

    def sq(self, qpn: int, psns: bool = True):
        return types.SimpleNamespace(state=self.sq_state[qpn], stats={"lost_pkts": 0})

    def watch_send_queue(self, sq_fd: int):
        return nic.SendQueue(bytearray(4096))  # an empty queue: posted 0, done 0

    def set_ports_disabled(self, index: int, bits: int) -> None:
        self.ports_disabled = bits

    def set_port_bitmap(self, index: int, bits: int) -> None:
        self.port_bits = bits

    def port_bitmap(self, index: int) -> int:
        return self.port_bits

    def peer_ports(self, index: int) -> list:
        return []

    def cq_lost(self, cq: int) -> int:
        return 0

    def _fd(self, name: str, *args) -> int:
        """A descriptor a part hands on (a reply's, closed by the service)."""
        self.calls.append((name, args, {}))
        return os.open("/dev/null", os.O_RDONLY)

    def create_cq_ring(self, name: str = "mrc_cq") -> int:
        return self._fd("create_cq_ring")  # EvEvents closes its own

    def new_send_queue(self, ring: int) -> int:
        return self._fd("new_send_queue", ring)

    def new_region_memory(self, n_elems: int) -> int:
        return self._fd("new_region_memory", n_elems)

    def doorbell_program_fd(self) -> int:
        return self._fd("doorbell_program_fd")

    def cq_lost_fd(self) -> int:
        return self._fd("cq_lost_fd")


CAP = {"max_send_wr": 64, "max_recv_wr": 0, "max_send_sge": 1, "max_recv_sge": 0}


class Reverse:
    """The reverse EVs' one call from the QP lifecycle: open at RTR."""

    def __init__(self) -> None:
        self.opened: list[tuple] = []

    def open(self, *args) -> None:
        self.opened.append(args)


@pytest.fixture
def ctx() -> HostContext:
    topo = topology.load(NETNS_DIR / "default.toml", lab="dmunit")
    return HostContext.open(topo, "h0", MapsRecorder())


@pytest.fixture
def conn():
    a, b = socket.socketpair()  # the peer is this process: tenancy lets it in
    yield Conn(a)
    a.close()
    b.close()


@pytest.fixture(autouse=True)
def no_event_log(monkeypatch):
    posted: list[dict] = []
    monkeypatch.setattr(appsupervise.client, "post_event", lambda lab, e, source: posted.append(e))
    return posted


def _app(ctx, conn, **shares):
    res = AppResources(ctx)
    hello = res.hello(appops.Hello(pid=0, shares=shares or None), conn)
    pd = res.alloc_pd(appops.AllocPd(), conn).pd
    cq = res.create_cq(appops.CreateCq(cqe=16), conn).cq
    return res, hello, pd, cq


def _connected_qp(ctx, conn, lifecycle=None):
    res, _, pd, cq = _app(ctx, conn)
    life = lifecycle or QpLifecycle(ctx, Reverse())
    qpn = life.create_qp(appops.CreateQp(pd=pd, send_cq=cq, recv_cq=cq, **CAP), conn).qpn
    for state, attrs in (
        ("INIT", {}),
        ("RTR", {"dest_qp_num": 0x10100, "dest_gid": "h1"}),
        ("RTS", {"ev_count": 8}),
    ):
        life.modify_qp(appops.ModifyQp(qpn=qpn, state=state, attrs=attrs), conn)
    return res, life, qpn


def test_resources_within_the_session_share_and_released_with_it(ctx, conn):
    res, hello, pd, cq = _app(ctx, conn, cqs=1)
    assert hello.host == "h0" and hello.shares["cqs"] == 1
    with pytest.raises(QpError, match="share") as refused:
        res.create_cq(appops.CreateCq(cqe=16), conn)
    assert refused.value.errno == errno.ENOSPC
    mr = res.reg_mr(appops.RegMr(pd=pd, length=10_000, access=3), conn)
    assert mr.length == -(-10_000 // nic.MR_ELEM_SIZE) * nic.MR_ELEM_SIZE  # whole elements
    (region,) = ctx.maps.named("set_region")
    assert region[1] == (mr.region,) and region[2]["rkey"] == mr.rkey
    with pytest.raises(QpError, match="used by MR") as busy:
        res.dealloc_pd(appops.DeallocPd(pd=pd), conn)
    assert busy.value.errno == errno.EBUSY
    session = ctx.sessions.pop(conn)
    res.release(session)
    assert not session.mrs and not session.cqs and not res.pds
    assert ctx.maps.named("clear_region") and ctx.maps.named("clear_cq_ring")
    assert ctx.cq_slots.take() == cq  # its slot is free again


def test_tenants_share_one_share_each_and_leave_root_its_room(ctx, monkeypatch):
    """A tenant (a user that is not root) asks for no more than the lab's share
    (EPERM); its sessions hold one share together; and every tenant together
    holds at most TENANTS_FRACTION of the host (the rest is root's tools')."""
    import dataclasses

    from mrc_nic.contract import shares
    from mrc_nic.transport import appresources, sessions, tenancy

    monkeypatch.setattr(sessions, "is_operator", lambda uid: uid == 0)
    monkeypatch.setattr(appresources, "is_operator", lambda uid: uid == 0)
    uids = iter([1001, 1001, 1002, 0])
    real_peer_of = tenancy.peer_of
    monkeypatch.setattr(tenancy, "peer_of", lambda sock: dataclasses.replace(
        real_peer_of(sock), uid=next(uids)))  # fmt: skip
    monkeypatch.setattr(tenancy, "check", lambda peer, lab, host: None)
    res = AppResources(ctx)
    pairs = [socket.socketpair() for _ in range(4)]
    conns = [Conn(a) for a, _ in pairs]
    try:
        asked = appops.Hello(pid=0, shares={"pds": "100%"})
        with pytest.raises(QpError, match="more than the lab's share") as e:
            res.hello(asked, conns[0])  # uid 1001 asks for the whole host
        assert e.value.errno == errno.EPERM
        uids = iter([1001, 1001, 1002, 0])
        for c in conns:
            res.hello(appops.Hello(pid=0), c)
        half = res.capacity["pds"] // 2
        got = [0, 0]
        for i in (0, 1):  # uid 1001's two sessions: one share between them
            while True:
                try:
                    res.alloc_pd(appops.AllocPd(), conns[i])
                    got[i] += 1
                except QpError as refused:
                    assert "uid 1001 (its 2 session(s) together)" in str(refused)
                    break
        assert sum(got) == half
        taken = 0  # uid 1002: its own share, until all tenants hold 75% of the host
        with pytest.raises(QpError, match="together they may hold") as full:
            while True:
                res.alloc_pd(appops.AllocPd(), conns[2])
                taken += 1
        assert full.value.errno == errno.ENOSPC
        assert half + taken == int(res.capacity["pds"] * shares.TENANTS_FRACTION)
        res.alloc_pd(appops.AllocPd(), conns[3])  # root still gets one
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_a_session_must_say_hello_first(ctx, conn):
    with pytest.raises(QpError, match="open a session first") as refused:
        AppResources(ctx).alloc_pd(appops.AllocPd(), conn)
    assert refused.value.errno == errno.EPERM


def test_a_qp_goes_to_rts_with_its_nic_state_and_its_answers_paths(ctx, conn):
    reverse = Reverse()
    _, life, qpn = _connected_qp(ctx, conn, QpLifecycle(ctx, reverse))
    (rq,) = ctx.maps.named("setup_rq")
    assert rq[1] == (qpn,) and rq[2]["peer_host"] == 1 and rq[2]["peer_qpn"] == 0x10100
    (sq,) = ctx.maps.named("setup_sq")
    assert len(sq[2]["evs"]) == 8 and sq[2]["ev_min_active"] == 2  # a quarter on profile 0
    assert reverse.opened == [(qpn, 1, 0x10100, None)]
    assert set(ctx.sessions.sending()) == {qpn}
    assert ctx.table.users_of(0) == {qpn}


def test_a_refused_modify_changes_nothing(ctx, conn):
    res, _, pd, cq = _app(ctx, conn)
    life = QpLifecycle(ctx, Reverse())
    qpn = life.create_qp(appops.CreateQp(pd=pd, send_cq=cq, recv_cq=cq, **CAP), conn).qpn
    for state, attrs, message in (
        ("SQD", {}, "not supported"),
        ("BOGUS", {}, "state must be INIT, RTR, RTS or ERR"),
        ("INIT", {"nonsense": 1}, "INIT does not take nonsense"),
        ("INIT", {"cc_profile_id": 9}, "no CC profile 9"),
    ):
        with pytest.raises(QpError, match=message):
            life.modify_qp(appops.ModifyQp(qpn=qpn, state=state, attrs=attrs), conn)
    assert ctx.sessions.session(conn).qps[qpn].qp.state == QpState.RESET


def test_a_destroyed_qp_is_announced_to_every_hook_and_its_numbers_freed(ctx, conn):
    gone: list[int] = []
    ctx.qp_destroyed.append(lambda aq: gone.append(aq.qp.qpn))
    ctx.qp_destroyed.append(lambda aq: ctx.table.detach(aq.qp.qpn))
    res, life, qpn = _connected_qp(ctx, conn)
    with pytest.raises(QpError, match="used by QP"):
        res.destroy_cq(appops.DestroyCq(cq=ctx.sessions.session(conn).qps[qpn].send_cq), conn)
    life.destroy_qp(appops.DestroyQp(qpn=qpn), conn)
    assert gone == [qpn] and ctx.table.users_of(0) == set()
    assert ctx.maps.named("delete_sq")[-1][1] == (qpn,)
    assert ctx.res.new_qpn() == qpn  # the number is free again


def test_supervision_follows_the_nic_into_err_and_tells_the_event_log(ctx, conn, no_event_log):
    _, _, qpn = _connected_qp(ctx, conn)
    ctx.maps.sq_state[qpn] = nic.QpState.ERR  # a fatal NACK
    Supervision(ctx).tick(1.0)
    aq = ctx.sessions.session(conn).qps[qpn]
    assert aq.qp.state == QpState.ERR and "fatal NACK" in aq.qp.err_reason
    assert ctx.maps.named("set_rq_state")[-1][1] == (qpn, nic.QpState.ERR)
    assert no_event_log[-1]["type"] == "qp_error" and no_event_log[-1]["qpns"] == [qpn]
    assert ctx.sessions.sending() == {}


@pytest.fixture
def events(ctx, monkeypatch):
    monkeypatch.setattr(evevents.nic, "EventReader", lambda fd: types.SimpleNamespace(read=list))
    return EvEvents(ctx)


def test_the_daemons_own_ev_changes_are_events_and_profile_queries_see_them(ctx, conn, events):
    _, _, qpn = _connected_qp(ctx, conn)
    ev = next(iter(ctx.sessions.session(conn).qps[qpn].evs))
    aq = ctx.sessions.sending()[qpn]
    events.set_ev_state(aq, ev, nic.EvState.ASSUMED_BAD, "PORT_DOWN")
    events.set_ev_state(aq, ev, nic.EvState.DENIED, "OPERATOR")  # not in profile 0's mask
    polled = events.poll_events(ctlops.EvEventPoll(num_entries=10), None).events
    assert [(e["qpn"], e["wire"], e["state"], e["cause"]) for e in polled] == [
        (qpn, ev, "ASSUMED_BAD", "PORT_DOWN")
    ]
    assert polled[0]["drop_count"] == 0
    profiles = ProfileOps(ctx, events, replacer=None)
    (p0,) = profiles.ev_query(ctlops.EvProfileQuery(id=0, evs=True), None).profiles
    assert p0["qps"] == [qpn] and p0["ev_states"][str(ev)] == "DENIED"
    (cc,) = profiles.cc_query(ctlops.CcProfileQuery(id=1), None).profiles
    assert cc["qps"] == [qpn]


def test_a_port_down_takes_its_evs_out_and_disabled_is_down_to_the_nic(
    ctx, conn, events, monkeypatch
):
    _, _, qpn = _connected_qp(ctx, conn)
    ports = Ports(ctx, events)
    carrier = [0b1111]  # the default lab's 4 planes
    monkeypatch.setattr(ports, "carrier", lambda: carrier[0])
    ports.update()
    assert ctx.maps.port_bits == 0b1111
    carrier[0] = 0b1110  # plane 0 loses carrier
    ports.update()
    aq = ctx.sessions.sending()[qpn]
    states = {plane: set() for plane in range(4)}
    for ev, plane in aq.evs.items():
        states[plane].add(ctx.maps.evs[qpn, ev])
    good = {nic.EvState.GOOD}
    assert states == {0: {nic.EvState.ASSUMED_BAD}, 1: good, 2: good, 3: good}
    reply = ports.port_modify(ctlops.PortModify(port=2, port_admin_state="disabled"), None)
    assert ctx.maps.ports_disabled == 0b10 and ctx.maps.port_bits == 0b1100
    assert [p["state"] for p in reply.ports] == ["DOWN"]
    assert reply.ports[0]["port_admin_state"] == "DISABLED" and reply.ports[0]["carrier"]
    with pytest.raises(ProfileError, match="port must be 1..4"):
        ports.port_query(ctlops.PortQuery(port=5), None)


def test_a_sending_daemon_ticks_at_a_quarter_of_its_labs_rtt_within_1_to_20_ms():
    """The default lab (515 us) keeps the 1 ms tick; clos-8 at 10 Mbit/s
    (10.3 ms) ticks every 2.6 ms; the 2 Mbit/s 32x8 lab (51 ms) every 12.9 ms;
    a lab slower still, every 20 ms."""
    from tests.helpers.env import NETNS_DIR

    ticks = {
        name: topology.sending_tick_s(topology.load(NETNS_DIR / f"{name}.toml").queues.base_rtt_ns)
        for name in ("default", "default-1g", "clos-8", "scale-32x8")
    }
    assert ticks == {
        "default": 0.001,
        "default-1g": 0.001,
        "clos-8": pytest.approx(0.01028 / 4, rel=0.01),
        "scale-32x8": pytest.approx(0.0514 / 4, rel=0.01),
    }
    assert topology.sending_tick_s(200_000_000) == topology.SENDING_TICK_MAX_S == 0.02
