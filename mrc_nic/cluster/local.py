"""A Ray cluster of several "machines" on one box, for tests and benchmarks.

Each machine is a network namespace (<prefix>m<i>) with a veth to a bridge
(<prefix>br0) and an underlay address of its own (TEST-NET-2 by default), in
which a Ray node runs as root: `ray start --head` in the first, `ray start
--address` in the others. Its agents, and the lab namespaces and VXLAN
devices they make, work there as on a machine of their own; each machine
gets its own lab state directory and BPF pin root (MRC_NIC_RUN_DIR,
MRC_NIC_PIN_ROOT), as separate machines have. `stop` ends the Ray processes
it started (every process in its machines' namespaces, found by namespace)
and removes the namespaces, veths and bridge by name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from mrc_nic.errors import MrcNicError

HEAD_PORT = 6379
START_TIMEOUT_S = 120.0


class LocalClusterError(MrcNicError, RuntimeError):
    """The local cluster could not be started."""


class LocalCluster:
    def __init__(
        self,
        prefix: str = "cl",
        machines: int = 2,
        subnet: str = "198.51.100.0/24",
        mtu: int = 9000,
        cpus: int = 1,
    ) -> None:
        self.prefix = prefix
        self.count = machines
        net = ipaddress.IPv4Network(subnet)
        self.addresses = [str(net.network_address + 1 + i) for i in range(machines)]
        self.prefixlen = net.prefixlen
        self.mtu = mtu
        self.cpus = cpus
        self.bridge = f"{prefix}br0"
        self.tmp = Path(f"/tmp/{prefix}ray")
        self.procs: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"{self.addresses[0]}:{HEAD_PORT}"

    def netns(self, i: int) -> str:
        return f"{self.prefix}m{i}"

    def env(self, i: int) -> dict[str, str]:
        """A machine's own lab state directory and pin root."""
        return {
            "MRC_NIC_RUN_DIR": f"/run/mrc-nic-{self.prefix}/m{i}",
            "MRC_NIC_PIN_ROOT": f"/sys/fs/bpf/mrc-nic-{self.prefix}-m{i}",
        }

    # ---- start -----------------------------------------------------------------------
    def start(self) -> LocalCluster:
        try:
            self._underlay()
            self._ray(0, ["--head", "--port", str(HEAD_PORT), "--include-dashboard", "false"])
            self._wait_nodes(1)
            for i in range(1, self.count):
                self._ray(i, ["--address", self.address])
            self._wait_nodes(self.count)
        except BaseException:
            self.stop()
            raise
        return self

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def _underlay(self) -> None:
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("link", "set", self.bridge, "mtu", str(self.mtu), "up")
        for i, address in enumerate(self.addresses):
            ns, veth = self.netns(i), f"{self.prefix}u{i}"
            self._ip("netns", "add", ns)
            self._ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._ip("link", "set", veth, "master", self.bridge, "mtu", str(self.mtu), "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            self._ip("-n", ns, "link", "set", "eth0", "mtu", str(self.mtu), "up")
            self._ip("-n", ns, "addr", "add", f"{address}/{self.prefixlen}", "dev", "eth0")

    def _ray(self, i: int, args: list[str]) -> None:
        ray = str(Path(sys.executable).parent / "ray")
        log = self.tmp / f"m{i}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            "nsenter",
            f"--net=/run/netns/{self.netns(i)}",
            ray,
            "start",
            "--block",
            *args,
            "--node-ip-address",
            self.addresses[i],
            "--num-cpus",
            str(self.cpus),
            "--temp-dir",
            str(self.tmp / f"m{i}"),
            "--disable-usage-stats",
        ]
        env = dict(os.environ, **self.env(i))
        env.pop("RAY_ADDRESS", None)
        with open(log, "ab") as out:
            self.procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=out,
                    stderr=out,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            )

    def _wait_nodes(self, n: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            done = self.cli_run(["status", "--address", self.address], ray=True)
            if done.returncode == 0 and done.stdout.count(" node_") >= n:
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        raise LocalClusterError(
            f"the local Ray cluster did not reach {n} node(s); see {self.tmp}/m*.log"
        )

    # ---- use -------------------------------------------------------------------------
    def cli_command(self, argv: list[str], ray: bool = False) -> tuple[list[str], dict]:
        """The command line and environment of `mrc-nic ARGV` (or `ray ARGV`)
        on the first machine, as a user there would run it."""
        tool = str(Path(sys.executable).parent / ("ray" if ray else "mrc-nic"))
        env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
        for key in ("RAY_ADDRESS", "MRC_NIC_LAB", "MRC_NIC_RUN_DIR", "MRC_NIC_PIN_ROOT"):
            env.pop(key, None)
        return ["nsenter", f"--net=/run/netns/{self.netns(0)}", tool, *argv], env

    def cli_run(
        self, argv: list[str], ray: bool = False, timeout: float = 900.0, check: bool = False
    ) -> subprocess.CompletedProcess:
        """`mrc-nic ARGV` (or `ray ARGV`) on the first machine, as a user there would."""
        cmd, env = self.cli_command(argv, ray)
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, check=check
        )

    def kill_machine(self, i: int) -> None:
        """A machine dies: its Ray node's processes end at once (SIGKILL)."""
        for pid in self.pids(i):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pids(self, i: int) -> list[int]:
        """Processes in machine i's namespace: the Ray node and what it started."""
        try:
            target = os.stat(f"/run/netns/{self.netns(i)}").st_ino
        except FileNotFoundError:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                        pids.append(int(entry))
                except OSError:
                    continue
        return [p for p in pids if p != os.getpid()]

    # ---- stop --------------------------------------------------------------------------
    def stop(self) -> None:
        """End every process in the machines' namespaces, then remove what start made."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(0.1)
        for i in range(self.count):
            self.kill_machine(i)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for i in range(self.count):
            subprocess.run(["ip", "netns", "del", self.netns(i)], capture_output=True)
            subprocess.run(["ip", "link", "del", f"{self.prefix}u{i}"], capture_output=True)
            for path in self.env(i).values():
                with contextlib.suppress(OSError):
                    Path(path).rmdir()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        with contextlib.suppress(OSError):
            Path(f"/run/mrc-nic-{self.prefix}").rmdir()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
