"""Where a write's packet work runs (issue 18): one `mrc-nic write` on a lab
that is up, and `perf record -a -g` for a few seconds in its middle.

Prints, for the perf window: the data packets sent (the send QP's counter),
the network CPU (samples with net_rx_action or a BPF_PROG_RUN kick on their
stack) per data packet, each CPU's share of network work, the share of 1 ms
bins in which both CPUs did network work at once (how parallel the lab's
softirq work is), and in which context it ran (at an interrupt's exit, in
ksoftirqd, in a kick's syscall, at a bottom-half enable). docs/benchmarks.md,
"What holds the rate", has the figures and how to read them.

Needs root and perf. Example:
    .venv/bin/python scripts/profile_netcpu.py -l rate --size 2G -- --cc-profile 0 --cwnd 64
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

NET_MARKS = ("net_rx_action", "bpf_prog_test_run")
_HEADER = re.compile(r"^\s*(\S.*?)\s+\[(\d+)\]\s+([\d.]+):")


def parse_perf_script(text: str) -> list[tuple[int, float, str, str]]:
    """Samples of `perf script -F comm,cpu,time,ip,sym` with call chains:
    (cpu, time s, comm, the stack's symbols joined by spaces)."""
    samples: list[tuple[int, float, str, str]] = []
    head: tuple[int, float, str] | None = None
    stack: list[str] = []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            if head is not None:
                samples.append((*head, " ".join(stack)))
            head, stack = (int(m.group(2)), float(m.group(3)), m.group(1)), []
        elif head is not None and line.strip():
            stack.append(line.split()[-1])
    if head is not None:
        samples.append((*head, " ".join(stack)))
    return samples


def context(stack: str) -> str:
    """Where a network sample ran."""
    if "run_ksoftirqd" in stack:
        return "ksoftirqd"
    if "irq_exit" in stack:
        return "interrupt exit"
    if "bpf_prog_test_run" in stack:
        return "kick (BPF_PROG_RUN)"
    return "bottom-half enable in a task"


def analyse(samples: list[tuple[int, float, str, str]], bin_s: float = 0.001) -> dict:
    """Network samples per CPU, their contexts, and the share of bins (of
    those with network work) in which every CPU did some."""
    per_cpu: collections.Counter = collections.Counter()
    net_cpu: collections.Counter = collections.Counter()
    how: collections.Counter = collections.Counter()
    bins: dict[int, set[int]] = collections.defaultdict(set)
    for cpu, t, _comm, stack in samples:
        per_cpu[cpu] += 1
        if any(mark in stack for mark in NET_MARKS):
            net_cpu[cpu] += 1
            how[context(stack)] += 1
            bins[int(t / bin_s)].add(cpu)
    cpus = len(per_cpu) or 1
    net = sum(net_cpu.values())
    return {
        "samples": sum(per_cpu.values()),
        "net_samples": net,
        "net_share_per_cpu": {c: round(net_cpu[c] / per_cpu[c], 3) for c in sorted(per_cpu)},
        "bins_with_net_work": len(bins),
        "bins_all_cpus_net": sum(1 for b in bins.values() if len(b) >= cpus),
        "contexts": {k: round(v / net, 3) for k, v in how.most_common()} if net else {},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-l", "--lab", required=True, help="a lab that is up (default topology)")
    ap.add_argument("--size", default="2G", help="the write (long enough for the window)")
    ap.add_argument("--seconds", type=float, default=3.0, help="perf's window")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds after the QP appears")
    ap.add_argument("--freq", type=int, default=999, help="perf samples a second per CPU")
    ap.add_argument("write_args", nargs="*", help="more `mrc-nic write` options, after --")
    args = ap.parse_args(argv)

    from mrc_nic.nic import NicMaps

    maps = NicMaps.open(args.lab)
    before = set(maps.tx_qpns())
    cmd = [sys.executable, "-m", "mrc_nic", "write", "-l", args.lab, "h0", "h1"]
    cmd += ["--size", args.size, "--format", "json", *args.write_args]
    load = os.getloadavg()
    writer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        new: list[int] = []
        while not new and time.monotonic() < deadline and writer.poll() is None:
            new = [q for q in maps.tx_qpns() if q not in before]
            time.sleep(0.01)
        if not new:
            print("no send QP appeared: is the lab up?", file=sys.stderr)
            return 1
        time.sleep(args.settle)
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "perf.data")
            pkts0, t0 = maps.sq_raw(new[0]).tx_stats.data_pkts, time.monotonic()
            subprocess.run(
                ["perf", "record", "-a", "-g", "-F", str(args.freq), "-o", data, "--"]
                + ["sleep", str(args.seconds)],
                capture_output=True,
                check=True,
            )
            pkts1, t1 = maps.sq_raw(new[0]).tx_stats.data_pkts, time.monotonic()
            text = subprocess.run(
                ["perf", "script", "-i", data, "-F", "comm,cpu,time,ip,sym"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        result = json.loads(writer.communicate(timeout=300)[0])
    finally:
        if writer.poll() is None:
            writer.kill()
    a = analyse(parse_perf_script(text))
    pkts, span = pkts1 - pkts0, t1 - t0
    net_s = a["net_samples"] / args.freq
    print(
        json.dumps(
            {
                "load_avg": [round(x, 2) for x in load],
                "goodput_gbps": round(result["goodput_bps"] / 1e9, 3),
                "kpps": round(pkts / span / 1e3, 1),
                "net_cores": round(net_s / span, 2),
                "net_us_per_data_packet": round(1e6 * net_s / pkts, 1) if pkts else None,
                "sampled_cores": round(a["samples"] / args.freq / span, 2),
                **{k: a[k] for k in ("net_share_per_cpu", "contexts")},
                "both_cpus_share_of_ms": round(
                    a["bins_all_cpus_net"] / max(1, a["bins_with_net_work"]), 3
                ),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
