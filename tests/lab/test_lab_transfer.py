"""The NIC fast path in a real lab: a WRITE crosses the multi-plane fabric.

h0's send engine (BPF) sprays a 64 MiB WRITE over 128 EVs, 32 per plane, so
over all 4 planes and, by ECMP on the EV (UDP source port), both spines of
each. h1's XDP receiver places every packet in its region and answers with a
SACK by XDP_TX; h0's XDP consumes the SACKs, each clocking out the next packet.
No Python touches a packet.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from mrc_nic import nic
from mrc_nic.observe import stats
from mrc_nic.testkit import transfer

MIB = 2**20


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
    length = 64 * MIB
    elems = -(-length // nic.seg_size(topo.mtu))  # data packets
    before = {lk["name"]: lk for lk in stats.snapshot(lab, kernel=False)["links"]}
    result = transfer.write(topo, "h0", "h1", length, mpr=2)
    after = {lk["name"]: lk for lk in stats.snapshot(lab, kernel=False)["links"]}

    assert result.complete, f"not done in 60 s: {result.counters}"
    assert result.byte_exact
    assert all(n > elems // (2 * topo.planes) for n in result.per_plane_pkts), result
    for plane in range(topo.planes):
        for spine in ("t1a", "t1b"):
            name = f"p{plane}.{spine}-t0a"
            grew = after[name]["up"]["pkts"] - before[name]["up"]["pkts"]
            assert grew > elems // 100, (name, grew)  # both spines of every plane carry data
    # Every data packet was placed by h1's XDP and answered with a SACK (ACK
    # coalescing, [nic] ack_every, is off by default: docs/nic-program.md).
    c = result.counters
    assert c["placed"] >= elems and c["sack"] >= elems
    assert c.get("ack_held", 0) == 0, "no answer held with ack_every 1"
    if capture is not None:
        capture.wait(timeout=60)
        opcodes = decoded_opcodes(pcap)
        # tshark's InfiniBand dissector decodes our data (RC WRITE Only, 10) going
        # up from h0 and the XDP-made SACKs (RC Acknowledge, 17) coming back.
        assert len(opcodes) >= 300 and {"10", "17"} <= set(opcodes), opcodes[:20]
    print(
        f"\n  64 MiB WRITE h0 -> h1 over the default lab: {result.seconds:.2f} s, "
        f"{result.goodput_bps / 1e9:.2f} Gbit/s; per plane {result.per_plane_pkts}; "
        f"retransmitted {result.retransmits}; top-up kicks {result.top_up_kicks}"
    )


def test_writes_in_both_directions_share_the_transfer_receive_slot(default_lab):
    """Every host's transfer QP receives in slot 1 of nic_rx_qps: a WRITE the
    other way frees it of the earlier one's, and each arrives byte-exact."""
    for src, dst in (("h0", "h1"), ("h1", "h0"), ("h0", "h1")):
        result = transfer.write(default_lab, src, dst, MIB, mpr=2)
        assert result.complete and result.byte_exact, (src, dst, result.counters)
    with nic.NicMaps.open(default_lab.lab) as maps:
        assert transfer.qpn(1) in maps.rx_qpns() and transfer.qpn(0) not in maps.rx_qpns()
