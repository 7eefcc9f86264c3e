#!/usr/bin/env python3
"""ACK coalescing A/B (issue 26 item 4): `mrc-nic doctor`'s two measurements on
labs of doctor's shape (2 hosts, 1 plane, two tiers) that differ only in
[nic] ack_every (a case "4") and, for a case "4:1000", the TBFs' burst in us
(as shipped: topology.TBF_BURST_SECONDS, 250 us), interleaved in one run,
their order turned every round:

1. links out of the way (every link at doctor.UNCAPPED_BPS): one 64 MiB write
   (--size-mib);
   goodput, data packets a second, CPU per data packet (the machine's busy time
   over the write, /proc/stat through the write's fidelity meter: the whole
   machine, other work included), and the packet-hops each data packet cost
   (the switch ports' ingress counters: data, SACKs and kicks that crossed a
   switch);
2. doctor's bisection of the link rate for the highest rate at which a write
   is link-bound and reaches doctor.FAITHFUL_SHARE of the links.

Both labs stay up for the whole run. Prints one JSON object (--json FILE too)
with every round and the medians. docs/measurements.md, "ACK coalescing".

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_ackcoalesce.py [--rounds 3] [--cases 1 4 4:1000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from typing import Any

from mrc_nic.fabric import testbed
from mrc_nic.lab import topology
from mrc_nic.workloads import doctor


def parse_case(text: str) -> tuple[int, int | None]:
    """A case: "EVERY" or "EVERY:BURST_US" (ack_every, and the TBFs' burst in us)."""
    every, _, burst = text.partition(":")
    return int(every), int(burst) if burst else None


def lab_topology(lab: str, every: int, rate_bps: int, planes: int = 1) -> topology.Topology:
    base = doctor.doctor_topology(lab, rate_bps)
    data = dict(base.raw)
    data["fabric"] = {**data["fabric"], "planes": planes}
    data["nic"] = {**data.get("nic", {}), "ack_every": every}
    return topology.from_dict(base.path, data, lab=lab)


@contextlib.contextmanager
def tbf_burst(burst_us: int | None):
    """The TBFs' bucket (topology.TBF_BURST_SECONDS, read when a queue is set)
    for what runs inside; None: as shipped."""
    old = topology.TBF_BURST_SECONDS
    if burst_us is not None:
        topology.TBF_BURST_SECONDS = burst_us * 1e-6
    try:
        yield
    finally:
        topology.TBF_BURST_SECONDS = old


def hops_now(lab: str) -> int:
    from mrc_nic.fabric import switchport

    with switchport.SwitchPortMaps.open(lab) as maps:
        return sum(maps.counters(p, switchport.INGRESS).pkts for p in range(maps.max_keys // 2))


def uncapped(topo: topology.Topology, size: int) -> dict[str, Any]:
    topo = doctor.set_rate(topo, doctor.UNCAPPED_BPS)
    h0 = hops_now(topo.lab)
    r = doctor.measure_write(topo, size)
    hops = hops_now(topo.lab) - h0
    cpu_s = (r["busy"] or 0) * (os.cpu_count() or 1) * r["seconds"]
    return {
        "goodput_gbps": round(r["goodput_bps"] / 1e9, 3),
        "pps": r["pps"],
        "cpu_us_per_packet": round(cpu_s / r["packets"] * 1e6, 2),
        "hops_per_packet": round(hops / r["packets"], 2),
        "cpu_us_per_hop": round(cpu_s / hops * 1e6, 2) if hops else None,
        "busy": r["busy"],
    }


def faithful_rate(topo: topology.Topology, top_bps: float) -> dict[str, Any]:
    """doctor.run's bisection, from top_bps (the raw rate the uncapped write filled)."""
    frame, seg = doctor.frame_bytes(topo), doctor.nic.seg_size(topo.mtu)
    lo, hi, rate, steps = None, top_bps, doctor.FIRST_STEP * top_bps, []
    for _ in range(doctor.STEPS):
        rate = int(rate)
        topo = doctor.set_rate(topo, rate)
        size = max(doctor.MIN_SIZE, int(rate / 8 * seg / frame * doctor.STEP_S))
        step = doctor.measure_write(topo, size)
        ok = doctor._faithful(step)
        steps.append({"mbps": rate // 10**6, "verdict": step["verdict"], "faithful": ok})
        lo, hi = (rate, hi) if ok else (lo, rate)
        rate = math.sqrt(lo * hi) if lo else rate * doctor.FIRST_STEP
    return {"faithful_mbps": (lo or 0) // 10**6, "steps": steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--cases",
        nargs="+",
        default=["1", "4"],
        help='one lab each: "EVERY" (its ack_every) or "EVERY:BURST_US" (and its TBF burst)',
    )
    ap.add_argument("--size-mib", type=int, default=64, help="the uncapped write (doctor's: 64)")
    ap.add_argument("--planes", type=int, default=1, help="planes of the labs (doctor's: 1)")
    ap.add_argument("--no-bisect", action="store_true", help="skip the faithful-rate bisection")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    pid = os.getpid() % 10**5
    cases = {c: parse_case(c) for c in args.cases}
    topos = {
        c: lab_topology(f"ev{i}x{pid}"[:12], e, doctor.UNCAPPED_BPS, args.planes)
        for i, (c, (e, _)) in enumerate(cases.items())
    }
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "rounds": [],
    }
    up = []
    try:
        for c, t in topos.items():
            with tbf_burst(cases[c][1]):
                testbed.up(t)
            up.append(t.lab)
        for r in range(args.rounds):
            order = args.cases if r % 2 == 0 else list(reversed(args.cases))
            for c in order:
                row: dict[str, Any] = {"round": r, "case": c, "ack_every": cases[c][0]}
                row["tbf_burst_us"] = cases[c][1]
                row["load_avg"] = round(os.getloadavg()[0], 2)
                with tbf_burst(cases[c][1]):
                    row.update(uncapped(topos[c], args.size_mib * 2**20))
                    if not args.no_bisect:
                        top = row["goodput_gbps"] * 1e9 * doctor.frame_bytes(topos[c])
                        top /= doctor.nic.seg_size(topos[c].mtu)
                        row.update(faithful_rate(topos[c], top))
                print(json.dumps(row), file=sys.stderr, flush=True)
                out["rounds"].append(row)
    finally:
        for lab in up:
            testbed.down(lab)
    out["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    out["medians"] = {
        c: {
            k: statistics.median(x[k] for x in out["rounds"] if x["case"] == c)
            for k in ("goodput_gbps", "cpu_us_per_packet", "hops_per_packet", "cpu_us_per_hop")
            + (() if args.no_bisect else ("faithful_mbps",))
        }
        for c in args.cases
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
