"""`mrc-nic capture`: which end of which link, the pcap format, the bounds; then,
in a real lab, a capture of a WRITE that tshark and scapy decode."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from conftest import MRC, ROOT, needs_lab, run_cli
from fake_snapshot import default_topology
from scapy.all import Ether, rdpcap
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from mrc_nic.observe import capture
from mrc_nic.transport import transfer


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


def wait_for_header(pcap, timeout: float = 10.0) -> None:
    """The capture writes the pcap header once its socket is bound."""
    deadline = time.monotonic() + timeout
    while not (pcap.exists() and pcap.stat().st_size >= len(capture.pcap_header())):
        assert time.monotonic() < deadline, "the capture did not start"
        time.sleep(0.05)


def tshark_fields(path, *fields: str) -> list[list[str]]:
    args = ["tshark", "-r", str(path), "-T", "fields"]
    for f in fields:
        args += ["-e", f]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


def test_capture_needs_a_file_to_write():
    from click.testing import CliRunner

    from mrc_nic.cli import cli

    result = CliRunner().invoke(cli, ["capture", "p0.t0a-h0"])
    assert result.exit_code == 2 and "-w" in result.output


# ---- a real lab ------------------------------------------------------------------------------


class TestInALab:
    pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf, needs_lab]

    def test_capture_of_a_write_decodes_with_tshark_and_scapy(self, default_lab, tmp_path):
        lab, topo = default_lab.lab, default_lab
        pcap = tmp_path / "h0-eth1.pcap"
        proc = subprocess.Popen(
            [
                *MRC,
                "capture",
                "h0:eth1",
                "-w",
                str(pcap),
                "--count",
                "200",
                "--duration",
                "10",
                "-l",
                lab,
                "--format",
                "json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            wait_for_header(pcap)
            assert transfer.write(topo, "h0", "h1", 8 * 2**20).complete
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        result = json.loads(out)
        assert result["packets"] == 200 and result["stopped_by"] == "count"
        assert (result["node"], result["ifname"], result["end"]) == ("p1.t0a", "h0", "upper")
        packets = rdpcap(str(pcap))
        assert len(packets) == 200
        roce = [p for p in packets if BTH in p]
        assert len(roce) >= 190  # an ARP or two may come first
        # Data going up from h0 (RC WRITE Only, 10) and the XDP-made SACKs coming back (17).
        assert {p[BTH].opcode for p in roce} == {10, 17}
        assert all(p[IP].src.startswith("198.18.1.") for p in roce)  # plane 1 only
        times = [float(p.time) for p in packets]
        # In capture order, with the kernel's receive timestamps: those are taken
        # on the CPU that received each packet (data going up, SACKs coming back
        # on another), so neighbours may be a few us out of order, never more.
        assert all(b > a - 0.001 for a, b in zip(times, times[1:], strict=False))
        assert 0 <= times[-1] - times[0] < 10
        if shutil.which("tshark"):
            opcodes = {row[0] for row in tshark_fields(pcap, "infiniband.bth.opcode") if row[0]}
            assert opcodes == {"10", "17"}

    def test_capture_ends_at_its_duration_on_a_quiet_link(self, default_lab, tmp_path):
        pcap = tmp_path / "quiet.pcap"
        t0 = time.monotonic()
        proc = run_cli(
            "capture", "p3.t1b-t0b", "-w", str(pcap), "--duration", "0.5", "-l", default_lab.lab
        )
        assert time.monotonic() - t0 < 5
        assert "stopped by duration" in proc.stdout
        assert rdpcap(str(pcap)) is not None  # a valid file, whatever it holds

    def test_capture_of_an_unknown_link_is_one_line(self, default_lab):
        proc = run_cli(
            "capture", "p3.t1b-t0x", "-w", "/dev/null", "-l", default_lab.lab, check=False
        )
        assert proc.returncode == 1
        assert "did you mean p3.t1b-t0b" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
