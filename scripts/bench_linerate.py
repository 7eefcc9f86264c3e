#!/usr/bin/env python3
"""Line rate (issue 18): one QP's WRITE against MPTCP over a plain kernel fabric.

Brings up two fabrics of the same shape (the topology's: by default 2 hosts,
4 planes, every link 1 Gbit/s through a TBF with the same burst and buffer):

- lr<pid>, an mrc-nic lab (NIC XDP on the hosts, the switch port program on
  every switch port). Its switches forward MRC packets in BPF or through the
  IP stack ([fabric] forwarding, bpf/switch_port.h "Forwarding"); the script
  flips that setting between runs on the same lab, so both are measured;
- lp<pid>, a plain kernel fabric built by the same builder with no BPF
  program on any port (no XDP on a veth, so TCP keeps GSO): the namespaces,
  veths, routes, sysctls and TBFs only. MPTCP runs there, one subflow per
  plane (mrc_nic.workloads.peers: IPPROTO_MPTCP sockets, every plane
  address of h1 announced), as a user would run it instead of mrc-nic.

Each round runs the three cases once, their order turned every round:
`mrc-nic write h0 h1 --size SIZE` (rdma_write.write, one QP) with BPF
forwarding, the same with kernel forwarding, and an MPTCP stream of
--seconds. For each: goodput, busy CPUs over the run (/proc/stat, the whole
machine: softirq work belongs to no process), data packets per second and
CPU time per packet. Both fabrics stay up for the whole run (the idle one
costs nothing measurable); nobody else's lab should be up. With an uncapped
topology (`--topology netns/uncapped.toml`) the target is goodput per busy
CPU above MPTCP's (issue 18), and the table says that instead.

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_linerate.py [--quick] [--rounds N] [--size 1G] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mrc_nic import nic, resources, units
from mrc_nic.kernel import cpustat, netns
from mrc_nic.lab import topology
from mrc_nic.workloads import peers, rdma_write
from mrc_nic.workloads.benchkit import (
    add_common_args,
    begin,
    cpu_figures,
    cpu_per_packet_and_rate,
    fidelity_of,
    log,
    median,
    own_lab,
    plain_fabric,
    print_table,
    stream_packets,
    table_row,
    verdict,
    write_packets,
)

PID = os.getpid()
CASES = ("bpf", "kernel", "mptcp")
LABEL = {
    "bpf": "mrc-nic write, 1 QP, switches forward in BPF",
    "kernel": "mrc-nic write, 1 QP, switches forward through the IP stack",
    "mptcp": "MPTCP, 4 subflows, plain kernel fabric (no BPF)",
}
TARGET_OF_LINK = 0.97


def foreign_labs(mine: tuple[str, ...]) -> list[str]:
    """Other labs' namespaces on this machine (their traffic would skew a timing)."""
    return [n for n in netns.list_names() if n.startswith("mrc-") and not n.startswith(mine)]


def wait_quiet(mine: tuple[str, ...], limit: float) -> float:
    """Wait up to `limit` s while another lab is up; the seconds waited."""
    t0 = time.monotonic()
    while foreign_labs(mine) and time.monotonic() - t0 < limit:
        time.sleep(2)
    return round(time.monotonic() - t0, 1)


def run_write(lab: str, mode: str, size: int, seg: int) -> dict[str, Any]:
    from mrc_nic.fabric import switchport

    with switchport.SwitchPortMaps.open(lab) as maps:
        maps.set_forwarding(mode)
        fwd0 = maps.fwd_totals()["redirected"]
        hops0 = packet_hops(maps)
        cpu0 = cpustat.sample()
        try:
            r = rdma_write.write(lab, "h0", "h1", size, wait=max(60.0, size * 8 / 0.05e9))
        except Exception as e:  # said in the row; the run goes on
            return {"case": mode, "ok": False, "error": f"{type(e).__name__}: {e}"}
        cpu1 = cpustat.sample()
        fwd = maps.fwd_totals()["redirected"] - fwd0
        hops = packet_hops(maps) - hops0
    ok = bool(r.get("completed"))
    packets = write_packets(r["bytes"], seg, r.get("retransmits"))
    return {
        "case": mode,
        "ok": ok,
        "error": r.get("error"),
        "gbps": round(r["goodput_bps"] / 1e9, 4) if ok else None,
        "seconds": r["seconds"],
        "retransmits": r.get("retransmits"),
        "timeouts": r.get("timeouts"),
        "packets": packets,
        "redirected_by_switches": fwd,
        "packet_hops": hops,
        "fidelity": r.get("fidelity"),
        **cpu_figures(cpu0, cpu1, r["seconds"], packets, hops),
    }


def packet_hops(maps) -> int:
    """Packets seen at every switch port's ingress hook, data and SACKs: one
    per packet per switch it crossed."""
    from mrc_nic.fabric.switchport import INGRESS

    return sum(maps.counters(p, INGRESS).pkts for p in range(maps.max_keys // 2))


def run_mptcp(plain, seconds: float) -> dict[str, Any]:
    cpu0 = cpustat.sample()
    try:
        res = peers.run_stream(plain, "h0", "h1", "mptcp", seconds, 0.01, count_planes=False)
    except Exception as e:
        return {"case": "mptcp", "ok": False, "error": f"{type(e).__name__}: {e}"}
    cpu1 = cpustat.sample()
    retrans = sum(s.get("bytes_retrans", 0) for s in res.subflows)
    packets, in_all = stream_packets(res.bytes_window, res.bytes_total, retrans, plain.mtu)
    return {
        "case": "mptcp",
        "ok": res.bytes_window > 0,
        "error": "; ".join(res.errors) or None,
        "gbps": round(res.goodput_bps / 1e9, 4),
        "seconds": res.seconds,
        "subflows": len(res.subflows),
        "longest_gap_s": res.longest_gap_s,
        "packets": packets,
        **cpu_per_packet_and_rate(cpu0, cpu1, packets, in_all, res.seconds),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    return {
        "runs": len(runs),
        "ok": len(ok),
        "gbps": [r.get("gbps") for r in runs],
        "gbps_median": median([r["gbps"] for r in ok]),
        "fidelity": fidelity_of(runs),
        "busy_cores_median": median([r.get("busy_cores") for r in ok]),
        "mpps_median": median([r.get("mpps") for r in ok]),
        "cpu_us_per_packet_median": median([r.get("cpu_us_per_packet") for r in ok]),
        "cpu_us_per_packet_hop_median": median([r.get("cpu_us_per_packet_hop") for r in ok]),
        "gbps_per_core_median": median(
            [r["gbps"] / r["busy_cores"] for r in ok if r.get("busy_cores")]
        ),
    }


def table_rows(summary: dict[str, dict], line_bps: float) -> list[dict[str, Any]]:
    """Capped links: goodput against 0.97 of the links and MPTCP. Uncapped
    (line_bps 0): goodput, and goodput per busy core against MPTCP's (the
    issue's uncapped target)."""
    peer = summary["mptcp"]["gbps_median"]
    rows = []
    for case in ("bpf", "kernel"):
        mrc = summary[case]["gbps_median"]
        where = f"single QP, {'BPF' if case == 'bpf' else 'IP-stack'} switch forwarding"
        if line_bps:
            bar = TARGET_OF_LINK * line_bps / 1e9
            met = None if mrc is None else mrc >= bar and (peer is None or mrc > peer)
            target = f">= {bar:.2f} and above MPTCP: {verdict(met, summary[case]['fidelity'])}"
        else:
            where += ", uncapped links"
            target = "-"
            per_core = summary[case]["gbps_per_core_median"]
            peer_per_core = summary["mptcp"]["gbps_per_core_median"]
            met = None if per_core is None or peer_per_core is None else per_core > peer_per_core
            rows.append(
                table_row(
                    "linerate",
                    where,
                    "goodput per busy CPU",
                    "Gbit/s per busy CPU",
                    per_core,
                    "MPTCP, plain kernel fabric",
                    peer_per_core,
                    target=f"above MPTCP's: {verdict(met)}",
                )
            )
        rows.append(
            table_row(
                "linerate",
                where,
                "goodput",
                "Gbit/s",
                mrc,
                "MPTCP, plain kernel fabric",
                peer,
                target=target,
            )
        )
        rows.append(
            table_row(
                "linerate",
                where,
                "CPU per packet",
                "us",
                summary[case]["cpu_us_per_packet_median"],
                "MPTCP, plain kernel fabric",
                summary["mptcp"]["cpu_us_per_packet_median"],
                ratio_is="peer/mrc",
            )
        )
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, __file__, quick_help="one round, 256 MiB WRITEs, 3 s streams")
    p.add_argument("--rounds", type=int, help="rounds (default 3, quick 1)")
    p.add_argument("--size", help="each WRITE (default 1G, quick 256M)")
    p.add_argument("--seconds", type=float, help="each MPTCP stream (default 8, quick 3)")
    p.add_argument("--topology", default=str(resources.TOPOLOGY_DIR / "default-1g.toml"))
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=300.0,
        help="before each case, wait up to this many s while another lab is up (default 300)",
    )
    args = p.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.size = units.parse_transfer_size(args.size or ("256M" if args.quick else "1G"))
    args.seconds = args.seconds or (3.0 if args.quick else 8.0)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    header = begin(__file__, argv)
    topo = topology.load(args.topology, lab=f"lr{PID}"[:12])
    plain = topology.load(args.topology, lab=f"lp{PID}"[:12])
    line_bps = topo.planes * (topo.rate_bps or 0)
    seg = nic.seg_size(topo.mtu)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "version": 1,
        **header,
        "labs": [topo.lab, plain.lab],
        "topology": args.topology,
        "args": {k: v for k, v in vars(args).items() if k != "out"},
    }
    runs: dict[str, list] = {c: [] for c in CASES}
    mine = (f"mrc-{topo.lab}-", f"mrc-{plain.lab}-")
    with own_lab(topo), plain_fabric(plain):
        peers.mptcp_setup(plain, "h0", "h1")
        for r in range(args.rounds):
            order = CASES[r % 3 :] + CASES[: r % 3]
            for case in order:
                waited = wait_quiet(mine, args.wait_quiet)
                log(f"round {r + 1}/{args.rounds}: {LABEL[case]}")
                if case == "mptcp":
                    run = run_mptcp(plain, args.seconds)
                else:
                    run = run_write(topo.lab, case, args.size, seg)
                run["round"] = r
                run["waited_for_other_labs_s"] = waited
                run["other_labs_after"] = len(foreign_labs(mine))
                runs[case].append(run)
                log(f"  {json.dumps({k: v for k, v in run.items() if k != 'case'})}")
        with contextlib.suppress(Exception):
            from mrc_nic.fabric import switchport

            with switchport.SwitchPortMaps.open(topo.lab) as maps:
                maps.set_forwarding(topo.forwarding)
    result["runs"] = runs
    result["summary"] = summary = {c: summarize(runs[c]) for c in CASES}
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    links = f"{(topo.rate_bps or 0) / 1e9:g} Gbit/s" if line_bps else "uncapped links"
    print(f"Line rate: {topo.planes} planes x {links}, "
          f"{args.rounds} rounds, medians (load {header['machine']['load_avg']} at the start, "
          f"{result['load_avg_end']} at the end)\n")  # fmt: skip
    for case in CASES:
        s = summary[case]
        share = (
            f"({(s['gbps_median'] or 0) * 1e9 / line_bps:.3f} of the links)"
            if line_bps
            else f"({s['gbps_per_core_median'] or 0:.3f} Gbit/s per busy CPU)"
        )
        print(
            f"{LABEL[case]:62s} {s['gbps_median'] or 0:6.3f} Gbit/s "
            f"{share}  rounds {s['gbps']}  "
            f"busy CPUs {s['busy_cores_median']}  {s['mpps_median']} Mpps  "
            f"{s['cpu_us_per_packet_median']} us CPU/packet"
            + (f", {s['cpu_us_per_packet_hop_median']} per packet-hop" if case != "mptcp" else "")
        )
    result["table"] = table_rows(summary, line_bps)
    print("\nResults table (README rows):")
    print_table(result["table"])
    path = out / "linerate.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
