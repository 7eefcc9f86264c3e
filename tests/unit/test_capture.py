"""`mrc-nic capture`: which end of which link, the pcap format, the bounds (a
capture of a WRITE in a real lab is in tests/lab/test_capture.py)."""

from __future__ import annotations

import shutil

import pytest
from scapy.all import Ether, rdpcap
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from mrc_nic.observe import capture
from tests.helpers.fake_snapshot import default_topology
from tests.helpers.tshark import tshark_fields


@pytest.fixture(scope="module")
def topo():
    return default_topology()


# ---- where -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, end, port",
    [
        ("p1.t0a-h0", "upper", "p1.t0a:h0"),
        ("p1.t0a-h0", "lower", "h0:eth1"),
        ("h0:eth1", "upper", "p1.t0a:h0"),
        ("h0.eth1", "lower", "h0:eth1"),
        ("p2.t1b-t0b", "upper", "p2.t1b:t0b"),
        ("p2.t1b-t0b", "lower", "p2.t0b:t1b"),
    ],
)
def test_a_link_or_host_port_resolves_to_one_end(topo, target, end, port):
    spot = capture.resolve(topo, target, end)
    assert spot.port == port and spot.end == end
    assert spot.netns == topo.netns(port.split(":")[0])


@pytest.mark.parametrize(
    "target, fragment",
    [
        ("p1.t0a-h9", "did you mean p1.t0a-h0"),
        ("p1.t0a", "give a link (p1.t0a-h0) or a host port (h0:eth1)"),
        ("h0:eth7", "no link or host port 'h0:eth7'"),
        ("plane", "no link or host port"),
    ],
)
def test_anything_else_is_a_one_line_error(topo, target, fragment):
    with pytest.raises(capture.CaptureError) as e:
        capture.resolve(topo, target)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_bounds(topo):
    with pytest.raises(capture.CaptureError, match="--end"):
        capture.resolve(topo, "p1.t0a-h0", "middle")
    with pytest.raises(capture.CaptureError, match="--duration"):
        capture.check_bounds(None, 0)
    with pytest.raises(capture.CaptureError, match="at most 3600s"):
        capture.check_bounds(10, 7200)
    with pytest.raises(capture.CaptureError, match="--count"):
        capture.check_bounds(0, 1)


def test_an_unwritable_file_fails_before_anything_starts(tmp_path):
    with pytest.raises(capture.CaptureError, match="cannot write .*No such file"):
        capture.open_output(str(tmp_path / "no" / "such" / "dir.pcap"))


# ---- the file --------------------------------------------------------------------------------


def roce_frame() -> bytes:
    pkt = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="198.18.1.1", dst="198.18.1.2")
        / UDP(sport=49153, dport=4791)
        / BTH(opcode=10, dqpn=0x10001, psn=7)
        / bytes(32)
    )
    return bytes(pkt)


def test_pcap_records_read_back_with_scapy_nanoseconds_and_all(tmp_path):
    frame = roce_frame()
    path = tmp_path / "x.pcap"
    path.write_bytes(capture.pcap_header() + capture.pcap_record(1_700_000_000, 123_456_789, frame))
    (pkt,) = rdpcap(str(path))
    assert bytes(pkt) == frame
    assert pkt.time == pytest.approx(1_700_000_000.123456789, abs=1e-9)
    assert pkt[BTH].opcode == 10 and pkt[BTH].psn == 7 and pkt[BTH].dqpn == 0x10001


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_pcap_records_decode_with_tshark(tmp_path):
    path = tmp_path / "x.pcap"
    path.write_bytes(capture.pcap_header() + capture.pcap_record(1, 2, roce_frame()))
    out = tshark_fields(path, "infiniband.bth.opcode", "infiniband.bth.psn")
    assert out == [["10", "7"]]


def test_capture_needs_a_file_to_write():
    from click.testing import CliRunner

    from mrc_nic.cli import cli

    result = CliRunner().invoke(cli, ["capture", "p0.t0a-h0"])
    assert result.exit_code == 2 and "-w" in result.output
