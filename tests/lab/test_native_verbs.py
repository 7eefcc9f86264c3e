"""Unmodified C verbs programs on real labs, run as a user runs them: through
`mrc-nic exec HOST -- PROGRAM`, which preloads the native verbs library
(mrc_nic/native). Debian's ibverbs-utils and perftest are the programs, with
a C program of ours (tests/lab/native/verbs_pattern.c) that checks bytes and
error completions; scripts/setup installs what they need."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mrc_nic.contract import appops, daemonops
from mrc_nic.lab import client as lab_client
from tests.helpers.env import MRC
from tests.helpers.hostpair import run_server_client

TIMEOUT = 120  # seconds for any one program
PATTERN_SRC = Path(__file__).parent / "native" / "verbs_pattern.c"
MRC_PATTERN_SRC = Path(__file__).parent / "native" / "mrc_pattern.c"


def in_host(lab: str, host: str, *program: str) -> list[str]:
    return [*MRC, "exec", "-l", lab, host, "--", *program]


def _need(program: str) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed (scripts/setup installs it)")


def run_pair(topo, program: list[str], *, server_extra=(), client_extra=(), client_tail=()):
    """The server on h1, then the client on h0 naming h1's plane-0 address:
    (client, server) CompletedProcesses."""
    address = str(topo.host_address(1, 0))
    return run_server_client(
        in_host(topo.lab, "h1", *program, *server_extra),
        in_host(topo.lab, "h0", *program, *client_extra, address, *client_tail),
        settle=1.5,  # the server listens
    )


def app_qps(lab: str, host: str) -> list[dict]:
    """The applications' QPs on a host, as its daemon lists them."""
    return [q for q in lab_client.call(lab, host, daemonops.QpList()).qps if q.get("role") == "app"]


def long_write_bw(topo, **client_io) -> tuple[subprocess.Popen, subprocess.Popen]:
    """A 30-second ib_write_bw from h0 to h1, under way (h0 has its QPs):
    (server, client), both the caller's to end."""
    program = ["ib_write_bw", "-s", "65536", "-D", "30"]
    server = subprocess.Popen(in_host(topo.lab, "h1", *program), stdout=subprocess.DEVNULL)
    time.sleep(1.5)
    address = str(topo.host_address(1, 0))
    client = subprocess.Popen(in_host(topo.lab, "h0", *program, address), **client_io)
    deadline = time.monotonic() + 30
    while not app_qps(topo.lab, "h0") and time.monotonic() < deadline:
        time.sleep(0.2)
    return server, client


def bw_row(text: str, size: int) -> list[float]:
    """perftest's result row for `size` bytes: iterations, peak, average, rate."""
    rows = [line.split() for line in text.splitlines() if re.match(rf"\s*{size}\s+\d+\s", line)]
    assert rows, text
    return [float(v) for v in rows[-1][1:]]


def test_ibv_devices_lists_one_device_per_host_its_own_first(default_lab):
    _need("ibv_devices")
    for host, first, other in (("h0", "mrc_h0", "mrc_h1"), ("h1", "mrc_h1", "mrc_h0")):
        done = subprocess.run(
            in_host(default_lab.lab, host, "ibv_devices"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        names = [line.split()[0] for line in done.stdout.splitlines()[2:] if line.strip()]
        assert names == [first, other], done.stdout


def test_ibv_devinfo_opens_the_device_through_its_daemon(default_lab):
    """ibv_open_device + query_device + query_port: the host's daemon answers."""
    _need("ibv_devinfo")
    done = subprocess.run(
        in_host(default_lab.lab, "h0", "ibv_devinfo", "-d", "mrc_h0"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert "PORT_ACTIVE" in done.stdout and "Ethernet" in done.stdout, done.stdout


def test_without_the_preload_there_is_no_device(default_lab):
    _need("ibv_devices")
    done = subprocess.run(
        [*MRC, "exec", "--no-preload", "-l", default_lab.lab, "h0", "--", "ibv_devices"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "mrc_h0" not in done.stdout


@pytest.mark.parametrize("size", [64, 4096, 1 << 20])
def test_ib_write_bw_runs_unmodified(default_lab, size):
    """64 B WRITEs land at unaligned offsets (perftest steps by 64 bytes)."""
    _need("ib_write_bw")
    iters = "200" if size == 1 << 20 else "2000"
    client, server = run_pair(default_lab, ["ib_write_bw", "-s", str(size), "-n", iters])
    assert client.returncode == 0, client.stdout + client.stderr
    assert server.returncode == 0, server.stdout + server.stderr
    iterations, peak, average, _rate = bw_row(client.stdout, size)
    assert iterations == int(iters) and average > 0 and peak >= average


def test_ib_write_lat_runs_unmodified(default_lab):
    """ib_write_lat busy-waits on its own buffer for the peer's WRITE: the NIC
    places into the program's own pages."""
    _need("ib_write_lat")
    client, server = run_pair(default_lab, ["ib_write_lat", "-s", "64", "-n", "500"])
    assert client.returncode == 0, client.stdout + client.stderr
    assert server.returncode == 0, server.stdout + server.stderr
    row = [line.split() for line in client.stdout.splitlines() if re.match(r"\s*64\s+500\s", line)]
    assert row, client.stdout
    t_min, t_typical = float(row[0][2]), float(row[0][4])
    assert 0 < t_min <= t_typical


@pytest.mark.parametrize("program", ["ib_send_bw", "ib_read_bw"])
def test_send_and_read_end_with_a_clear_message(default_lab, program):
    """MRC has WRITEs only: the first SEND or READ is refused at post time
    (EINVAL, as a verbs provider refuses an opcode it lacks); the program
    ends, saying why, and does not hang."""
    _need(program)
    client, server = run_pair(default_lab, [program, "-n", "100"])
    assert client.returncode != 0
    assert "RDMA WRITE and WRITE_WITH_IMM only" in client.stderr, client.stderr


@pytest.fixture(scope="module")
def pattern(tmp_path_factory) -> str:
    if shutil.which("cc") is None or not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("needs cc and libibverbs-dev (scripts/setup installs them)")
    exe = tmp_path_factory.mktemp("native") / "verbs_pattern"
    subprocess.run(
        ["cc", "-O1", "-Wall", "-o", str(exe), str(PATTERN_SRC), "-libverbs"],
        check=True,
        capture_output=True,
    )
    return str(exe)


def test_our_c_program_checks_bytes_and_error_completions(default_lab, pattern):
    """WRITEs at odd offsets and lengths and a WRITE_WITH_IMM (its receive
    waited for on a completion channel) byte-checked at the receiver; SEND
    refused at post; past max_send_wr ENOMEM; a wrong rkey and an address
    past the MR complete REM_ACCESS_ERR with nothing written, and the other
    QP works on (verbs_pattern.c says each step)."""
    client, server = run_pair(
        default_lab,
        [pattern],
        server_extra=["server", "18555"],
        client_extra=["client"],
        client_tail=["18555"],
    )
    assert server.returncode == 0 and server.stdout.endswith("PASS\n"), server.stdout
    assert client.returncode == 0 and client.stdout.endswith("PASS\n"), client.stdout


def test_a_program_on_the_mrc_h_api_linked_to_lib_mrc_so(default_lab, tmp_path):
    """A program written against OCP's mrc.h, built as OCP's example makefile
    builds (our include/mrc.h, lib_mrc.so before -libverbs, an rpath) and run
    without the preload: lib_mrc.so alone takes its calls. OCP's transitions
    (PORT, TIMEOUT, RETRY_CNT 14) with MRC attributes; WRITE + WRITE_WITH_IMM
    into a receive posted with no SGE; the bytes checked."""
    from mrc_nic import native

    if shutil.which("cc") is None or not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("needs cc and libibverbs-dev (scripts/setup installs them)")
    lib_dir = native.library().parent
    exe = tmp_path / "mrc_pattern"
    subprocess.run(
        ["cc", "-O1", "-Wall", f"-I{native.include_dir()}", "-o", str(exe), str(MRC_PATTERN_SRC),
         f"-Wl,-rpath,{lib_dir}", str(lib_dir / "lib_mrc.so"), "-libverbs"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    lab, address = default_lab.lab, str(default_lab.host_address(1, 0))
    client, server = run_server_client(
        [*MRC, "exec", "--no-preload", "-l", lab, "h1", "--", str(exe), "server", "18556"],
        [*MRC, "exec", "--no-preload", "-l", lab, "h0", "--", str(exe), "client", address, "18556"],
        settle=1.5,
    )
    assert server.returncode == 0 and server.stdout.endswith("PASS\n"), server.stdout
    assert client.returncode == 0 and client.stdout.endswith("PASS\n"), client.stdout


def test_a_program_killed_mid_run_releases_everything(default_lab):
    """kill -9 of ib_write_bw in the middle of its run: its QPs leave the
    daemon and the NIC memory it registered comes back."""
    _need("ib_write_bw")
    lab = default_lab.lab

    memory = lab_client.call(lab, "h0", appops.Hello(pid=0)).max_mr_bytes
    server, client = long_write_bw(default_lab, stdout=subprocess.DEVNULL)
    try:
        assert app_qps(lab, "h0"), "ib_write_bw made no QP on h0"
        time.sleep(1.0)  # mid-run
        client.send_signal(signal.SIGKILL)  # `mrc-nic exec` execs: this pid is ib_write_bw
        client.wait(timeout=10)
        deadline = time.monotonic() + 10
        while app_qps(lab, "h0") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert app_qps(lab, "h0") == []
        assert lab_client.call(lab, "h0", appops.Hello(pid=0)).max_mr_bytes == memory
    finally:
        for p in (client, server):
            if p.poll() is None:  # ours, by pid
                p.kill()
                p.wait()


def test_ib_write_bw_finishes_with_a_plane_blackholed_mid_run(default_lab):
    """A plane's link to h0 blackholed one second into a 4-second run: the
    run finishes (the NIC moves the plane's share to the others)."""
    _need("ib_write_bw")
    lab = default_lab.lab
    link = "p1.t0a-h0"

    def blackhole() -> None:
        time.sleep(2.5)  # the server's 1.5 s, then a second of the run
        subprocess.run(
            [*MRC, "fail", "-l", lab, link, "--mode", "blackhole"], check=True, capture_output=True
        )

    fault = threading.Thread(target=blackhole)
    fault.start()
    try:
        client, server = run_pair(default_lab, ["ib_write_bw", "-s", "4096", "-D", "4"])
    finally:
        fault.join()
        subprocess.run([*MRC, "heal", "-l", lab, link], capture_output=True)
    assert client.returncode == 0, client.stdout + client.stderr
    _iterations, _peak, average, _rate = bw_row(client.stdout, 4096)
    assert average > 0


def test_the_nics_death_ends_a_c_program_within_a_second(default_lab):
    """kill -9 of h0's daemon under ib_write_bw: the native library's watcher
    hears the session's end, its QPs' outstanding WRs complete with
    WR_FLUSH_ERR (status 5), and the program, which polls, ends at once; then
    the daemon is restarted as `up --reuse` does and a new run works."""
    import os

    from mrc_nic.fabric import testbed

    _need("ib_write_bw")
    lab = default_lab.lab
    server, client = long_write_bw(
        default_lab, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(1.0)  # mid-run
        os.kill(lab_client.call(lab, "h0", daemonops.Ping()).pid, signal.SIGKILL)
        killed = time.monotonic()
        out, err = client.communicate(timeout=20)
        heard = time.monotonic() - killed
        assert client.returncode != 0, out + err
        assert heard < 2.0, f"ib_write_bw ran {heard:.2f} s after its NIC died"
        said = out + err
        assert "status 5" in said or "IBV_EVENT_DEVICE_FATAL" in said, said
    finally:
        for p in (client, server):
            if p.poll() is None:  # ours, by pid
                p.kill()
                p.wait()
        assert "h0" in testbed.start_daemons(default_lab)  # what `up --reuse` does
    rerun, _ = run_pair(default_lab, ["ib_write_bw", "-s", "65536", "-n", "200"])
    assert rerun.returncode == 0, rerun.stderr
