"""The NIC fast path in a real lab: a WRITE crosses the multi-plane fabric.

h0's send engine (BPF) sprays a 64 MiB WRITE over 128 EVs, 32 per plane, so
over all 4 planes and, by ECMP on the EV (UDP source port), both spines of
each. h1's XDP receiver places every packet in its region and answers with a
SACK by XDP_TX; h0's XDP consumes the SACKs, each clocking out the next packet.
No Python touches a packet.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from conftest import needs_lab

from mrc_nic import nic, stats
from mrc_nic.wire import MPR_UNIT

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, needs_lab]

QP_TX, QP_RX = 0x000001, 0x010001  # host << 16 | index
SRC_REGION, DST_REGION = 1, 2
RKEY = 0x1234
MIB = 2**20
EV_BASE = 49152  # EVs ride in the UDP source port: the dynamic port range


def ev_profile(planes: int, per_plane: int = 32) -> dict[int, int]:
    """{EV: plane}, planes interleaved so consecutive packets change plane."""
    return {EV_BASE + i: i % planes for i in range(planes * per_plane)}


def start_capture(topo, node: str, ifname: str, pcap, packets: int) -> subprocess.Popen | None:
    """tshark on a switch port, for the first `packets` packets (bounded: -a duration)."""
    if shutil.which("tshark") is None:
        return None
    return subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            topo.netns(node),
            "tshark",
            "-q",
            "-i",
            ifname,
            "-c",
            str(packets),
            "-a",
            "duration:30",
            "-w",
            str(pcap),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def decoded_opcodes(pcap) -> list[str]:
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "infiniband.bth.opcode"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_64mib_write_is_byte_exact_and_sprayed_over_every_plane_and_spine(default_lab, tmp_path):
    lab, topo = default_lab.lab, default_lab
    pcap = tmp_path / "p0-t0a-h0.pcap"
    capture = start_capture(topo, "p0.t0a", "h0", pcap, packets=400)
    time.sleep(1.0)  # tshark is listening before the first packet
    length, mpr = 64 * MIB, 2
    elems = length // nic.MR_ELEM_SIZE
    evs = ev_profile(topo.planes)
    before = {lk["name"]: lk for lk in stats.snapshot(lab, kernel=False)["links"]}
    with nic.NicMaps.open(lab) as maps:
        maps.set_region(SRC_REGION, first_elem=0, n_elems=elems, rkey=0x1111)
        maps.set_region(DST_REGION, first_elem=elems, n_elems=elems, rkey=RKEY)
        data = os.urandom(length)
        maps.write_region(SRC_REGION, 0, data)
        maps.write_region(DST_REGION, 0, bytes(length))
        maps.setup_rq(QP_RX, local_host=1, peer_host=0, peer_qpn=QP_TX, region=DST_REGION, mpr=mpr)
        maps.setup_sq(
            QP_TX, local_host=0, peer_host=1, peer_qpn=QP_RX, ring=0, evs=evs, mpr=mpr, engine=True
        )
        maps.post_write(QP_TX, length=length, src_region=SRC_REGION, remote_va=0, rkey=RKEY)

        window = mpr * MPR_UNIT
        t0 = time.monotonic()
        maps.kick(QP_TX, window, batch_size=window)
        top_ups, last_una, last_move = 0, 0, t0
        while (sq := maps.sq(QP_TX)).wqe_done < 1 and time.monotonic() - t0 < 60:
            now = time.monotonic()
            if sq.snd_una != last_una:
                last_una, last_move = sq.snd_una, now
            elif now - last_move > 0.02 and sq.window_free:
                # The daemon's job (issue 4): restart a stalled ACK clock.
                maps.kick(QP_TX, sq.window_free)
                top_ups, last_move = top_ups + 1, now
            time.sleep(0.001)
        elapsed = time.monotonic() - t0

        assert sq.wqe_done == 1, f"not done in 60 s: {sq.snd_una} of {elems} PSNs acked"
        assert maps.read_region(DST_REGION, 0, length) == data
        per_plane = [0] * topo.planes
        for ev, plane in evs.items():
            per_plane[plane] += maps.ev(QP_TX, ev).stats["tx_pkts"]
        counters = maps.counters()
    after = {lk["name"]: lk for lk in stats.snapshot(lab, kernel=False)["links"]}

    assert all(n > elems // (2 * topo.planes) for n in per_plane), per_plane
    for plane in range(topo.planes):
        for spine in ("t1a", "t1b"):
            name = f"p{plane}.{spine}-t0a"
            grew = after[name]["up"]["pkts"] - before[name]["up"]["pkts"]
            assert grew > elems // 100, (name, grew)  # both spines of every plane carry data
    # Every data packet was placed by h1's XDP and answered with a SACK.
    assert counters["placed"] >= elems and counters["sack"] >= elems
    if capture is not None:
        capture.wait(timeout=60)
        opcodes = decoded_opcodes(pcap)
        # tshark's InfiniBand dissector decodes our data (RC WRITE Only, 10) going
        # up from h0 and the XDP-made SACKs (RC Acknowledge, 17) coming back.
        assert len(opcodes) >= 300 and {"10", "17"} <= set(opcodes), opcodes[:20]
    print(
        f"\n  64 MiB WRITE h0 -> h1 over the default lab: {elapsed:.2f} s, "
        f"{length * 8 / elapsed / 1e9:.2f} Gbit/s; per plane {per_plane}; "
        f"retransmitted {counters.get('tx_retx', 0)}; top-up kicks {top_ups}"
    )
