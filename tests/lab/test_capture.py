"""`mrc-nic capture` in a real lab: a capture of a WRITE that tshark and scapy
decode (where, the pcap format and the bounds are in tests/unit/test_capture.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from scapy.all import rdpcap
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP

from mrc_nic.observe import capture
from mrc_nic.testkit import transfer
from tests.helpers.env import MRC, ROOT, run_cli
from tests.helpers.tshark import tshark_fields

# ---- a real lab ------------------------------------------------------------------------------


def wait_for_header(pcap, timeout: float = 10.0) -> None:
    """The capture writes the pcap header once its socket is bound."""
    deadline = time.monotonic() + timeout
    while not (pcap.exists() and pcap.stat().st_size >= len(capture.pcap_header())):
        assert time.monotonic() < deadline, "the capture did not start"
        time.sleep(0.05)


class TestInALab:
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
