#!/usr/bin/env python3
"""Congestion: a 7:1 incast with a bystander, and a permutation, with NSCC and
with a fixed window (issue 5).

Both scenarios are mrc_nic.workloads.scenario's (`mrc-nic scenario incast|permutation`)
on clos-8 (8 hosts, 8 planes, 4 T0 and 2 T1 per plane) with every link
slowed down (--rate, --perm-rate), so that the links, not this 2-core
machine, are the bottleneck: at 1 Gbit/s the fabric would carry 64 Gbit/s,
and the emulator moves well under 1 Gbit/s here. Each case is run with CC
profile 1 (NSCC) and profile 0 (a fixed window of 128 packets, NSCC
disabled), on a lab of its own, so that no transfer left over from one case
disturbs the next, and the figures are printed side by side:

- incast: per-flow goodput, the incast's aggregate against the receiver's
  link, the bystander's goodput against its fair share (target >= 0.9),
  QPs in ERR (target 0), and what the switches marked (ECN) and trimmed, by
  tier (T0 up, T1 down, T0 to host);
- permutation: every host to the host under the next T0, each flow's
  goodput against its link rate (target >= 0.9).

Usage (root; the project's venv):
    .venv/bin/python scripts/bench_congestion.py [--json FILE] [--only incast|permutation]
        [--rate 10mbit] [--perm-rate 10mbit] [--duration 4] [--rounds 1]

Every lab it makes is named bcc<pid><case> and is taken down by that exact
name when its case ends, also on error, Ctrl-C or SIGTERM. A case is bounded
in time: flows still running after --timeout seconds are reported as such.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path

from mrc_nic.transport import nscc
from mrc_nic.workloads import scenario

PID = os.getpid() % 10**5
TARGET = 0.9
CASES = {"nscc": nscc.DEFAULT_NSCC, "fixed": nscc.FIXED}


MAIN_PID = os.getpid()


def _terminate(signum, frame):
    """SIGTERM: unwind, so that every lab comes down. pyroute2 forks helpers
    that inherit this handler and are ended by SIGTERM: they just die."""
    if os.getpid() != MAIN_PID:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt


def run_case(kind: str, cc: str, args, round_no: int) -> dict:
    rate = args.rate if kind == "incast" else args.perm_rate
    tag = f"bcc{PID}{kind[0]}{cc[0]}{round_no}"
    topo = scenario.scenario_topology("clos-8", tag, rate=rate)
    t0 = time.monotonic()
    with scenario.with_lab(topo):
        up = time.monotonic() - t0
        opts = dict(duration=args.duration, cc_profile=CASES[cc], no_cc=False, timeout=args.timeout)
        if kind == "incast":
            report = scenario.incast(topo.lab, senders=args.senders, **opts)
        else:
            report = scenario.permutation(topo.lab, **opts)
    report["bringup_s"] = round(up, 1)
    report["round"] = round_no
    return report


def _mbit(bps) -> str:
    return "-" if bps is None else f"{bps / 1e6:.1f}"


def summary(r: dict) -> dict:
    s = r["switch"]
    out = {
        "cc": r["cc"],
        "qps_in_err": r["qps_in_err"],
        "errors": sum(1 for f in r["flows"] if f["error"]),
        "marked": {t: s[t]["ecn_marked"] for t in s},
        "trimmed": {t: s[t]["trimmed"] for t in s},
        "dropped": sum(s[t]["drop_buffer"] for t in s),
        "retransmits": sum(f["retransmits"] or 0 for f in r["flows"]),
        "timeouts": sum(f["timeouts"] or 0 for f in r["flows"]),
        "cpu_busy_cores": r["cpu_busy_cores"],
    }
    if r["scenario"] == "incast":
        b = r.get("bystander") or {}
        out |= {
            "bystander_ratio": b.get("ratio"),
            "bystander_bps": b.get("goodput_bps"),
            "bystander_fair_bps": b.get("fair_bps"),
            "incast_utilization": r["incast"]["utilization"],
            "incast_ceiling": r["incast"]["ceiling"],
            "senders_running": b.get("senders_running"),
            "incast_jain": r["incast"]["jain_fairness"],
            "pass": (b.get("ratio") or 0) >= TARGET and r["qps_in_err"] == 0,
        }
    else:
        out |= {
            "min_ratio": r["min_ratio"],
            "mean_ratio": r["mean_ratio"],
            "ceiling": r["ceiling"],
            "min_of_ceiling": r["min_of_ceiling"],
            "jain": r["jain_fairness"],
            "pass": (r["min_ratio"] or 0) >= TARGET and r["qps_in_err"] == 0,
        }
    return out


def print_report(kind: str, reports: list[dict]) -> None:
    print(f"\n== {kind}")
    r0 = reports[0]
    t = r0["topology"]
    print(
        f"clos-8: {t['hosts']} hosts x {t['planes']} planes, links {_mbit(t['link_bps'])} "
        f"Mbit/s, host {_mbit(r0['host_bps'])} Mbit/s, base RTT {t['base_rtt_ns'] / 1e6:.2f} ms, "
        f"duration {r0['duration_s']} s"
    )
    for r in reports:
        s = summary(r)
        print(f"-- {r['cc']} (CC profile {r['cc_profile']}), round {r['round']}")
        for f in r["flows"]:
            print(
                f"   {f['name']:<8} {f['role']:<12} goodput {_mbit(f['goodput_bps']):>6} "
                f"Mbit/s  ratio {f['ratio'] if f['ratio'] is not None else '-':>5}  "
                f"retx {f['retransmits']}  timeouts {f['timeouts']}  cwnd {f['cwnd_mean']}"
                + (f"  ERROR {f['error']}" if f["error"] else "")
            )
        if kind == "incast":
            print(
                f"   bystander {s['bystander_ratio']} of fair (senders running "
                f"{s['senders_running']}); incast utilization {s['incast_utilization']} "
                f"(ceiling {s['incast_ceiling']}), Jain {s['incast_jain']}"
            )
        else:
            print(
                f"   per flow: min {s['min_ratio']}, mean {s['mean_ratio']} of the link rate; "
                f"ceiling {s['ceiling']} (data + SACKs on every link): min "
                f"{s['min_of_ceiling']} of it"
            )
        print(
            f"   marked {s['marked']}  trimmed {s['trimmed']}  dropped {s['dropped']}  "
            f"retransmits {s['retransmits']}  timeouts {s['timeouts']}  "
            f"QPs in ERR {s['qps_in_err']}  CPUs busy {s['cpu_busy_cores']}  "
            f"{'PASS' if s['pass'] else 'FAIL'}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("incast", "permutation"))
    ap.add_argument("--rate", default="10mbit", help="incast: every link's rate")
    ap.add_argument("--perm-rate", default="10mbit", help="permutation: every link's rate")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per flow at fair share")
    ap.add_argument("--senders", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds a case may run")
    ap.add_argument("--json", metavar="FILE", help="also write every figure as JSON to FILE")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    kinds = [args.only] if args.only else ["incast", "permutation"]
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    started = time.monotonic()
    try:
        for kind in kinds:
            for n in range(args.rounds):
                # alternate the order, so that neither always runs first
                order = ["nscc", "fixed"] if n % 2 == 0 else ["fixed", "nscc"]
                for cc in order:
                    results[kind].append(run_case(kind, cc, args, n))
            print_report(kind, results[kind])
    except KeyboardInterrupt:
        print("interrupted: every lab of this run is down", file=sys.stderr)
        return 130
    out = {
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
        "args": vars(args),
        "seconds": round(time.monotonic() - started, 1),
        "summary": {k: [summary(r) for r in v] for k, v in results.items()},
        "runs": results,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")
    print(json.dumps(out["summary"], indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
