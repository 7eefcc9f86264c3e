"""A hostile tenant (issue 28, item 7; docs/api.md, "Isolation and cleanup"):
an ordinary user of the lab's [tenants] group, run in h0 by `mrc-nic exec
--user`, turns what its own session was handed (the doorbell program kick_fd,
its send queue, its MR, the CQs' lost counts) against a good
session beside it: root's QPs on h0 and h1 (tests/helpers/verbspair.py),
whose WRITEs both ways are checked byte by byte after every attack. The
hostile programs are tests/helpers/hostile.py; they print what the kernel and
the daemon answered each try, and this file checks that and what the NIC did
(its counters and QP states, read as root).

Three holes these tests found are closed, and stay tested: a packet socket
on the doorbell port, which the daemon once handed out, reached the host's
other ports (bind, sendto: raw frames onto the fabric, the host's traffic
read); now a tenant gets none and cannot make one. A session that read none
of its replies blocked its host's daemon; now a service never waits on a
client (it drops one that reads nothing). Connections opened until the
daemon had no descriptor left ended it; now a user that is not root holds at
most 256, and accept()'s EMFILE pauses new connections. And a gap: a member
took every PD of the host; now a tenant asks for no more than the lab's share
and its sessions hold one share together.
RDMA's own exposure, a WRITE from a QP that knows a receive QP's numbers and
rkey, is shown against a pair without a key, and refused to a pair with one
(auth_key).

Covered elsewhere and not repeated here: a corrupt `done` counter and a WQE
naming another PD's MR fail only their QP (tests/lab/test_tenants.py,
tests/lab/test_verbs.py, as root); a program in a host opening another lab's
NIC (tests/lab/test_tenants.py), and a user outside the group kept out
(tests/lab/test_tenant_group.py)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from mrc_nic import nic
from mrc_nic.kernel import bpfsys, netns
from mrc_nic.kernel.pins import pin_dir
from mrc_nic.nic import wire
from mrc_nic.nic.layout import MEMS_MAP, WQ_MAP
from tests.helpers.env import MRC, ROOT
from tests.helpers.tenants import group_lab, throwaway_group
from tests.helpers.verbspair import Side, verified_write, write

KIB = 1024
TIMEOUT = 120  # seconds for one hostile program, at most
XDP_DROP = 1
REFUSED = {"EACCES", "EPERM"}


@pytest.fixture(scope="module")
def member():
    """(group, hostile, other): two users of a new group, the lab's tenants."""
    with throwaway_group("ho", members=2) as (group, users):
        yield group, *users


@pytest.fixture(scope="module")
def lab(member, tmp_path_factory):
    with group_lab(member[0], "ho", tmp_path_factory.mktemp("hostile")) as topo:
        yield topo


@contextlib.contextmanager
def pair(lab, ext: dict | None = None) -> Iterator[tuple[Side, Side]]:
    """A connected QP pair, a in h0 and b in h1 (root's sessions), with the
    RTR and RTS extension attributes ext (an auth_key)."""
    a, b = Side(lab.lab, "h0"), Side(lab.lab, "h1")
    try:
        for side, peer in ((a, b), (b, a)):  # one plane: connect() names plane 1
            side.qp.to_init()
            side.qp.to_rtr(peer.qp.qp_num, peer.ctx.gid(), ext=ext)
        for side in (a, b):
            side.qp.to_rts(ext=ext)
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture
def good(lab):
    """The good session: a connected QP pair, a in h0 and b in h1."""
    with pair(lab) as (a, b):
        yield a, b


def hostile_cmd(lab, member, action: str, *, user: int = 1, **args) -> list[str]:
    """tests/helpers/hostile.py's action as a member (user: its index in
    member, the hostile one by default), in h0."""
    return [*MRC, "exec", "-l", lab.lab, "--user", member[user], "h0", "--",
            "python", "-m", "tests.helpers.hostile", action, json.dumps(args)]  # fmt: skip


def answer(member, stdout: str, user: int = 1) -> dict:
    """The hostile program's last line, which says it ran as that member."""
    out = json.loads(stdout.splitlines()[-1])
    assert out["uid"] == pwd.getpwnam(member[user]).pw_uid != 0
    return out


def hostile(lab, member, action: str, **args) -> dict:
    """Run a hostile action to its end: its answer."""
    proc = subprocess.run(
        hostile_cmd(lab, member, action, **args),
        capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return answer(member, proc.stdout)


@contextlib.contextmanager
def started(lab, member, action: str, **args) -> Iterator[subprocess.Popen]:
    """A hostile action started, talking through pipes (text); killed by its
    pid if it outlives the block."""
    proc = subprocess.Popen(
        hostile_cmd(lab, member, action, **args),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:  # ours, by pid
            proc.kill()
            proc.wait()


def said(proc: subprocess.Popen) -> dict:
    """A started action's next line, a JSON object."""
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return json.loads(line)


def finished(proc: subprocess.Popen, member, user: int = 1) -> dict:
    """A started action's answer, its stdin closed. Read through the pipes'
    own buffers: said() may have read ahead past its line (communicate()
    reads the bare descriptors and would miss what those buffers hold)."""
    proc.stdin.close()
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    return answer(member, out, user)


def both_ways(a: Side, b: Side) -> None:
    """The good session writes byte-exact both ways, its QPs in RTS."""
    verified_write(a, b, 64 * KIB)
    verified_write(b, a, 64 * KIB)
    for side in (a, b):
        assert side.qp.query()["state"] == "RTS"


def moved(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _mac(topo, node: str, ifname: str) -> str:
    with netns.iproute(topo.netns(node)) as ipr:
        return ipr.get_links(ifname=ifname)[0].get_attr("IFLA_ADDRESS")


def ends(topo, host: str, peer: str) -> wire.Endpoints:
    """Plane 0's addresses of a packet from host's port to peer (next hop: the switch)."""
    link = topo.host_port_link(host, "eth0")
    index, peer_index = topo.nodes[host].index, topo.nodes[peer].index
    return wire.Endpoints(
        _mac(topo, host, "eth0"),
        _mac(topo, link.upper.node, link.upper.ifname),
        str(topo.host_address(index, 0)),
        str(topo.host_address(peer_index, 0)),
    )


@contextlib.contextmanager
def held_by_other_member(lab, member, peer: Side) -> Iterator[dict]:
    """The other member's session in h0 (its QP in RTS towards peer's, idle),
    held while the block runs: what it holds."""
    args = {"seconds": TIMEOUT, "dest_qpn": peer.qp.qp_num, "dest_gid": peer.ctx.gid()}
    with started(lab, member, "hold", user=2, **args) as proc:
        yield said(proc)
        finished(proc, member, user=2)


def test_it_cannot_name_another_sessions_queues_or_memory(lab, member, good):
    """Every pin of the lab (BPF_OBJ_GET); the send queues and MRs, by their
    map ids (BPF_MAP_GET_FD_BY_ID), of the good session (root's) and of
    another member's; and those processes' descriptors (/proc/PID/fd,
    pidfd_getfd) are refused to it."""
    a, b = good
    with held_by_other_member(lab, member, b) as other:
        ids = {}
        with nic.NicMaps.open(lab.lab) as maps:
            for name, qpn, region in (("a", a.qp.qp_num, a.mr.lkey), ("b", b.qp.qp_num, b.mr.lkey),
                                      ("other", other["qpn"], other["region"])):  # fmt: skip
                ids[f"{name}_sq"] = maps.inner_map_id(WQ_MAP, maps.sq_raw(qpn).ring)
                ids[f"{name}_mr"] = maps.inner_map_id(MEMS_MAP, region)
            for name in ("nic_mr", "nic_tx_qps", "nic_wqs", "nic_mems"):
                ids[name] = bpfsys.map_info(maps.fd(name)).id
        for name, map_id in ids.items():  # real ids: root opens each
            assert map_id, name
            os.close(bpfsys.map_fd_by_id(map_id))
        device = a.ctx._nic
        fds = [device.program_fd, a.ctx.session.sock.fileno()]
        fds += [device.port[0].fileno()] if device.port else []
        pins = sorted(p.name for p in pin_dir(lab.lab).iterdir())
        got = {
            who: hostile(
                lab,
                member,
                "names",
                pin_dir=str(pin_dir(lab.lab)),
                map_ids=ids,
                pid=pid,
                fds=pid_fds,
            )  # fmt: skip
            for who, pid, pid_fds in (
                ("root", os.getpid(), fds),
                ("other", other["pid"], other["fds"]),
            )  # fmt: skip
        }
    assert got["other"]["pins"] == got["root"]["pins"]
    got = {**got["root"], "other_proc_fd": got["other"]["proc_fd"],
           "other_getfd": got["other"]["pidfd_getfd"]}  # fmt: skip
    assert sorted(got["pins"]) == pins and {"nic_wqs", "nic_mems", "nic_xdp_prog"} <= set(pins)
    assert {pin: r for pin, r in got["pins"].items() if r not in REFUSED} == {}
    assert got["map_ids"] == dict.fromkeys(ids, "EPERM")
    assert got["proc_fd"] in REFUSED and got["other_proc_fd"] in REFUSED
    assert set(got["pidfd_getfd"].values()) | set(got["other_getfd"].values()) <= REFUSED
    both_ways(a, b)


CONTROL_KICKS = {  # enum nic_kick_op: its counter when the NIC program takes the kick
    nic.KickOp.TIMEOUT: ("timeout_kicks", 64),
    nic.KickOp.CWND: ("cwnd_kicks", 1),
    nic.KickOp.EV_REPLACE: ("ev_replaced", 0),
    nic.KickOp.FAIL: ("fail_kicks", int(nic.QpError.RETRY_EXCEEDED)),
}


def test_control_kicks_through_its_doorbell_are_send_kicks(lab, member, good):
    """FAIL, TIMEOUT, CWND and EV_REPLACE kicks naming the good QPs, run
    through the hostile session's doorbell program (BPF_PROG_RUN, the kick as
    XDP metadata), each run the send engine and nothing else (it has no
    packet socket to send them into the doorbell port): no QP fails, no
    window or EV changes, and the good session writes byte-exact. The same
    FAIL kick through the NIC's own program (the daemon's) does fail the QP:
    the kicks named it rightly."""
    a, b = good
    both_ways(a, b)  # both QPs have sent: their state in the NIC is set
    qpns = (a.qp.qp_num, b.qp.qp_num)
    kicks = [[qpn, int(op), arg] for qpn in qpns for op, (_, arg) in CONTROL_KICKS.items()]
    with nic.NicMaps.open(lab.lab) as maps:
        cwnds = {qpn: maps.sq(qpn).cwnd for qpn in qpns}
        before = maps.counters()
        got = hostile(lab, member, "kicks", kicks=kicks)
        after = maps.counters()
        states = {qpn: maps.sq(qpn).state for qpn in qpns}
        assert {qpn: maps.sq(qpn).cwnd for qpn in qpns} == cwnds
        assert got["run"] == [XDP_DROP] * len(kicks)  # an idle send kick
        assert got["port"] == "EPERM"  # no packet socket: none handed, none of its own
        changed = moved(before, after)
        for counter, _ in CONTROL_KICKS.values():
            assert counter not in changed, changed
        assert changed.get("kick_idle", 0) >= len(kicks), changed  # each ran the engine
        assert states == dict.fromkeys(qpns, nic.QpState.RTS)
        both_ways(a, b)

        maps.fail_qp(a.qp.qp_num)  # the control: the NIC program's FAIL kick
        assert maps.sq(a.qp.qp_num).state == nic.QpState.ERR


# What the NIC counts of a packet it parsed as from the wire, taken or not.
WIRE_COUNTERS = {
    "placed", "dup", "msg_done", "acked", "ack_consumed", "ack_stale", "drop_ack_range",
    "drop_nack_stale", "drop_data_range", "drop_spoofed", "drop_auth", "drop_unknown_qp",
}  # fmt: skip


def forged_at(lab, a: Side) -> list[bytes]:
    """Packets from h1 at the good QP a in h0 that would do harm if h0's NIC
    took them from the wire: a WRITE of a's next PSN into a's MR (its rkey), a
    SACK of everything, a fatal NACK of its oldest PSN."""
    with nic.NicMaps.open(lab.lab) as maps:
        rq, sq = maps.rq(a.qp.qp_num), maps.sq(a.qp.qp_num)
    there = ends(lab, "h1", "h0")
    qpn = a.qp.qp_num
    common = {"ev": 7, "dqpn": qpn}
    return [
        bytes(wire.data_packet(there, psn=rq.cum_psn, va=a.mr.addr, rkey=a.mr.rkey,
                               payload=b"HOSTILE!", msn=rq.msn, **common)),
        bytes(wire.sack_packet(there, psn=sq.snd_nxt, cum_psn=sq.snd_nxt, echo_ts=1, **common)),
        bytes(wire.nack_packet(there, reason=wire.NackReason.UNEXP_EVENT,
                               syndrome=wire.Syndrome.NAK_REM_ACCESS, psn=sq.snd_una,
                               cum_psn=sq.snd_una, echo_ts=1, **common)),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "how", [{"how": "port"}, {"how": "run", "ifname": "eth0"}, {"how": "run", "ifname": "lo"}],
    ids=["doorbell-socket", "kick-program-as-from-eth0", "kick-program-no-metadata"],
)  # fmt: skip
def test_forged_packets_through_its_doorbell_are_dropped_and_counted(lab, member, good, how):
    """A forged WRITE, SACK and fatal NACK at the good QP, run through the
    hostile session's doorbell program as a frame without kick metadata (as if
    received on the host's port, or on nothing), are each dropped as
    drop_not_kick; sent into the doorbell port they cannot be (no packet
    socket). Nothing lands in the good MR, the good QPs stay in RTS and write
    byte-exact."""
    a, b = good
    both_ways(a, b)
    frames = forged_at(lab, a)
    mr_before = bytes(a.mr.buf[: 64 * KIB])
    with nic.NicMaps.open(lab.lab) as maps:
        rq_before = maps.rq(a.qp.qp_num).cum_psn
        before = maps.counters()
        got = hostile(lab, member, "frames", frames=[f.hex() for f in frames], **how)
        changed = moved(before, maps.counters())
        dropped = 0 if how["how"] == "port" else len(frames)
        assert changed.get("drop_not_kick", 0) == dropped, changed
        assert set(before) >= WIRE_COUNTERS and not WIRE_COUNTERS & set(changed), changed
        assert maps.rq(a.qp.qp_num).cum_psn == rq_before
        assert maps.sq(a.qp.qp_num).state == nic.QpState.RTS
    if how["how"] == "port":
        assert got["sent"] == "EPERM"
    else:
        assert got["retvals"] == [XDP_DROP] * len(frames)
    assert bytes(a.mr.buf[: 64 * KIB]) == mr_before
    both_ways(a, b)


def test_the_doorbell_port_takes_only_send_kicks_even_from_root(lab, good):
    """Root may open the doorbell port (CAP_NET_RAW), so its rule holds for
    root too: the forged WRITE, SACK and NACK sent into h0's `doorbell` are
    dropped as drop_not_kick, never parsed as from the wire, and the control
    kicks' frames there run the send engine as SEND kicks: no QP fails, no
    window changes, the good session writes byte-exact after."""
    a, b = good
    both_ways(a, b)
    qpns = (a.qp.qp_num, b.qp.qp_num)
    frames = forged_at(lab, a)
    mr_before = bytes(a.mr.buf[: 64 * KIB])
    port = nic.open_doorbell(lab.netns("h0"))
    assert port is not None, "h0 has no doorbell port"
    sock, size = port
    kicks = [
        nic.doorbell_frame(qpn, size, op, arg)
        for qpn in qpns
        for op, (_, arg) in CONTROL_KICKS.items()
    ]
    with sock, nic.NicMaps.open(lab.lab) as maps:
        rq_before, cwnds = maps.rq(a.qp.qp_num).cum_psn, {q: maps.sq(q).cwnd for q in qpns}
        before = maps.counters()
        for frame in [*frames, *kicks]:
            assert sock.send(frame) == len(frame)
        deadline = time.monotonic() + 5  # the port's frames run in the veth's NAPI, soon
        while True:
            changed = moved(before, maps.counters())
            taken = changed.get("drop_not_kick", 0) == len(frames)
            if taken and changed.get("kick_idle", 0) >= len(kicks):
                break
            assert time.monotonic() < deadline, changed
            time.sleep(0.01)
        assert not WIRE_COUNTERS & set(changed), changed
        for counter, _ in CONTROL_KICKS.values():
            assert counter not in changed, changed
        assert maps.rq(a.qp.qp_num).cum_psn == rq_before
        assert {q: maps.sq(q).cwnd for q in qpns} == cwnds
        assert {q: maps.sq(q).state for q in qpns} == dict.fromkeys(qpns, nic.QpState.RTS)
    assert bytes(a.mr.buf[: 64 * KIB]) == mr_before
    both_ways(a, b)


def test_garbage_in_its_own_send_queue_and_mr_fails_only_its_own_qp(lab, member, good):
    """Random bytes over its whole send queue (WQEs and counters) and its MR,
    the doorbell rung on them, a WR posted after: its own QP ends in ERR, its
    WR completes with an error (or its post is refused), and the good session
    writes byte-exact beside it."""
    a, b = good
    sink = Side(lab.lab, "h1")  # its QP's peer: a QP of h1 that takes nothing
    try:
        got = hostile(lab, member, "garbage", dest_qpn=sink.qp.qp_num, dest_gid=sink.ctx.gid(),
                      remote_addr=sink.mr.addr, rkey=sink.mr.rkey, seconds=10)  # fmt: skip
    finally:
        sink.close()
    assert got["state"] == "ERR", got
    assert all(status != "SUCCESS" for _, status in got["wcs"]), got
    assert got["wcs"] or got["post"] != "posted", got
    both_ways(a, b)


def test_it_opens_only_its_own_hosts_nic(lab, member):
    """The member's program in h0 opens h0's NIC; h1's is refused with EPERM
    and the one line that says where to run it."""
    got = hostile(lab, member, "open_nics", targets=[[lab.lab, "h0"], [lab.lab, "h1"]])
    assert got[f"{lab.lab}:h0"] == "opened h0"
    code, message = got[f"{lab.lab}:h1"]
    assert code == errno.EPERM
    assert "opens only from that host" in message and "(EPERM)" in message
    assert f"mrc-nic exec -l {lab.lab} h1 -- CMD" in message and "\n" not in message


def test_its_session_reaches_none_of_another_sessions_objects(lab, member, good):
    """Its own session, spoken raw: the lab's CQ lost counts it is handed
    cannot be written (a frozen map), and every operation naming the good
    session's QP, MR, CQ or PD is ENOENT; the good session writes on."""
    a, b = good
    theirs = {"qpn": a.qp.qp_num, "region": a.mr.lkey, "cq": a.scq.index, "pd": a.pd.handle}
    got = hostile(lab, member, "session_ops", theirs=theirs)
    assert got.pop("lost_mmap_write") in REFUSED and got.pop("lost_update") in REFUSED
    got.pop("uid")
    assert got == dict.fromkeys(got, "ENOENT") and len(got) == 8, got
    both_ways(a, b)


def test_a_keyed_pair_takes_no_write_from_a_tenant_that_knows_its_numbers(lab, member, good):
    """RDMA's own exposure: a receive QP takes a WRITE of its next PSN from any
    QP of its peer's host that names it and an rkey of its MR (as on RoCE,
    where the rkey is the only guard). The control: the tenant's own QP, aimed
    at the good unkeyed QP b with b's numbers, writes into b's MR. A pair with
    a key (auth_key: every packet carries a MAC) drops the same WRITE as
    drop_auth, and writes byte-exact on."""
    marker = os.urandom(32)

    def attack(target: Side) -> dict:
        with nic.NicMaps.open(lab.lab) as maps:
            psn = maps.rq(target.qp.qp_num).cum_psn
        args = {"dest_qpn": target.qp.qp_num, "dest_gid": target.ctx.gid(), "psn": psn,
                "remote_addr": target.mr.addr, "rkey": target.mr.rkey}  # fmt: skip
        return hostile(lab, member, "inject", marker=marker.hex(), seconds=1, **args)

    attack(good[1])
    deadline = time.monotonic() + 2
    while bytes(good[1].mr.buf[: len(marker)]) != marker and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bytes(good[1].mr.buf[: len(marker)]) == marker, "the control: it lands unkeyed"

    with pair(lab, {"auth_key": secrets.token_hex(16)}) as (a, b):
        both_ways(a, b)
        before_mr = bytes(b.mr.buf[: len(marker)])
        with nic.NicMaps.open(lab.lab) as maps:
            before = maps.counters()
            got = attack(b)
            changed = moved(before, maps.counters())
        assert changed.get("drop_auth", 0) >= 1, changed
        assert bytes(b.mr.buf[: len(marker)]) == before_mr
        assert all(status != "SUCCESS" for _, status in got["wcs"]), got
        both_ways(a, b)


def test_what_it_kept_of_released_resources_reaches_their_next_owner_not(lab, member):
    """It maps a QP's send queue, an MR's memory and a CQ's ring, releases them
    in the daemon and keeps the mappings. The good session's next QP, MR and
    CQ get the same ring, region and CQ slot, each a map of its own: random
    bytes written into the stale queue and memory, and the good session's
    completions, reach nothing of the new owner's (it writes byte-exact), and
    the stale ring gets no record."""
    with started(lab, member, "stale", seconds=60) as proc:
        kept = said(proc)
        with pair(lab) as (a, b):
            with nic.NicMaps.open(lab.lab) as maps:
                both_ways(a, b)  # in RTS and sending: its ring is in the NIC's QP
                assert maps.sq_raw(a.qp.qp_num).ring == kept["ring"]
            assert a.mr.lkey == kept["region"] and a.scq.index == kept["cq"]
            proc.stdin.write("go\n")
            proc.stdin.flush()
            said(proc)  # written
            both_ways(a, b)
            proc.stdin.write("check\n")
            proc.stdin.flush()
            got = finished(proc, member)
    assert got["after"] == got["before"], got


# A hole these tests found, closed: the daemon once handed each session a
# packet socket on the doorbell port, and bind() or sendto() on a packet
# socket one holds needs no privilege (CAP_NET_RAW is checked when it is
# made), so a tenant put any frame onto the fabric and read the host's
# traffic. Now no packet socket is handed out, and a tenant cannot make one.


@pytest.mark.parametrize("how", ["rebound", "sendto"])
def test_its_doorbell_socket_puts_no_frame_on_the_hosts_port(lab, member, how):
    """Probes at a QP h1 does not have, sent through the hostile session's
    doorbell socket bound to h0's port, or sent on it to that port (sendto
    names the interface: no bind at all): h1's NIC must see none of them."""
    probes = [
        bytes(wire.probe(ends(lab, "h0", "h1"), ev=5, dqpn=0xFFFF00 + i, psn=i, tx_ts=1))
        for i in range(8)
    ]
    with nic.NicMaps.open(lab.lab) as maps:
        before = maps.counters()
        got = hostile(lab, member, "frames", how=how, ifname="eth0",
                      frames=[p.hex() for p in probes])  # fmt: skip
        changed = moved(before, maps.counters())
    assert changed.get("drop_unknown_qp", 0) == 0, (got, changed)


def test_a_nack_its_peer_never_sent_fails_no_good_qp(lab, member):
    """A good QP c in h1 has a WRITE outstanding to its peer d in h0 (d takes
    nothing yet: its timeout is long, so the WRITE stays unacknowledged). The
    hostile tenant in h0 sends, from h0's own address through its rebound
    doorbell socket, a fatal NACK (remote access error) of c's first PSN: a
    NACK d's NIC never sent must not fail c. (Its QPN and PSN are handed to it
    here; a tenant would guess them: QPNs are dense per host, PSNs start at 0.)"""
    c, d = Side(lab.lab, "h1"), Side(lab.lab, "h0")
    try:
        c.qp.to_init()
        c.qp.to_rtr(d.qp.qp_num, d.ctx.gid())
        c.qp.to_rts(timeout=24)  # 17 s a try: unacknowledged for the whole test
        c.qp.post_send(write(c, d, 0, 4 * KIB, wr_id=1))
        with nic.NicMaps.open(lab.lab) as maps:
            deadline = time.monotonic() + 5
            while maps.sq(c.qp.qp_num).snd_nxt == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            sq = maps.sq(c.qp.qp_num)
            assert sq.snd_una == 0 < sq.snd_nxt and sq.state == nic.QpState.RTS
            nack = wire.nack_packet(
                ends(lab, "h0", "h1"), reason=wire.NackReason.UNEXP_EVENT,
                syndrome=wire.Syndrome.NAK_REM_ACCESS, ev=7, dqpn=c.qp.qp_num, psn=0,
                cum_psn=0, echo_ts=1,
            )  # fmt: skip
            got = hostile(lab, member, "frames", how="rebound", ifname="eth0",
                          frames=[bytes(nack).hex()])  # fmt: skip
            deadline = time.monotonic() + 2  # its way through the fabric, at most
            while maps.sq(c.qp.qp_num).state == nic.QpState.RTS and time.monotonic() < deadline:
                time.sleep(0.01)
            state = maps.sq(c.qp.qp_num).state
        assert state == nic.QpState.RTS, (got, state)
    finally:
        c.close()
        d.close()


def test_its_doorbell_socket_reads_no_one_elses_traffic(lab, member):
    """The hostile session's doorbell socket, bound to h0's port for every
    protocol, must not read what other processes of h0 send there (as the
    out-of-band exchange of QPNs and rkeys, verbs.cm, does): root sends UDP
    datagrams with a marker from h0 to h1 while it listens."""
    marker = os.urandom(16)
    with started(lab, member, "sniff", ifname="eth0", marker=marker.hex(), seconds=5) as proc:
        if said(proc).get("bound") == "eth0":  # listening
            with netns.entered(lab.netns("h0")):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            with sock:
                for _ in range(20):
                    sock.sendto(marker, (str(lab.host_address(1, 0)), 9))  # discard
                    time.sleep(0.01)
        got = finished(proc, member)
    assert got["bound"] != "eth0" or not got["seen"], got


# A second hole, closed: a host's daemon answered each request with a blocking
# send (lab.service), so a session that read none of its replies blocked the
# one loop that serves every session of the host and supervises their QPs.
# Now replies wait in the session's outbox, and one that passes 4 MiB drops it.


def test_a_session_that_reads_no_replies_stalls_no_one_else(lab, member, good):
    """It sends its daemon thousands of requests and reads none of the
    replies: the daemon, which serves every session of h0 and supervises their
    QPs, must go on answering others (root's ping, a new session) meanwhile.
    Once it is gone, the good session writes byte-exact."""
    from mrc_nic.contract import daemonops
    from mrc_nic.lab import client

    a, b = good
    with started(lab, member, "clog", requests=50_000, seconds=60) as proc:
        clogged = said(proc)
        sent = clogged["sent"]
        start = time.monotonic()
        try:
            client.call(lab.lab, "h0", daemonops.Ping(), timeout=10)
            answered = time.monotonic() - start
        except client.DaemonError as e:
            answered = str(e)
        if isinstance(answered, float):
            other = Side(lab.lab, "h0")  # a new session: hello, PD, MR, CQs, QP
            other.close()
        finished(proc, member)
    both_ways(a, b)
    assert isinstance(answered, float), f"after {sent} unread replies: {answered}"
    assert clogged["dropped"], clogged  # the daemon let go of it (its outbox passed 4 MiB)


# A third hole, closed: the daemon took every connection a member opened, and
# when it had no descriptor left, accept()'s EMFILE ended it. Now a user that
# is not root holds at most 256 connections to it (lab.service CONNS_PER_USER),
# and EMFILE pauses new connections instead.


def test_a_tenant_that_opens_connections_until_refused_stops_no_one_else(lab, member, good):
    """It opens connections to its daemon, its descriptor limit raised as far
    as it may, until something refuses (its own limit, or the daemon): the
    daemon lives and answers others (root's ping) while they are held, and
    once they go, the good session writes byte-exact and a new session opens.
    (h0's daemon is started again at the end if it died.)"""
    from mrc_nic.contract import daemonops
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import client, workers

    a, b = good
    pid = client.call(lab.lab, "h0", daemonops.Ping()).pid
    try:
        with started(lab, member, "connections", most=100_000, hello=False, seconds=60) as proc:
            held = said(proc)
            try:
                answered = client.call(lab.lab, "h0", daemonops.Ping(), timeout=10).pid
            except client.DaemonError as e:
                answered = str(e)
            finished(proc, member)
        log = workers.log_path(lab.lab, "h0")
        last = log.read_text().splitlines()[-3:] if log.exists() else []
        assert answered == pid, (held, answered, last)
        both_ways(a, b)
        Side(lab.lab, "h0").close()
    finally:
        testbed.start_daemons(lab)  # what `up --reuse` does, if h0's died


# A gap, closed: a member's session could ask for the whole host, and each of
# its sessions had a share of its own, so one tenant left nothing to others,
# root's tools included. Now a tenant asks for no more than the lab's share
# (EPERM) and its sessions hold one share together (transport.sessions).


@pytest.mark.parametrize(
    "how", [{"sessions": 1, "shares": {"pds": "100%"}}, {"sessions": 2, "shares": {}}],
    ids=["one-session-asking-all", "two-sessions-of-half"],
)  # fmt: skip
def test_a_tenant_that_takes_all_it_may_leaves_room_for_others(lab, member, how):
    """It allocates PDs until refused, in one session that asks for every PD
    of the host or in two that take the default share: a new session of
    someone else on h0 still gets a PD (and so a QP) meanwhile."""
    with started(lab, member, "hog", seconds=60, **how) as proc:
        held = said(proc)
        try:
            other = Side(lab.lab, "h0")
            other.close()
            refused = None
        except Exception as e:  # noqa: BLE001 (what refused it is the finding)
            refused = str(e)
        finished(proc, member)
    assert refused is None, (held, refused)
    if how["shares"]:  # asking for more than the lab's share: refused at open
        assert held["refused_open"][0] == errno.EPERM, held
        assert "more than the lab's share" in held["refused_open"][1], held
    else:  # two sessions hold one share together: half the host's PDs
        assert sum(held["pds"]) == held["limits"][0], held
