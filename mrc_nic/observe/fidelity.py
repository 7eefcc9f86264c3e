"""Which resource bound a run: the emulated links, the CPU, or the application.

An emulation result says something about the network only while the
emulator itself is not the bottleneck (Mininet-HiFi, Handigol et al.,
CoNEXT 2012, checks that on every run). mrc-nic's fabric is veths and
kernel forwarding: every packet-hop costs CPU, so a lab whose links are
faster than the machine can carry measures the CPU. A Meter samples,
before and after a workload (or between two ticks of a live view):

- every core's busy time and softirq share (/proc/stat's cpuN lines; busy
  is all but idle and iowait, so steal time counts as busy: the hypervisor
  took the core);
- the kernel's own signs of overload: /proc/net/softnet_stat's `dropped`
  (the per-CPU backlog overflowed) and `time_squeeze` (softirq ran out of
  budget with work left), and the drops of the lab's veths (a veth's ring
  full, an XDP_TX that failed);
- each link direction's utilisation: the bytes its egress TBF sent (the
  qdisc's own counter, which is what the configured rate limits) against
  rate x time.

judge() turns those figures into a verdict, pure Python so that it is
tested on synthetic samples:

- `links`: some link direction carried >= LINK_BOUND (0.85) of its configured rate
  (the fabric is what limited the run) and the kernel dropped nothing of
  its own. A link at its rate is the answer even when the cores were busy
  too (on a shared machine other tenants' work is in the busy time);
  `cpu_saturated` says so beside the verdict.
- `cpu`: no link reached LINK_BOUND and a core (or the machine) was busy
  >= CPU_BUSY of the time, or the kernel dropped packets (backlog or veth)
  beyond KERNEL_DROP_SHARE of what the lab's queues sent.
- `application`: neither: the workload asked for less than either could give.
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

# A link direction at this share of its rate bound the run. Not 0.9: a write
# of a second or two spends its start and its last round trips below the
# rate, and link-bound writes measured 0.88-0.95 of the raw rate here while
# CPU-bound ones stayed at 0.3-0.84 (docs/fidelity.md).
LINK_BOUND = 0.85
CPU_BUSY = 0.9  # a core (or all of them) busy this share of the time is saturated
# Kernel drops (backlog, veth rings) above this share of the packets the lab's
# queues sent say the kernel could not keep up; a handful in a long run is
# a burst, not a regime.
KERNEL_DROP_SHARE = 0.001
# The lab's own daemons (one Python process per host) taking this share of
# the cores in a CPU-bound run: the advice is fewer hosts, not slower links.
DAEMONS_BIND = 0.25
BUSIEST_SHOWN = 4  # link directions kept in the JSON, busiest first
# Fewer packets than this through the lab's queues: an idle lab (a live view
# between runs), judged `application` whatever other tenants do to the cores.
IDLE_PACKETS = 10
ETH_HLEN = 14

VERDICTS = ("links", "cpu", "application")


# ---- CPU and the kernel's own counters --------------------------------------------------
class CpuSample(NamedTuple):
    """Per CPU: (busy, softirq, total) jiffies; (dropped, time_squeeze) of
    softnet_stat; the lab's own processes' CPU time (user + system jiffies of
    its host daemons and event log; None: no lab read)."""

    cores: list[tuple[int, int, int]]
    softnet: list[tuple[int, int]]
    lab_jiffies: int | None = None


def process_jiffies(pids: list[int]) -> int:
    """User + system time of these processes (ones gone are left out)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (proc(5): fields 14, 15)
    return total


def read_cpu(
    stat: str = "/proc/stat",
    softnet: str = "/proc/net/softnet_stat",
    lab_pids: list[int] | None = None,
) -> CpuSample:
    """The per-CPU counters now, and the CPU time of lab_pids (a lab's daemons)."""
    cores = []
    with open(stat) as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            name, *rest = line.split()
            if name == "cpu":
                continue  # the machine's sum: judged from the cores
            v = [int(x) for x in rest[:8]]  # guest time is already counted in user
            total = sum(v)
            cores.append((total - v[3] - v[4], v[6], total))
    rows = []
    try:
        with open(softnet) as f:
            for line in f:
                cols = line.split()
                rows.append((int(cols[1], 16), int(cols[2], 16)))
    except OSError:
        pass  # no softnet_stat: judged on the cores alone
    lab = process_jiffies(lab_pids) if lab_pids is not None else None
    return CpuSample(cores, rows, lab)


def cpu_figures(before: CpuSample, after: CpuSample) -> dict[str, Any]:
    """Each core's busy and softirq share between two samples, the machine's
    busy share, and the softnet drops and squeezes in between."""
    cores = []
    busy_sum = total_sum = 0
    for i, (b0, a0) in enumerate(zip(before.cores, after.cores, strict=False)):
        total = a0[2] - b0[2]
        busy = a0[0] - b0[0]
        busy_sum += busy
        total_sum += total
        cores.append(
            {
                "cpu": i,
                "busy": round(busy / total, 3) if total > 0 else None,
                "softirq": round((a0[1] - b0[1]) / total, 3) if total > 0 else None,
            }
        )
    pairs = list(zip(before.softnet, after.softnet, strict=False))
    figures = {
        "cores": cores,
        "busy": round(busy_sum / total_sum, 3) if total_sum > 0 else None,
        "softnet_dropped": sum(max(0, a[0] - b[0]) for b, a in pairs),
        "time_squeeze": sum(max(0, a[1] - b[1]) for b, a in pairs),
    }
    if before.lab_jiffies is not None and after.lab_jiffies is not None and total_sum > 0:
        # cores' worth: the lab's jiffies over one core's jiffies in the window
        per_core = total_sum / max(1, len(cores))
        figures["lab_daemons"] = round(max(0, after.lab_jiffies - before.lab_jiffies) / per_core, 3)
    return figures


# ---- links ------------------------------------------------------------------------------
class LinkSample(NamedTuple):
    """{(link, direction): (bytes, packets, drops, when read) of its egress
    TBF}; the lab's veth drops (tx_dropped + rx_dropped, every interface);
    when the sample ended. Each namespace's counters carry the time they were
    read: reading a big lab's namespaces one after the other takes a while on
    a loaded machine, and a window's rate is its own counters' time apart."""

    queues: dict[tuple[str, str], tuple[int, int, int, float]]
    veth_drops: int
    at: float


def link_directions(topo) -> list[tuple[str, str, str, str, int]]:
    """(link, direction, node, ifname, rate_bps) of every capped link direction:
    `down` leaves the upper end (toward the hosts), `up` the lower end."""
    out = []
    for link in topo.links.values():
        if link.rate_bps is None:
            continue
        out.append((link.name, "down", link.upper.node, link.upper.ifname, link.rate_bps))
        out.append((link.name, "up", link.lower.node, link.lower.ifname, link.rate_bps))
    return out


def link_figures(
    rates: dict[tuple[str, str], int], before: LinkSample, after: LinkSample
) -> dict[str, Any]:
    """Each link direction's utilisation (bits its TBF sent / rate x seconds)
    between two samples, busiest first."""
    seconds = after.at - before.at
    dirs = []
    sent_pkts = queue_drops = 0
    for key, rate in rates.items():
        b0, a0 = before.queues.get(key), after.queues.get(key)
        if b0 is None or a0 is None:
            continue
        span = a0[3] - b0[3]
        if span <= 0:
            continue
        sent = max(0, a0[0] - b0[0])
        sent_pkts += max(0, a0[1] - b0[1])
        queue_drops += max(0, a0[2] - b0[2])
        dirs.append(
            {
                "link": key[0],
                "dir": key[1],
                "rate_bps": rate,
                "utilisation": round(sent * 8 / (rate * span), 3),
            }
        )
    dirs.sort(key=lambda d: -d["utilisation"])
    return {
        "seconds": round(seconds, 3),
        "directions": dirs,
        "queue_packets": sent_pkts,
        "queue_drops": queue_drops,  # TBF drops: the emulated buffer's, not overload
        "veth_drops": max(0, after.veth_drops - before.veth_drops),
    }


# ---- the verdict ------------------------------------------------------------------------
def judge(
    cpu: dict[str, Any], links: dict[str, Any] | None, *, judge_veth_drops: bool = True
) -> dict[str, Any]:
    """The fidelity object of a run from cpu_figures and link_figures (None:
    no lab, or no link with a rate). judge_veth_drops=False when the run
    took links down on purpose (a veth whose peer is down drops what it is
    given: the fault's doing, not the CPU's)."""
    busy_cores = [c["busy"] for c in cpu["cores"] if c["busy"] is not None]
    hottest = max(busy_cores, default=None)
    saturated = bool(
        (hottest is not None and hottest >= CPU_BUSY)
        or (cpu["busy"] is not None and cpu["busy"] >= CPU_BUSY)
    )
    dirs = (links or {}).get("directions") or []
    busiest = dirs[0]["utilisation"] if dirs else None
    at_rate = [d for d in dirs if d["utilisation"] >= LINK_BOUND]
    kernel_drops = cpu["softnet_dropped"] + (
        (links or {}).get("veth_drops", 0) if judge_veth_drops else 0
    )
    packets = (links or {}).get("queue_packets", 0)
    drops_bind = kernel_drops > max(1, KERNEL_DROP_SHARE * packets)
    idle = links is not None and packets < IDLE_PACKETS
    if idle:
        verdict = "application"
        why = "the lab carried (almost) nothing: nothing to judge"
    elif drops_bind:
        verdict = "cpu"
        why = f"the kernel dropped {kernel_drops} packets of its own (backlog or veth rings)"
    elif at_rate:
        verdict = "links"
        why = (
            f"{len(at_rate)} link direction(s) at >= {LINK_BOUND:.0%} of their rate "
            f"(busiest {busiest:.0%})"
        )
    elif saturated:
        verdict = "cpu"
        why = f"a core busy {hottest:.0%} of the time" + (
            f", the busiest link at {busiest:.0%} of its rate" if busiest is not None else ""
        )
        daemons = cpu.get("lab_daemons")
        if daemons is not None and daemons >= DAEMONS_BIND * len(busy_cores):
            why += f"; the lab's daemons took {daemons:.2g} of the {len(busy_cores)} cores"
    else:
        verdict = "application"
        why = "neither the links nor the CPU were full" + (
            f" (busiest link {busiest:.0%}, hottest core {hottest:.0%})"
            if busiest is not None and hottest is not None
            else ""
        )
    return {
        "verdict": verdict,
        "why": why,
        "cpu_saturated": saturated,
        "busiest_link": busiest,
        "links_at_rate": len(at_rate),
        "kernel_drops": kernel_drops,
        "cpu": cpu,
        "links": None
        if links is None
        else {**links, "directions": links["directions"][:BUSIEST_SHOWN]},
        "thresholds": {
            "link_bound": LINK_BOUND,
            "cpu_busy": CPU_BUSY,
            "kernel_drop_share": KERNEL_DROP_SHARE,
        },
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def combine(parts: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """One verdict over several measured parts of a run (healthy and faulty,
    or rounds): `cpu` if the CPU bound any part (its figures cannot be
    compared with the others'), `links` if the links bound every part, else
    `application`. Each part's object is kept under `parts`."""
    got = {k: p for k, p in parts.items() if p}
    verdicts = [p["verdict"] for p in got.values()]
    if "cpu" in verdicts:
        verdict = "cpu"
    elif verdicts and all(v == "links" for v in verdicts):
        verdict = "links"
    else:
        verdict = "application"
    busiest = [p["busiest_link"] for p in got.values() if p.get("busiest_link") is not None]
    return {
        "verdict": verdict,
        "why": "; ".join(f"{k}: {p['verdict']} ({p['why']})" for k, p in got.items()),
        "cpu_saturated": any(p.get("cpu_saturated") for p in got.values()),
        "busiest_link": max(busiest, default=None),
        "parts": got,
    }


def met(fid: dict[str, Any] | None, ok: bool | None) -> bool | None:
    """A target's outcome as a verdict may report it: a figure measured while
    the CPU bound the run is not judged (None), whatever it was."""
    if fid is not None and fid.get("verdict") == "cpu":
        return None
    return ok


# ---- the links' share ------------------------------------------------------------------
def payload_capacity_bps(topo) -> float | None:
    """What a host's links carry of payload, one way: planes x rate x the
    share of a full data frame that is payload (Ethernet, IP, UDP and the
    MRC headers are the rest; the TBF counts the whole frame). None on
    uncapped links."""
    from mrc_nic import nic
    from mrc_nic.nic import wire

    if not topo.rate_bps:
        return None
    seg = nic.seg_size(topo.mtu)
    frame = ETH_HLEN + wire.WRITE_OVERHEAD + seg
    return topo.planes * topo.rate_bps * seg / frame


def links_share(goodput_bps: float, topo) -> dict[str, float] | None:
    """A one-way transfer's goodput as a share of its host links: of their
    payload capacity ("of_payload", what "of the links" means in mrc-nic's
    output) and of their raw rate ("of_rate")."""
    cap = payload_capacity_bps(topo)
    if cap is None:
        return None
    return {
        "of_payload": round(goodput_bps / cap, 3),
        "of_rate": round(goodput_bps / (topo.planes * topo.rate_bps), 3),
        "payload_capacity_bps": round(cap),
    }


# ---- reading a lab ----------------------------------------------------------------------
class Meter:
    """Samples the CPU and (given a lab) its links; start() before the
    workload, stop() after it returns the fidelity object. tick() is the
    live variant: the object over the time since the previous tick (None
    the first time)."""

    def __init__(self, lab: str | None = None, topo=None, *, judge_veth_drops: bool = True):
        self.judge_veth_drops = judge_veth_drops
        self.topo = topo
        self._reader = None
        if lab is not None and topo is None:
            from mrc_nic.lab.state import open_lab

            _, self.topo = open_lab(lab)
        self._dirs = link_directions(self.topo) if self.topo is not None else []
        self._rates = {(d[0], d[1]): d[4] for d in self._dirs}
        self._before: tuple[CpuSample, LinkSample | None] | None = None
        self._lab_pids: list[int] | None = None  # the lab's daemons, found at the first sample

    def __enter__(self) -> Meter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _links(self) -> LinkSample | None:
        if self.topo is None:
            return None
        if self._reader is None:
            from mrc_nic.observe.linkstats import LinkStatsReader

            self._reader = LinkStatsReader({n: self.topo.netns(n) for n in self.topo.nodes})
        veth_drops = 0
        queues: dict[tuple[str, str], tuple[int, int, int]] = {}
        wanted = {(node, ifname): (link, d) for link, d, node, ifname, _ in self._dirs}
        for node in self.topo.nodes:
            try:
                info = self._reader.read(node)
            except OSError:
                continue  # a namespace gone (a lab going down): judged on the rest
            at = time.monotonic()
            for rec in info.values():
                veth_drops += rec["tx_dropped"] + rec["rx_dropped"]
            for ifname, q in self._reader.queues(node).items():
                key = wanted.get((node, ifname))
                if key is not None:
                    queues[key] = (*q, at)
        return LinkSample(queues, veth_drops, time.monotonic())

    def _sample(self) -> tuple[CpuSample, LinkSample | None]:
        links = self._links()
        if self._lab_pids is None and self.topo is not None:
            from mrc_nic.lab import workers

            self._lab_pids = workers.find(self.topo.lab)
        return read_cpu(lab_pids=self._lab_pids), links

    def start(self) -> None:
        self._before = self._sample()

    def raw(self) -> tuple[CpuSample, LinkSample | None]:
        """A sample now, to judge a stretch of the run later (judge_between)."""
        return self._sample()

    def judge_between(
        self, a: tuple[CpuSample, LinkSample | None], b: tuple[CpuSample, LinkSample | None]
    ) -> dict[str, Any]:
        """The fidelity object between two raw() samples: a run whose figures
        come from a window of it (a scenario's) is judged on that window."""
        cpu = cpu_figures(a[0], b[0])
        links = None
        if a[1] is not None and b[1] is not None and self._rates:
            links = link_figures(self._rates, a[1], b[1])
        return judge(cpu, links, judge_veth_drops=self.judge_veth_drops)

    def stop(self) -> dict[str, Any]:
        """The fidelity object since start(); the reader is closed."""
        try:
            return self._judge(self._sample())
        finally:
            self.close()

    def tick(self) -> dict[str, Any] | None:
        now = self._sample()
        fid = self._judge(now) if self._before is not None else None
        self._before = now
        return fid

    def _judge(self, now: tuple[CpuSample, LinkSample | None]) -> dict[str, Any]:
        if self._before is None:
            raise RuntimeError("Meter.stop() without start()")
        return self.judge_between(self._before, now)


def raw_to_json(raw: tuple[CpuSample, LinkSample | None], load_avg=None) -> dict[str, Any]:
    """A raw() sample as JSON, to be judged by another process (a cluster
    lab's machines sample, one place judges: mrc_nic.cluster.verdict)."""
    cpu, links = raw
    out: dict[str, Any] = {
        "cores": [list(c) for c in cpu.cores],
        "softnet": [list(s) for s in cpu.softnet],
        "lab_jiffies": cpu.lab_jiffies,
        "load_avg": [round(x, 2) for x in (load_avg or os.getloadavg())],
        "links": None,
    }
    if links is not None:
        out["links"] = {
            "queues": [[lk, d, *q] for (lk, d), q in links.queues.items()],
            "veth_drops": links.veth_drops,
            "at": links.at,
        }
    return out


def raw_from_json(data: dict[str, Any]) -> tuple[CpuSample, LinkSample | None]:
    cpu = CpuSample(
        [tuple(c) for c in data["cores"]],
        [tuple(s) for s in data["softnet"]],
        data.get("lab_jiffies"),
    )
    lk = data.get("links")
    if lk is None:
        return cpu, None
    queues = {(q[0], q[1]): tuple(q[2:]) for q in lk["queues"]}
    return cpu, LinkSample(queues, lk["veth_drops"], lk["at"])


# ---- words ------------------------------------------------------------------------------
def _rate_text(bps: float) -> str:
    if bps >= 1e9:
        return f"{bps / 1e9:g} Gbit/s"
    return f"{bps / 1e6:g} Mbit/s"


def summary(fid: dict[str, Any] | None) -> str:
    """One line: the verdict and its figures."""
    if not fid:
        return "fidelity: not measured"
    if "parts" in fid:
        return f"fidelity: {fid['verdict']}-bound: " + "; ".join(
            f"{k}: {p['verdict']}" + _busiest_text(p) for k, p in fid["parts"].items()
        )
    cores = ", ".join(
        f"{c['busy']:.0%}" + (f" ({c['softirq']:.0%} softirq)" if c["softirq"] else "")
        for c in fid["cpu"]["cores"]
        if c["busy"] is not None
    )
    link = fid.get("busiest_link")
    links = f"busiest link {link:.0%} of its rate" if link is not None else "no capped link"
    return f"fidelity: {fid['verdict']}-bound: {fid['why']}; {links}; cores busy {cores}"


def _busiest_text(fid: dict[str, Any]) -> str:
    link = fid.get("busiest_link")
    return f" (busiest link {link:.0%})" if link is not None else ""


def advice(fid: dict[str, Any] | None, topo=None, doctor: dict | None = None) -> str | None:
    """When the CPU bound a run, one line on what to change; else None.
    doctor: the stored figures of `mrc-nic doctor` (the faithful rate per
    link of this lab's shape), when there are any."""
    if not fid or fid["verdict"] != "cpu":
        return None
    text = "CPU-bound: these figures measure this machine's CPU, not the links; "
    daemons = (fid.get("cpu") or {}).get("lab_daemons")
    cores = len((fid.get("cpu") or {}).get("cores") or ()) or 1
    if daemons is not None and daemons >= DAEMONS_BIND * cores:
        text += f"the lab's daemons took {daemons:.2g} of the {cores} cores: fewer hosts first, "
    faithful = None
    if doctor is not None and topo is not None:
        from mrc_nic.lab import doctor_store

        faithful = doctor_store.faithful_rate(doctor, topo.hosts, topo.planes, topo=topo)
    if faithful == 0.0:
        text += f"(mrc-nic doctor finds no link rate faithful for {topo.hosts} hosts here), "
    elif faithful is not None:
        text += (
            f"use links of at most {_rate_text(faithful)} "
            f"(mrc-nic doctor's faithful rate for {topo.hosts} hosts x {topo.planes} planes), "
        )
    else:
        text += "lower the link rate (run mrc-nic doctor for the rate this machine carries), "
    return text + "fewer hosts, or fewer planes"


def in_window(samples: list[tuple[float, Any]], start: float, end: float) -> tuple[Any, Any] | None:
    """The first and the last of (time, raw sample) within [start, end]: the
    stretch a windowed figure was measured over; None if fewer than two."""
    inside = [x for t, x in samples if start <= t <= end]
    return (inside[0], inside[-1]) if len(inside) >= 2 else None
