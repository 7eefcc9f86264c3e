"""The transport daemons in a lab: `mrc-nic write` through them, surviving
faults started mid-transfer, giving up with a reason, and dying cleanly.

One default lab for the module (2 hosts, 4 planes of 1 Gbit/s links); each
test heals what it broke. Transfers are sized to last a few seconds here.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import signal
import threading
import time

import pytest
from conftest import needs_lab, run_cli

from mrc_nic import ctl, faults, lab, netns, nic, rdma_write

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, needs_lab]

MIB = 2**20


@pytest.fixture(autouse=True)
def healed(default_lab):
    yield
    faults.heal(default_lab.lab, None)


class Background:
    """A write in a thread: its result or its exception."""

    def __init__(self, labname: str, size: int, **kw) -> None:
        self.result: dict | None = None
        self.error: BaseException | None = None

        def go() -> None:
            try:
                self.result = rdma_write.write(labname, "h0", "h1", size, **kw)
            except BaseException as e:  # noqa: BLE001 (handed to the test)
                self.error = e

        self.thread = threading.Thread(target=go, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 120.0) -> dict:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the write did not end"
        if self.error:
            raise self.error
        return self.result


def send_qp(labname: str) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        qps = ctl.call(labname, "h0", {"op": "qp_list"})["qps"]
        live = [q["qpn"] for q in qps if q["role"] == "send" and q["state"] == "RTS"]
        if live:
            return live[0]
        time.sleep(0.01)
    raise AssertionError("no send QP in RTS")


def ev_states(labname: str, qpn: int) -> collections.Counter:
    with nic.NicMaps.open(labname) as maps:
        return collections.Counter(
            (s.plane, nic.EvState(s.state).name) for (q, _), s in maps.evs_raw().items() if q == qpn
        )


def wait_for(what, predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if predicate(value):
            return value
        time.sleep(0.02)
    raise AssertionError(f"not reached in {timeout} s: last {value}")


def test_write_is_byte_exact_and_sprayed_over_every_plane(default_lab):
    size = 40 * MIB + 100  # several chunks and a short last packet
    r = rdma_write.write(default_lab.lab, "h0", "h1", size, verify=True, imm=True)
    assert r["completed"] and r["verified"], r
    assert r["bytes"] == size and r["chunks"] >= 3
    assert all(share > 0.15 for share in r["per_plane_share"].values()), r["per_plane_share"]
    assert len(r["per_plane_share"]) == 4
    (recv,) = r["receiver"].values()
    assert recv["imm_done"] == r["chunks"], "every WRITE_WITH_IMM completed, in order"


def test_write_cli_prints_goodput_and_planes(default_lab):
    p = run_cli("write", "h0", "h1", "--size", "8M", "--verify", "-l", default_lab.lab)
    assert "byte-exact (verified)" in p.stdout + p.stderr
    assert "p3:" in p.stdout + p.stderr


@pytest.mark.parametrize(
    ("target", "args"),
    [
        (("plane", "2"), ("--mode", "blackhole")),
        (("p1.t1a-t0a",), ("--mode", "blackhole")),
        (("plane", "3"), ("--mode", "down")),
        (("p0.t0a-h0",), ("--mode", "loss", "--rate", "0.2", "--seed", "3")),
        (("p2.t1b-t0a",), ("--mode", "flap", "--period", "100ms")),
    ],
    ids=["plane-blackhole", "t0-t1-blackhole", "plane-down", "loss-20pct", "flap-100ms"],
)
def test_write_survives_a_fault_started_mid_transfer(default_lab, target, args):
    name = default_lab.lab
    # Large enough to still be running when the heal lands (each CLI call
    # takes 1-2 s on a loaded machine): the probes run only during transfers.
    job = Background(name, 1024 * MIB, verify=True)
    qpn = send_qp(name)
    time.sleep(0.5)
    run_cli("fail", *target, *args, "-l", name)
    plane = int(target[1]) if target[0] == "plane" else int(target[0][1])
    bad = wait_for(
        lambda: ev_states(name, qpn),
        lambda c: c[(plane, "ASSUMED_BAD")] >= (32 if target[0] == "plane" else 1),
    )
    # The fault stays local: most EVs of the other planes stay GOOD (a few may
    # be blamed wrongly for a moment when scheduling delays one path's packets
    # beyond the reorder window; probes give them back).
    assert sum(n for (p, s), n in bad.items() if p != plane and s == "GOOD") >= 80, bad
    time.sleep(0.3)
    run_cli("heal", "--all", "-l", name)
    if "loss" not in args:  # under 20% loss some EVs may go bad again at any time
        wait_for(
            lambda: ev_states(name, qpn),
            lambda c: c[(plane, "GOOD")] >= 28,
            timeout=3.0,
        )
    r = job.join()
    assert r["completed"] and r["verified"], r
    assert all(q["state"] == "RTS" for q in r["qps"])


def test_spent_retry_budget_puts_the_qp_in_err_and_the_daemon_goes_on(default_lab):
    name = default_lab.lab
    run_cli("fail", "h1", "--mode", "blackhole", "-l", name)
    r = rdma_write.write(
        name, "h0", "h1", 4 * MIB, timeout=8, retry={"linear_cnt": 1, "exp_cnt": 2}
    )
    assert not r["completed"]
    assert "retry budget spent" in r["error"]
    assert [q["state"] for q in r["qps"]] == ["ERR"]
    run_cli("heal", "--all", "-l", name)
    again = rdma_write.write(name, "h0", "h1", 4 * MIB, verify=True)
    assert again["completed"] and again["verified"]


def test_a_connection_carries_several_writes_on_the_same_qps(default_lab):
    """keep_open: the QPs stay in RTS and the next write goes on from their
    NIC state (PSNs, MSNs); a write to another QP or with bigger chunks than
    the QP was opened with is refused."""
    name = default_lab.lab
    with rdma_write.Connection(name, "h0", "h1", chunk=MIB) as conn, nic.NicMaps.open(name) as maps:
        (qpn,) = conn.qpns
        first = conn.write(3 * MIB, verify=True, imm=True, seed=1)
        psn_after_first = maps.sq(qpn).snd_una
        second = conn.write(2 * MIB + 5, verify=True, imm=True, seed=2)
        assert first["completed"] and first["verified"], first
        assert second["completed"] and second["verified"], second
        assert [q["qpn"] for q in second["qps"]] == [qpn]
        assert second["bytes"] == 2 * MIB + 5 and second["chunks"] == 3
        packets = lambda size: -(-size // nic.MR_ELEM_SIZE)  # noqa: E731
        assert psn_after_first == packets(MIB) * 3
        assert maps.sq(qpn).snd_una == psn_after_first + 2 * packets(MIB) + packets(5)

        def write(**changes) -> None:
            request = {"op": "write", "dst": "h1", "qpns": [qpn], "remote": conn.remote}
            ctl.call(name, "h0", {**request, "size": 1024, "chunk": MIB, **changes})

        with pytest.raises(ctl.DaemonError, match="connected to QP") as e:
            write(remote=[dict(conn.remote[0], qpn=conn.remote[0]["qpn"] + 1)])
        assert e.value.errno_name == "EINVAL"
        with pytest.raises(ctl.DaemonError, match="exceeds"):
            write(chunk=2 * MIB)
    assert ctl.call(name, "h0", {"op": "qp_list"})["qps"] == [], "sq_close closed them"
    assert ctl.call(name, "h1", {"op": "qp_list"})["qps"] == []


def test_sq_close_refuses_a_qp_that_is_writing(default_lab):
    name = default_lab.lab
    job = Background(name, 256 * MIB)
    qpn = send_qp(name)
    with pytest.raises(ctl.DaemonError, match="is writing") as e:
        ctl.call(name, "h0", {"op": "sq_close", "qpns": [qpn]})
    assert e.value.errno_name == "EBUSY"
    with pytest.raises(ctl.DaemonError, match="no send QP"):
        ctl.call(name, "h0", {"op": "sq_close", "qpns": [qpn + 1000]})
    assert job.join()["completed"]


def test_bad_requests_get_errno_and_a_message(default_lab):
    name = default_lab.lab
    with pytest.raises(ctl.DaemonError, match="unknown operation") as e:
        ctl.call(name, "h0", {"op": "nonsense"})
    assert e.value.errno_name == errno.errorcode[errno.EOPNOTSUPP]
    with pytest.raises(ctl.DaemonError, match="qps must be 1..64"):
        ctl.call(name, "h0", {"op": "sq_open", "count": 0, "chunk": 1024})
    p = run_cli("write", "h0", "h9", "--size", "1M", "-l", name, check=False)
    assert p.returncode != 0 and "no host 'h9'" in p.stderr
    p = run_cli("write", "h0", "h1", "--size", "12Q", "-l", name, check=False)
    assert p.returncode == 2 and "bad size" in p.stderr
    assert ctl.call(name, "h0", {"op": "qp_list"})["qps"] == [], "nothing left behind"


def test_daemon_killed_mid_transfer_is_reported_and_restarted(make_lab):
    topo = make_lab("dk")
    job = Background(topo.lab, 512 * MIB)
    send_qp(topo.lab)
    os.kill(lab.daemon_pid(topo.lab, "h0"), signal.SIGKILL)
    with pytest.raises(ctl.DaemonError, match="did it die"):
        job.join()
    assert lab.daemon_pid(topo.lab, "h0") is None
    assert lab.start_daemons(topo) == ["h0"], "what up --reuse does"
    assert ctl.call(topo.lab, "h0", {"op": "ping"})["pid"] == lab.daemon_pid(topo.lab, "h0")
    lab.down(topo.lab)
    assert lab.daemon_pid(topo.lab, "h1") is None
    assert not [n for n in netns.list_names() if n.startswith(f"mrc-{topo.lab}-")]


def test_events_tell_the_fault_the_ev_states_and_the_heal(default_lab):
    """`mrc-nic events`: the fault, the failed plane's EVs going ASSUMED_BAD
    (from the NIC's ring buffer, with the QP's host), their return, the heal."""
    name = default_lab.lab
    since = ctl.call(name, ctl.EVENTS_SERVICE, {"op": "ping"})["seq"]
    job = Background(name, 1024 * MIB)
    send_qp(name)
    time.sleep(0.3)
    run_cli("fail", "plane", "3", "--mode", "blackhole", "-l", name)
    time.sleep(0.3)
    run_cli("heal", "--all", "-l", name)
    assert job.join()["completed"]
    p = run_cli("events", "--since", str(since), "--format", "jsonl", "-l", name)
    events = [json.loads(line) for line in p.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert "fault" in kinds and "heal" in kinds
    fault = events[kinds.index("fault")]
    assert (fault["target"], fault["mode"]) == ("plane 3", "blackhole")
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    # The CLI posts a fault once it is in force, so the NIC's first reports of
    # it may come before it in the log: compare times (the fault's is taken
    # before it is enforced), not sequence numbers.
    changes = [e for e in events if e["type"] == "ev_state" and e["time"] >= fault["time"]]
    plane3 = {ev for ev, plane in sendjob_evs().items() if plane == 3}
    went_bad = {e["ev"] for e in changes if e["new_state"] == "ASSUMED_BAD"} & plane3
    assert len(went_bad) >= 16, "the blackholed plane's EVs were reported"
    back = {e["ev"] for e in changes if e["new_state"] == "GOOD"} & went_bad
    assert back, "probes brought them back after the heal (none can pass a blackhole)"
    assert all(e["host"] == "h0" for e in events if e["type"] == "ev_state")
    assert "loss" not in kinds, "per-PSN records only with --all"
    # The table form: one line per event, with the plane's fault in words.
    table = run_cli("events", "--since", str(since), "--type", "fault,heal", "-l", name).stdout
    assert any("plane 3" in line and "blackhole" in line for line in table.splitlines())
    assert sum("plane 3" in line for line in table.splitlines()) == 2


def sendjob_evs() -> dict[int, int]:
    from mrc_nic import sendjob, transfer

    return transfer.ev_profile(4, sendjob.EVS_PER_PLANE)


def test_event_log_counts_exactly_what_a_reader_missed(default_lab):
    """The log's own reading code, with a 4-event log: a reader that asks for
    events the log no longer holds is told exactly how many."""
    from mrc_nic import eventlog

    log = eventlog.EventLog(default_lab.lab)
    try:
        log.log = collections.deque(maxlen=4)
        base = log.seq
        for i in range(10):
            log.op_post({"event": {"type": "note", "i": i}}, None)
        reply = log.read(base, None, 100)
        assert reply["evicted"] == 6
        assert [e["i"] for e in reply["events"]] == [6, 7, 8, 9]
        assert reply["next"] == base + 10
        reply = log.read(base + 8, None, 100)
        assert (reply["evicted"], [e["i"] for e in reply["events"]]) == (0, [8, 9])
        reply = log.read(base + 7, {"note"}, 1)
        assert [e["i"] for e in reply["events"]] == [7] and reply["next"] == base + 8
        with pytest.raises(ctl.RequestError, match="type one of"):
            log.op_post({"event": {"type": "nonsense"}}, None)
    finally:
        log.close()


def test_injected_bad_packets_change_no_state_and_are_counted(default_lab):
    """Packets built with scapy and injected into h1's live port (from the
    T0's end of the link, as the fabric would deliver them) at a receive QP
    that h1's daemon opened: wrong QP, spoofed source, truncated, bad
    length, beyond the window. None is placed or moves the QP; each is
    counted by its reason (the out-of-window one is answered with a NACK)."""
    import socket

    from mrc_nic import wire

    name, topo = default_lab.lab, default_lab
    peer_qpn = 0x1FF  # no send QP needed: the receive side is what is attacked
    remote = ctl.call(
        name, "h1", {"op": "rq_open", "peer": "h0", "peer_qpns": [peer_qpn], "chunk": MIB}
    )["qps"][0]
    qpn, rkey = remote["qpn"], remote["rkey"]
    link = topo.host_port_link("h1", "eth0")
    with netns.iproute(topo.netns("h1")) as ipr:
        host_mac = ipr.get_links(ifname="eth0")[0].get_attr("IFLA_ADDRESS")
    with netns.iproute(topo.netns(link.upper.node)) as ipr:
        t0_mac = ipr.get_links(ifname=link.upper.ifname)[0].get_attr("IFLA_ADDRESS")
    ends = wire.Endpoints(t0_mac, host_mac, "198.18.0.1", "198.18.0.2")

    def data(**kw) -> bytes:
        args = dict(ev=0xC123, dqpn=qpn, psn=0, va=0, rkey=rkey, payload=bytes(range(256)) * 4)
        return bytes(wire.data_packet(kw.pop("ends", ends), **(args | kw)))

    cases = {
        "drop_unknown_qp": data(dqpn=qpn + 77),
        "drop_spoofed": data(ends=wire.Endpoints(t0_mac, host_mac, "198.18.0.9", "198.18.0.2")),
        "drop_truncated": data()[:70],
        "drop_bad_len": data(dmalen=512),
        "nack_oor": data(psn=8 * wire.MPR_UNIT + 5),
    }
    with nic.NicMaps.open(name) as maps:
        before = maps.rq(qpn)
        counters = maps.counters()
        region_before = maps.read_region(remote["region"], 0, 1024)  # earlier tests' bytes
        with netns.entered(topo.netns(link.upper.node)):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        try:
            sock.bind((link.upper.ifname, 0))
            for frame in cases.values():
                sock.send(frame)
        finally:
            sock.close()
        time.sleep(0.2)
        after = maps.rq(qpn)
        got = {k: v - counters[k] for k, v in maps.counters().items() if v != counters[k]}
        region = maps.read_region(remote["region"], 0, 1024)
    ctl.call(name, "h1", {"op": "rq_close", "qpns": [qpn]})
    # The NACK went back to h0, where no send QP 0x1ff exists: h0's NIC drops
    # it as an unknown QP too (the counters are the lab's).
    cases["drop_unknown_qp"] = [cases["drop_unknown_qp"], cases["nack_oor"]]
    for reason, sent in cases.items():
        assert got.get(reason) == (len(sent) if isinstance(sent, list) else 1), (reason, got)
    assert got.get("placed", 0) == 0 and region == region_before, "nothing was placed"
    assert (after.cum_psn, after.msn, after.received) == (before.cum_psn, before.msn, [])
    changed = {k for k in after.stats if after.stats[k] != before.stats[k]}
    assert changed <= {"data_pkts", "oor_pkts", "nacks"}, changed
    assert after.stats["oor_pkts"] == before.stats["oor_pkts"] + 1
