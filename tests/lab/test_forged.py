"""Forged and malformed packets against a live transfer (issue 19, item 2).

While h0 WRITEs to h1 (`mrc-nic write`'s connection, verified, one write
after another until the flood is over), both
peers' namespaces flood the other end with packets built by mrc_nic.nic.wire
and sent from their own ports through the fabric: at h0's send QP forged
SACKs and NACKs (right QPN and addresses, random PSNs, syndromes and reasons),
at h1's receive QP forged WRITEs (right QPN, rkeys right or wrong) and
malformed ones. Each kind is built so that exactly one reason counts it, a
reason the transfer itself never adds to; the test checks the transfer
byte-exact, no QP in ERR, no fatal NACK sent, and every packet counted by its
reason. The PSNs are drawn away from the transfer's own (it starts at 0 and
sends fewer than 2^21): ahead of snd_nxt by 2^22 and more, or behind it by
more than 2^22; a forged SACK inside the window cannot be told from a real one
without the per-packet MAC.
"""

from __future__ import annotations

import contextlib
import random
import socket
import time

from mrc_nic import nic
from mrc_nic.fabric import faults
from mrc_nic.kernel import netns
from mrc_nic.nic import wire
from tests.helpers.writes import Repeating

# Forged packets must reach the NICs whole to be counted there: on the default
# lab's link-bound 200 Mbit/s a write fills the switch queues, which trim or
# drop a few of them on the way. The 1 Gbit/s shape keeps its queues short.
LAB_TOPOLOGY = "default-1g.toml"

MIB = 2**20
SEED = 19
PER_KIND = 100  # packets of each kind (15 kinds): 1500 in all
SIZE = 16 * MIB  # each write of the series

AHEAD = 1 << 22  # PSNs [AHEAD, 2 * AHEAD): beyond snd_nxt and any window
BEHIND = (1 << 23) + (1 << 21)  # PSNs [BEHIND, BEHIND + 2^20): behind snd_una


def _mac(topo, node: str, ifname: str) -> str:
    with netns.iproute(topo.netns(node)) as ipr:
        return ipr.get_links(ifname=ifname)[0].get_attr("IFLA_ADDRESS")


class Forger:
    """Frames from `host` (its own ports, next hop its T0) to `peer`, by plane."""

    def __init__(self, topo, host: str, peer: str, rng: random.Random):
        self.topo, self.rng = topo, rng
        self.index, self.peer_index = topo.nodes[host].index, topo.nodes[peer].index
        self.ends, self.socks = {}, {}
        for plane in range(topo.planes):
            ifname = f"eth{plane}"
            link = topo.host_port_link(host, ifname)
            self.ends[plane] = wire.Endpoints(
                _mac(topo, host, ifname),
                _mac(topo, link.upper.node, link.upper.ifname),
                self.ip(self.index, plane),
                self.ip(self.peer_index, plane),
            )
            with netns.entered(topo.netns(host)):
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            sock.bind((ifname, 0))
            self.socks[plane] = sock

    @staticmethod
    def ip(host: int, plane: int) -> str:
        return f"198.18.{plane}.{host + 1}"

    def plane(self) -> int:
        return self.rng.randrange(self.topo.planes)

    def ev(self) -> int:
        return self.rng.randrange(1, 1 << 16)

    def psn(self, zone: int) -> int:
        return zone + self.rng.randrange(1 << 20)

    def send(self, plane: int, frame: bytes) -> None:
        self.socks[plane].send(frame)

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()


def _patched(frame: bytes, at: int, value: bytes) -> bytes:
    return frame[:at] + value + frame[at + len(value) :]


def ack_kinds(f: Forger, qpn: int) -> dict[str, list]:
    """Forged SACKs and NACKs at h0's send QP, by the reason that must count them."""
    rng = f.rng
    retry = [
        r for r in wire.NackReason if r not in (wire.NackReason.NONE, wire.NackReason.UNEXP_EVENT)
    ]
    fatal_syn = [wire.Syndrome.NAK_INV_REQ, wire.Syndrome.NAK_REM_ACCESS, wire.Syndrome.NAK_REM_OP]

    def ack(plane: int, psn: int, cum: int, **kw) -> bytes:
        reason = kw.pop("reason", wire.NackReason.NONE)
        args = dict(ev=f.ev(), dqpn=qpn, psn=psn, cum_psn=cum, echo_ts=rng.getrandbits(64))
        args |= dict(sack_bitmap=rng.getrandbits(64), port_bitmap=rng.getrandbits(4))
        ends = kw.pop("ends", f.ends[plane])
        if reason == wire.NackReason.NONE:
            return bytes(wire.sack_packet(ends, **(args | kw)))
        return bytes(wire.nack_packet(ends, reason=reason, **(args | kw)))

    def ahead(p: int) -> bytes:  # names PSNs never sent
        psn = f.psn(AHEAD)
        reason = rng.choice([wire.NackReason.NONE, wire.NackReason.UNEXP_EVENT, *retry])
        kw = {"syndrome": rng.choice(fatal_syn)} if reason == wire.NackReason.UNEXP_EVENT else {}
        return ack(p, psn, rng.choice([psn, 0]), reason=reason, **kw)

    def fatal_behind(p: int) -> bytes:  # a fatal NACK of a PSN long acknowledged
        psn = f.psn(BEHIND)
        syn = rng.choice(fatal_syn)
        return ack(p, psn, psn, reason=wire.NackReason.UNEXP_EVENT, syndrome=syn)

    def bad_ack(p: int) -> bytes:  # syndrome and reason disagree
        frame = ack(p, f.psn(BEHIND), 0, reason=rng.choice(retry))
        return _patched(frame, 54, bytes([rng.choice([0x1F, 0x20, 0x05, *fatal_syn])]))

    def port0(p: int) -> bytes:
        return _patched(ack(p, f.psn(BEHIND), 0), 34, b"\0\0")

    def spoofed(p: int) -> bytes:  # the peer's address, but of another plane
        other = (p + 1) % f.topo.planes
        ends = wire.Endpoints(
            f.ends[p].src_mac, f.ends[p].dst_mac, f.ip(f.index, other), f.ends[p].dst_ip
        )
        return ack(p, f.psn(BEHIND), 0, ends=ends, reason=rng.choice(retry))

    def short(p: int) -> bytes:  # lengths consistent, MRC_ACK cut
        return _shorten(ack(p, f.psn(BEHIND), 0), rng.randrange(13, 52))

    def probe_unknown(p: int) -> bytes:  # h0 has no receive QP
        return bytes(
            wire.probe(f.ends[p], ev=f.ev(), dqpn=qpn, psn=rng.randrange(1 << 24), tx_ts=1)
        )

    return {
        "drop_ack_range": ahead,
        "drop_nack_stale": fatal_behind,
        "drop_bad_ack": bad_ack,
        "drop_bad_port": port0,
        "drop_spoofed": spoofed,
        "drop_short": short,
        "drop_unknown_qp": probe_unknown,
    }


def _shorten(frame: bytes, udp_payload: int) -> bytes:
    """frame with its UDP payload cut to `udp_payload` bytes, lengths and checksum fixed."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    eth = Ether(frame)
    raw = bytes(eth[UDP].payload)[:udp_payload]
    del eth[IP].len, eth[IP].chksum, eth[UDP].len
    eth[UDP].remove_payload()
    eth[UDP].add_payload(Raw(raw))
    return bytes(eth)


def data_kinds(f: Forger, qpn: int, rkey: int) -> dict[str, list]:
    """Forged and malformed WRITEs at h1's receive QP. Payloads of at most 4 bytes:
    a packet whose UDP payload is no longer than MRC_TRIM_LEN is never trimmed."""
    rng = f.rng

    def write(p: int, psn: int, **kw) -> bytes:
        args = dict(ev=f.ev(), dqpn=qpn, psn=psn, va=rng.randrange(1 << 30) * 1024)
        args |= dict(rkey=rng.choice([rkey, rng.getrandbits(32)]), payload=bytes(4))
        args |= dict(last=False, tx_ts=rng.getrandbits(64))
        return bytes(wire.data_packet(kw.pop("ends", f.ends[p]), **(args | kw)))

    def ahead(p: int) -> bytes:
        return write(p, f.psn(AHEAD))

    def port0(p: int) -> bytes:
        return _patched(write(p, f.psn(BEHIND)), 34, b"\0\0")

    def spoofed(p: int) -> bytes:
        other = (p + 1) % f.topo.planes
        ends = wire.Endpoints(
            f.ends[p].src_mac, f.ends[p].dst_mac, f.ip(f.index, other), f.ends[p].dst_ip
        )
        return write(p, f.psn(BEHIND), ends=ends)

    def bad_len(p: int) -> bytes:
        return write(p, f.psn(BEHIND), dmalen=rng.choice([0, 3, 5, 1 << 20]))

    def short(p: int) -> bytes:
        return _shorten(write(p, f.psn(BEHIND)), rng.randrange(12, 48))

    def opcode(p: int) -> bytes:
        op = rng.choice([0x04, 0x06, 0x0C, 0x10, 0xC6, 0xDA, 0xFF])
        return _patched(write(p, f.psn(BEHIND)), 42, bytes([op]))

    def imm_not_last(p: int) -> bytes:
        return _patched(
            write(p, f.psn(BEHIND), imm=7, last=True), 42 + 12 + 16 + 4, bytes(4)
        )  # MRC_DATA.flags_msn: LAST off

    def dup_bad_rkey(p: int) -> bytes:  # before the fix: a fatal NACK
        return write(p, f.psn(BEHIND), rkey=rkey ^ 0x5A5A)

    return {
        "drop_data_range": ahead,
        "drop_bad_port": port0,
        "drop_spoofed": spoofed,
        "drop_bad_len": bad_len,
        "drop_short": short,
        "drop_bad_opcode": opcode,
        "drop_imm_not_last": imm_not_last,
        "dup": dup_bad_rkey,
    }


def test_a_flood_of_forged_packets_kills_no_qp_and_is_counted(default_lab):
    topo = default_lab
    rng = random.Random(SEED)
    at_h0 = Forger(topo, "h1", "h0", rng)
    at_h1 = Forger(topo, "h0", "h1", rng)
    writes = Repeating(topo.lab, SIZE)
    conn = writes.conn
    tx_qp, rx_qp, rkey = conn.qpns[0], conn.remote[0]["qpn"], conn.remote[0]["rkey"]
    kinds = [(at_h0, k, fn) for k, fn in ack_kinds(at_h0, tx_qp).items()]
    kinds += [(at_h1, k, fn) for k, fn in data_kinds(at_h1, rx_qp, rkey).items()]
    plan = [(forger, reason, fn) for forger, reason, fn in kinds for _ in range(PER_KIND)]
    rng.shuffle(plan)
    frames = [
        (forger, plane, reason, fn(plane))
        for forger, reason, fn in plan
        for plane in [forger.plane()]
    ]
    with nic.NicMaps.open(topo.lab) as maps:
        before = maps.counters()
        try:
            _wait_sending(maps, tx_qp)
            sent_before = maps.sq(tx_qp).snd_nxt
            t_flood = time.monotonic()
            for i, (forger, plane, _, frame) in enumerate(frames):
                forger.send(plane, frame)
                if i % 256 == 255:
                    time.sleep(0.001)  # a flood, but not a buffer overflow at one port
            flood_s = time.monotonic() - t_flood
            sent_during = maps.sq(tx_qp).snd_nxt - sent_before
            time.sleep(0.2)  # the last forged packets are through the fabric
            got = {k: v - before[k] for k, v in maps.counters().items() if v != before[k]}
            sq, rq = maps.sq(tx_qp), maps.rq(rx_qp)
        finally:
            at_h0.close()
            at_h1.close()
            results = writes.stop()  # every write byte-exact

    assert sent_during > 0, "the transfer went on while the flood ran"
    assert sq.state == nic.QpState.RTS and rq.state == nic.QpState.RTR  # as connected
    assert sq.stats["fatal_nacks"] == 0 and got.get("nack_rem_access", 0) == 0, got
    sent: dict[str, int] = {}
    for _, _, reason, _ in frames:
        sent[reason] = sent.get(reason, 0) + 1
    exact = {k: got.get(k, 0) for k in sent if k != "dup"}
    assert exact == {k: v for k, v in sent.items() if k != "dup"}, got
    assert got.get("dup", 0) >= sent["dup"], got
    print(
        f"\n  {len(frames)} forged packets in {flood_s * 1e3:.0f} ms during {len(results)} "
        f"verified writes of 16 MiB: {dict(sorted(sent.items()))}"
    )


def _wait_sending(maps, qpn: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _sending(maps, qpn):
        time.sleep(0.001)
    assert _sending(maps, qpn), "the transfer did not start"


def _sending(maps, qpn: int) -> bool:
    with contextlib.suppress(KeyError):
        sq = maps.sq(qpn)
        return sq.state == nic.QpState.RTS and sq.snd_nxt > 0
    return False


def test_with_a_key_forged_packets_at_live_psns_are_dropped(default_lab):
    """The case no header check can catch: forged SACKs acknowledging the live
    window and forged WRITEs with the right rkey at live PSNs. With the QP pair's
    key (`write --auth`) every one is dropped as drop_auth."""
    topo = default_lab
    rng = random.Random(SEED + 1)
    at_h0 = Forger(topo, "h1", "h0", rng)
    at_h1 = Forger(topo, "h0", "h1", rng)
    writes = Repeating(topo.lab, SIZE, auth=True)
    conn = writes.conn
    tx_qp, rx_qp, rkey = conn.qpns[0], conn.remote[0]["qpn"], conn.remote[0]["rkey"]
    va = conn.lanes[0].dst_mr.addr  # inside the receiver's MR: only the MAC is wrong
    sent = 0
    with nic.NicMaps.open(topo.lab) as maps:
        before = maps.counters()
        try:
            _wait_sending(maps, tx_qp)
            for _ in range(100):
                sq, rq = maps.sq(tx_qp), maps.rq(rx_qp)
                p = at_h0.plane()
                psn = sq.snd_una + rng.randrange(max(1, sq.snd_nxt - sq.snd_una))
                frame = wire.sack_packet(
                    at_h0.ends[p],
                    ev=at_h0.ev(),
                    dqpn=tx_qp,
                    psn=psn & wire.PSN_MASK,
                    cum_psn=sq.snd_nxt,
                    echo_ts=0,
                    sack_bitmap=0,
                    port_bitmap=0xF,
                )
                at_h0.send(p, bytes(frame))
                p = at_h1.plane()
                psn = rq.cum_psn + rng.randrange(2 * wire.MPR_UNIT)
                frame = wire.data_packet(
                    at_h1.ends[p],
                    ev=at_h1.ev(),
                    dqpn=rx_qp,
                    psn=psn & wire.PSN_MASK,
                    va=va,
                    rkey=rkey,
                    payload=b"forged",
                    last=False,
                )
                at_h1.send(p, bytes(frame))
                sent += 2
                time.sleep(0.002)
            time.sleep(0.2)
            got = {k: v - before[k] for k, v in maps.counters().items() if v != before[k]}
            sq = maps.sq(tx_qp)
        finally:
            at_h0.close()
            at_h1.close()
            results = writes.stop()  # every write byte-exact

    assert sq.state == nic.QpState.RTS
    assert all(q["auth"] for r in results for q in r["qps"])
    assert got.get("drop_auth", 0) == sent, got
    print(f"\n  {sent} forged packets at live PSNs, {len(results)} MAC'd writes: all drop_auth")


def _plane_evs(maps, qpn: int, plane: int) -> dict[int, tuple[int, int]]:
    """{ev: (state, probe replies taken)} of send QP qpn's EVs on `plane`."""
    return {
        ev: (s.state, s.stats.probe_replies)
        for (q, ev), s in maps.evs_raw().items()
        if q == qpn and s.plane == plane
    }


def _until(what, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.005)
    return what()


def test_with_a_key_a_forged_probe_reply_brings_no_ev_back(default_lab):
    """Plane 1 blackholed under a MAC'd transfer: its EVs go ASSUMED_BAD, and
    forged PROBE_REPLYs for them (right QPN, EV and addresses, no MAC) are
    dropped as drop_auth and bring none back. Healed, the daemons' own probes
    (MAC'd) bring the plane back, forward and reverse."""
    topo = default_lab
    rng = random.Random(SEED + 2)
    at_h0 = Forger(topo, "h1", "h0", rng)
    writes = Repeating(topo.lab, SIZE, auth=True)
    tx_qp, rx_qp = writes.conn.qpns[0], writes.conn.remote[0]["qpn"]
    bad, sent, fault = nic.EvState.ASSUMED_BAD, 0, None
    with nic.NicMaps.open(topo.lab) as maps:
        try:
            _wait_sending(maps, tx_qp)
            fault = faults.apply(topo.lab, ("plane", "1"), faults.FaultSpec("blackhole"))["id"]
            first = _until(
                lambda: {e for e, (st, _) in _plane_evs(maps, tx_qp, 1).items() if st == bad}
            )
            assert first, "a blackholed plane's EVs go ASSUMED_BAD"
            before = maps.counters()
            forged: dict[int, int] = {}  # ev: probe replies taken when first forged
            for _ in range(50):
                for ev, (st, replies) in _plane_evs(maps, tx_qp, 1).items():
                    if st != bad:
                        continue
                    forged.setdefault(ev, replies)
                    frame = wire.probe_reply(
                        at_h0.ends[0],  # plane 0's addresses: the path that works
                        ev=ev,
                        dqpn=tx_qp,
                        psn=rng.randrange(1 << 24),
                        echo_ts=time.monotonic_ns() - 50_000,
                        port_bitmap=0xF,
                    )
                    at_h0.send(0, bytes(frame))
                    sent += 1
                time.sleep(0.002)
            time.sleep(0.05)
            got = {k: v - before[k] for k, v in maps.counters().items() if v != before[k]}
            after = _plane_evs(maps, tx_qp, 1)
            faults.heal(topo.lab, [fault])
            fault = None
            back = _until(
                lambda: [
                    ev for ev, (st, n) in _plane_evs(maps, tx_qp, 1).items() if st != bad and n
                ]
            )
            rev_good = _until(
                lambda: (
                    {e.plane for e in maps.rev_evs(rx_qp) or [] if e.state == nic.RevState.GOOD}
                    == set(range(topo.planes))
                )
            )
        finally:
            if fault is not None:
                faults.heal(topo.lab, [fault])
            at_h0.close()
            results = writes.stop()  # every write byte-exact

    assert sent >= 50 and got.get("drop_auth", 0) == sent, (sent, got)
    still = {ev: after[ev] for ev in forged if ev in after}
    assert still and all(st == bad for st, _ in still.values()), still
    assert all(still[ev][1] == forged[ev] for ev in still), "no forged reply was taken"
    assert back, "the daemon's MAC'd probes bring plane 1's EVs back once healed"
    assert rev_good, "every plane has a GOOD reverse EV: the MAC'd reverse probes are answered"
    assert all(q["auth"] for r in results for q in r["qps"])
    print(f"\n  {sent} forged PROBE_REPLYs for {len(forged)} ASSUMED_BAD EVs: all drop_auth")
