"""One machine's part of a scenario on a cluster lab: its hosts' processes,
its receive QPs' samples, its switches' and CPU's figures.

A scenario's flows are one process per host (scenario_hosts), driven line by
line by one parent (scenario.run_flows). On a cluster lab the hosts are on
several machines; each machine's agent starts this part (`python -m
mrc_nic.workloads.scenario_part`, the lab's name and its hosts' arguments as
JSON on its command line), which starts the processes of its own hosts and
relays their lines to the parent (the CLI's cluster_flows, through the
agent: stdout) and the parent's to them (stdin), one JSON object a line:

- to the parent: {"host": H, "line": {...}} (a host's line: ready,
  connected, started, done, error), {"host": H, "gone": true} (its process
  ended), {"samples": [[flow, t, placed bytes], ...]}, {"cwnd": [[flow, n], ...]},
  {"meter": [k, t, raw sample]}, and at the end {"final": {...}};
- from the parent: {"tell": {H: message}}, {"go": {...}}, {"end": true}.

Times: the parent gives the flows' time 0 as a wall-clock time (every
machine's clock synchronised, as a cluster's are; one box shares one); the
part turns it into its own CLOCK_MONOTONIC, in which its hosts time their
flows and its NIC stamps placements, and reports every time as seconds from
time 0. Its meter samples (fidelity.raw_to_json) are taken every
FIDELITY_EVERY_S from time 0, so sample k of every machine is of the same
moment, and the parent judges each machine between two of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from mrc_nic import nic
from mrc_nic.kernel import cpustat
from mrc_nic.kernel.fdwait import readable
from mrc_nic.lab.state import open_lab
from mrc_nic.observe import fidelity
from mrc_nic.observe.port_table import PortCounterTable
from mrc_nic.workloads import hostprocs, scenario, scenario_hosts

PARENT_GRACE_S = 60.0  # after the flows' deadline and its grace: the parent's "end" is due


def say(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Part:
    def __init__(self, lab: str, hosts: dict[str, dict]) -> None:
        self.lab = lab
        _, self.topo = open_lab(lab)
        self.procs = {
            h: hostprocs.HostProc(
                self.topo.netns(h), scenario_hosts.__name__, args, lab=lab, host=h
            )
            for h, args in hosts.items()
        }
        self.t0: float | None = None  # time 0 on this machine's monotonic clock
        self.recv: dict[int, str] = {}  # receive QPN -> flow, of this machine's hosts
        self.send: dict[int, str] = {}  # send QPN -> flow
        self.stdin = b""
        self.gone: set[str] = set()  # hosts whose process ended

    # ---- relaying ------------------------------------------------------------------------
    def from_host(self, host: str, line: dict) -> None:
        if "ready" in line:
            for name, end in line["ready"]["recvs"].items():
                self.recv[int(end["qpn"])] = name
            for name, end in line["ready"]["sends"].items():
                self.send[int(end["qpn"])] = name
        if ("started" in line or "done" in line) and self.t0 is not None:
            at = line.get("at_ns") or time.monotonic_ns()  # to ns from time 0
            line = dict(line, at_ns=at - int(self.t0 * 1e9))
        say({"host": host, "line": line})

    def from_parent(self) -> list[dict]:
        chunk = os.read(0, 65536)
        if not chunk:
            raise EOFError("the parent is gone")
        self.stdin += chunk
        out = []
        while b"\n" in self.stdin:
            line, self.stdin = self.stdin.split(b"\n", 1)
            if line.strip():
                out.append(json.loads(line))
        return out

    def pump(self, timeout: float) -> list[dict]:
        """Relay what the hosts said within `timeout`; the parent's messages."""
        fds = {p.proc.stdout.fileno(): h for h, p in self.procs.items() if h not in self.gone}
        got = []
        for fd in readable([0, *fds], timeout):
            if fd == 0:
                got += self.from_parent()
                continue
            h = fds[fd]
            p = self.procs[h]
            alive = p.feed()
            for line in p.lines:
                self.from_host(h, line)
            p.lines.clear()
            if not alive:
                self.gone.add(h)
                say({"host": h, "gone": True})
        return got

    # ---- the run -------------------------------------------------------------------------
    def run(self) -> None:
        # A parent that is gone without a word (killed) leaves this part's
        # stdin open in its agent: the part gives up on its own after this.
        give_up = time.monotonic() + 2 * scenario.START_S
        while time.monotonic() < give_up:  # setup: relay until the parent says go
            for msg in self.pump(1.0):
                if "tell" in msg:
                    for h, m in msg["tell"].items():
                        self.procs[h].tell(m)
                elif "go" in msg:
                    return self.drive(msg["go"])
                elif "end" in msg:
                    return None

    def drive(self, go: dict) -> None:
        self.t0 = time.monotonic() + (go["t0_wall"] - time.time())
        t0_ns = int(self.t0 * 1e9)
        for h, p in self.procs.items():
            starts = {name: t0_ns + int(s * 1e9) for name, s in go["starts"].get(h, {}).items()}
            p.tell(
                {
                    "go": True,
                    "starts_ns": starts,
                    "deadline_ns": t0_ns + int(go["deadline_s"] * 1e9),
                    "wait": go["wait"],
                }
            )
        every = go["every"]
        with (
            PortCounterTable(self.lab) as ports,
            nic.NicMaps.open(self.lab) as maps,
            fidelity.Meter(topo=self.topo) as meter,
        ):
            before = scenario.port_totals(self.topo, ports.read())
            nic_before = maps.counters()
            cpu0 = cpustat.sample()
            k = 0
            ended = False
            give_up = self.t0 + go["deadline_s"] + scenario.REPORT_GRACE_S + PARENT_GRACE_S
            while not ended and time.monotonic() < give_up:
                now = time.monotonic() - self.t0
                if now >= k * scenario.FIDELITY_EVERY_S:
                    self.meter_sample(meter, k)
                    k = int(now / scenario.FIDELITY_EVERY_S) + 1
                self.sample(maps)
                ended = any("end" in msg for msg in self.pump(every))
            self.sample(maps)
            self.meter_sample(meter, k)
            after = scenario.port_totals(self.topo, ports.read())
            nic_after = maps.counters()
            cpu = cpustat.busy_cores(cpu0, cpustat.sample())
        self.end()
        say(
            {
                "final": {
                    "switch": {t: {c: after[t][c] - before[t][c] for c in after[t]} for t in after},
                    "nic": {c: nic_after.get(c, 0) - nic_before.get(c, 0) for c in nic_after},
                    "cpu_busy_cores": cpu,
                    "load_avg": [round(x, 2) for x in os.getloadavg()],
                }
            }
        )

    def meter_sample(self, meter: fidelity.Meter, k: int) -> None:
        raw = fidelity.raw_to_json(meter.raw())
        say({"meter": [k, round(time.monotonic() - self.t0, 4), raw]})

    def sample(self, maps: nic.NicMaps) -> None:
        """Bytes placed and when (this machine's receive QPs), and each send QP's window."""
        samples, cwnds = [], []
        for qpn, name in self.recv.items():
            with contextlib.suppress(KeyError, OSError):
                st = maps.rq_raw(qpn).stats
                if st.last_place_ns:
                    samples.append(
                        [name, round(st.last_place_ns / 1e9 - self.t0, 6), st.placed_bytes]
                    )
        for qpn, name in self.send.items():
            with contextlib.suppress(KeyError, OSError):
                cwnd = maps.sq_raw(qpn).cwnd
                if cwnd:
                    cwnds.append([name, cwnd])
        if samples:
            say({"samples": samples})
        if cwnds:
            say({"cwnd": cwnds})

    def end(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(RuntimeError):
                p.tell({"end": True})
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.proc.wait(timeout=10)
        hostprocs.end_all(list(self.procs.values()))


def main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    part = None
    try:
        part = Part(args["lab"], args["hosts"])
        part.run()
    except BaseException as e:  # one line for the parent
        say({"error": f"{type(e).__name__}: {e}"})
    finally:
        if part is not None:
            hostprocs.end_all(list(part.procs.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
