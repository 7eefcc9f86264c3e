"""mrc_nic.observe.fidelity on synthetic samples: which resource bound a run,
from per-CPU counters, softnet drops and TBF byte counters; and the
packet-hops model of mrc_nic.lab.doctor_store."""

from __future__ import annotations

import pytest

from mrc_nic.lab import doctor_store, topology
from mrc_nic.observe import fidelity
from mrc_nic.observe.fidelity import CpuSample, LinkSample
from mrc_nic.workloads import benchkit

GBIT = 10**9


def cpu(busy: list[float], softirq: list[float] | None = None, *, dropped: int = 0) -> dict:
    """cpu_figures over a 1000-jiffy window with the given busy shares."""
    softirq = softirq or [0.0] * len(busy)
    before = CpuSample([(0, 0, 0)] * len(busy), [(0, 0)] * len(busy))
    after = CpuSample(
        [(int(b * 1000), int(s * 1000), 1000) for b, s in zip(busy, softirq, strict=True)],
        [(dropped, 5)] + [(0, 0)] * (len(busy) - 1),
    )
    return fidelity.cpu_figures(before, after)


def links(utils: list[float], *, rate: int = GBIT, seconds: float = 2.0, veth: int = 0) -> dict:
    """link_figures for link directions carrying the given shares of `rate`."""
    rates = {(f"l{i}", "up"): rate for i in range(len(utils))}
    pkts = 100_000
    before = LinkSample({k: (0, 0, 0, 10.0) for k in rates}, 0, 10.0)
    after = LinkSample(
        {
            k: (int(u * rate * seconds / 8), pkts, 0, 10.0 + seconds)
            for k, u in zip(rates, utils, strict=True)
        },
        veth,
        10.0 + seconds,
    )
    return fidelity.link_figures(rates, before, after)


def test_cpu_figures_per_core_busy_and_softirq():
    c = cpu([0.95, 0.5], [0.4, 0.1], dropped=3)
    assert [x["busy"] for x in c["cores"]] == [0.95, 0.5]
    assert [x["softirq"] for x in c["cores"]] == [0.4, 0.1]
    assert c["busy"] == pytest.approx(0.725)
    assert c["softnet_dropped"] == 3 and c["time_squeeze"] == 5


def test_link_figures_utilisation_against_rate_busiest_first():
    f = links([0.5, 0.97, 0.2], seconds=4.0)
    assert [d["link"] for d in f["directions"]] == ["l1", "l0", "l2"]
    assert f["directions"][0]["utilisation"] == pytest.approx(0.97, abs=1e-3)
    assert f["seconds"] == 4.0


def test_links_at_rate_and_idle_cores_is_link_bound():
    fid = fidelity.judge(cpu([0.5, 0.6]), links([0.96, 0.95, 0.94, 0.96]))
    assert fid["verdict"] == "links"
    assert fid["links_at_rate"] == 4 and not fid["cpu_saturated"]
    assert fidelity.met(fid, True) is True


def test_saturated_core_with_links_short_of_rate_is_cpu_bound():
    fid = fidelity.judge(cpu([0.98, 0.7], [0.6, 0.2]), links([0.7, 0.72, 0.69, 0.71]))
    assert fid["verdict"] == "cpu" and fid["cpu_saturated"]
    # a target measured while the CPU bound the run is not judged, met or not
    assert fidelity.met(fid, True) is None and fidelity.met(fid, False) is None


def test_whole_machine_busy_is_saturated_even_if_no_single_core_is():
    fid = fidelity.judge(cpu([0.89, 0.92]), links([0.6]))
    assert fid["verdict"] == "cpu"
    fid = fidelity.judge(cpu([0.89, 0.85]), links([0.6]))
    assert fid["verdict"] == "application"


def test_links_at_rate_win_over_busy_cores_but_say_so():
    fid = fidelity.judge(cpu([0.99, 0.97]), links([0.95, 0.2]))
    assert fid["verdict"] == "links" and fid["cpu_saturated"]


def test_kernel_drops_beyond_a_share_of_packets_are_cpu_even_with_links_at_rate():
    # 4 directions x 100k packets: 0.1% is 400 packets
    assert fidelity.judge(cpu([0.5, 0.5]), links([0.95] * 4, veth=401))["verdict"] == "cpu"
    assert fidelity.judge(cpu([0.5, 0.5]), links([0.95] * 4, veth=30))["verdict"] == "links"
    assert fidelity.judge(cpu([0.5, 0.5], dropped=500), links([0.95] * 4))["verdict"] == "cpu"


def test_veth_drops_of_a_fault_that_took_links_down_are_not_judged():
    fid = fidelity.judge(cpu([0.5, 0.5]), links([0.95] * 4, veth=5000), judge_veth_drops=False)
    assert fid["verdict"] == "links"


def test_neither_full_is_application():
    fid = fidelity.judge(cpu([0.3, 0.2]), links([0.1, 0.05]))
    assert fid["verdict"] == "application"


def test_no_capped_link_judges_the_cpu_alone():
    assert fidelity.judge(cpu([0.99, 0.99]), None)["verdict"] == "cpu"
    assert fidelity.judge(cpu([0.2, 0.2]), None)["verdict"] == "application"


def test_json_keeps_the_busiest_directions_only():
    fid = fidelity.judge(cpu([0.5]), links([0.5] * 10))
    assert len(fid["links"]["directions"]) == fidelity.BUSIEST_SHOWN
    assert fid["verdict"] in fidelity.VERDICTS


def test_read_cpu_parses_proc_files(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  30 0 10 100 0 0 5 0 0 0\n"
        "cpu0 10 0 5 50 0 0 2 0 0 0\n"
        "cpu1 20 0 5 50 0 0 3 0 0 0\n"
        "intr 1 2 3\n"
    )
    softnet = tmp_path / "softnet"
    softnet.write_text("0000000a 00000002 00000010\n0000000b 00000000 00000001\n")
    s = fidelity.read_cpu(str(stat), str(softnet))
    assert s.cores == [(17, 2, 67), (28, 3, 78)]
    assert s.softnet == [(2, 16), (0, 1)]


def test_link_directions_of_the_default_lab_both_ends_of_every_capped_link():
    topo = topology.load(topology.Path(__file__).parents[2] / "netns" / "default.toml", lab="t")
    dirs = fidelity.link_directions(topo)
    assert len(dirs) == 2 * len(topo.links)
    assert ("p0.t0a-h0", "up", "h0", "eth0") in {d[:4] for d in dirs}


def test_advice_only_when_cpu_bound_and_with_doctors_rate():
    topo = topology.load(topology.Path(__file__).parents[2] / "netns" / "default.toml", lab="t")
    assert fidelity.advice(fidelity.judge(cpu([0.3]), links([0.95])), topo) is None
    fid = fidelity.judge(cpu([0.99, 0.99]), links([0.7]))
    assert "lower the link rate" in fidelity.advice(fid, topo)
    doc = {"faithful_hop_pps": 100_000, "frame_bytes": 3214}
    text = fidelity.advice(fid, topo, doc)
    rate = doctor_store.faithful_rate(doc, topo.hosts, topo.planes)
    assert f"{rate / 1e6:g} Mbit/s" in text


def test_faithful_rate_scales_down_with_senders_and_planes():
    doc = {"faithful_hop_pps": 130_000, "frame_bytes": 3214}
    pair_4 = doctor_store.faithful_rate(doc, 2, 4)
    assert pair_4 == pytest.approx(130_000 * 8 * 3214 / (6.5 * 4))
    assert doctor_store.faithful_rate(doc, 2, 8) == pytest.approx(pair_4 / 2)
    assert doctor_store.faithful_rate(doc, 8, 4) == pytest.approx(pair_4 / 8)
    assert doctor_store.faithful_rate({}, 2, 4) is None


def test_doctor_figures_of_another_machine_are_not_used(tmp_path):
    path = tmp_path / "doctor.json"
    doctor_store.save({"faithful_hop_pps": 1}, path)
    assert doctor_store.load(path)["faithful_hop_pps"] == 1
    data = path.read_text().replace('"cpus"', '"cpus_was"')
    path.write_text(data)
    assert doctor_store.load(path) is None


def test_benchkit_never_prints_met_for_a_cpu_bound_run():
    cpu_bound = fidelity.judge(cpu([0.99, 0.99]), links([0.7]))
    assert benchkit.verdict(True, cpu_bound) == "not judged: CPU-bound"
    assert benchkit.verdict(False, cpu_bound) == "not judged: CPU-bound"
    link_bound = fidelity.judge(cpu([0.5, 0.5]), links([0.95]))
    assert benchkit.verdict(True, link_bound) == "met"
    assert benchkit.verdict(True) == "met"


def test_up_warns_when_a_topology_asks_for_more_than_doctor_found_faithful(tmp_path, monkeypatch):
    from mrc_nic.cli.lab_cmds import doctor_warning

    netns = topology.Path(__file__).parents[2] / "netns"
    store = tmp_path / "doctor.json"
    monkeypatch.setenv("MRC_NIC_DOCTOR_FILE", str(store))
    assert doctor_warning(topology.load(netns / "default-1g.toml")) is None  # no figures yet
    # one QP faithful up to 928 Mbit/s of links in all: 232 Mbit/s a link on 4 planes
    frame = 3162
    doctor_store.save({"faithful_hop_pps": round(928e6 / (8 * frame) * 6.5), "frame_bytes": frame})
    warning = doctor_warning(topology.load(netns / "default-1g.toml"))
    assert warning.startswith("default1g: links at 1000 Mbit/s, above the 232 Mbit/s")
    assert doctor_warning(topology.load(netns / "default.toml")) is None  # 200 Mbit/s
    assert "uncapped links" in doctor_warning(topology.load(netns / "uncapped.toml"))


def test_a_window_is_judged_between_its_first_and_last_sample():
    samples = [(0.0, "a"), (0.5, "b"), (1.0, "c"), (1.5, "d"), (2.0, "e")]
    assert fidelity.in_window(samples, 0.4, 1.6) == ("b", "d")
    assert fidelity.in_window(samples, 0.4, 0.9) is None  # one sample: no stretch


def test_each_namespace_is_timed_by_its_own_read():
    # l0 read 0.5 s later in the second sample than in the first: 2.5 s apart, not 2
    rates = {("l0", "up"): GBIT, ("l1", "up"): GBIT}
    before = LinkSample({("l0", "up"): (0, 0, 0, 0.0), ("l1", "up"): (0, 0, 0, 0.0)}, 0, 0.1)
    sent = int(GBIT * 2.5 / 8)
    after = LinkSample({("l0", "up"): (sent, 1, 0, 2.5), ("l1", "up"): (sent, 1, 0, 2.0)}, 0, 2.6)
    got = {
        d["link"]: d["utilisation"]
        for d in fidelity.link_figures(rates, before, after)["directions"]
    }
    assert got == {"l0": 1.0, "l1": 1.25}


def test_an_idle_lab_is_not_called_cpu_bound_by_other_tenants_busy_cores():
    rates = {("l0", "up"): GBIT}
    quiet = fidelity.link_figures(
        rates,
        LinkSample({("l0", "up"): (0, 0, 0, 0.0)}, 0, 0.0),
        LinkSample({("l0", "up"): (3000, 2, 0, 1.0)}, 0, 1.0),
    )
    fid = fidelity.judge(cpu([1.0, 1.0]), quiet)
    assert fid["verdict"] == "application" and fid["cpu_saturated"]
    assert fidelity.judge(cpu([1.0, 1.0]), links([0.05]))["verdict"] == "cpu"


def test_the_labs_daemons_cpu_is_measured_and_named_when_they_bound_the_run():
    """cpu_figures: the lab's processes' jiffies over one core's jiffies of
    the window; a CPU-bound run whose daemons took a quarter of the cores or
    more says so, and the advice puts fewer hosts first."""
    before = CpuSample([(0, 0, 0)] * 2, [(0, 0)] * 2, 100)
    after = CpuSample([(990, 100, 1000), (980, 50, 1000)], [(0, 0)] * 2, 100 + 1500)
    c = fidelity.cpu_figures(before, after)
    assert c["lab_daemons"] == pytest.approx(1.5)  # 1,500 jiffies of one core's 1,000
    fid = fidelity.judge(c, links([0.6]))
    assert fid["verdict"] == "cpu" and "the lab's daemons took 1.5 of the 2 cores" in fid["why"]
    assert "fewer hosts first" in fidelity.advice(fid)
    light = fidelity.cpu_figures(before, after._replace(lab_jiffies=100 + 200))
    assert light["lab_daemons"] == pytest.approx(0.2)
    fid = fidelity.judge(light, links([0.6]))
    assert "daemons" not in fid["why"] and "fewer hosts first" not in fidelity.advice(fid)
    assert "lab_daemons" not in cpu([0.5])  # no lab read: no figure


def test_read_cpu_times_the_given_processes():
    import os

    me = fidelity.read_cpu(lab_pids=[os.getpid()])
    sum(i * i for i in range(2_000_000))  # some CPU of our own
    again = fidelity.read_cpu(lab_pids=[os.getpid(), 2**22 + 7])  # a pid that is gone
    assert again.lab_jiffies > me.lab_jiffies
    assert fidelity.read_cpu().lab_jiffies is None
    raw = fidelity.raw_from_json(fidelity.raw_to_json((again, None)))
    assert raw[0].lab_jiffies == again.lab_jiffies


DAEMON_DOC = {
    "faithful_hop_pps": 230_000,
    "frame_bytes": 3214,
    "cpu_s_per_hop": 5e-6,
    "cpu_budget_cores": 1.8,
    "daemons": {"fast": {"tick_s": 0.001, "cores": 0.2}, "slow": {"tick_s": 0.01, "cores": 0.04}},
}


def test_daemon_cores_are_linear_in_ticks_a_second_between_doctors_two_measures():
    assert doctor_store.daemon_cores(DAEMON_DOC, 0.001) == pytest.approx(0.2)
    assert doctor_store.daemon_cores(DAEMON_DOC, 0.01) == pytest.approx(0.04)
    assert doctor_store.daemon_cores(DAEMON_DOC, 0.002) == pytest.approx(0.04 + 0.16 * 400 / 900)
    assert doctor_store.daemon_cores(DAEMON_DOC, 0.1) == pytest.approx(0.04)  # not below the slow


def test_many_hosts_must_fit_the_cpu_with_their_daemons():
    """A pair keeps doctor's own rate (its daemons were in the measure); 8
    hosts fit at a lower rate than the packet-hops alone allow; 64 hosts'
    daemons alone are over the budget: no rate (0.0)."""
    netns = topology.Path(__file__).parents[2] / "netns"
    pair = topology.load(netns / "default.toml", lab="t")
    assert doctor_store.faithful_rate(DAEMON_DOC, 2, 4, topo=pair) == pytest.approx(
        doctor_store.faithful_rate(DAEMON_DOC, 2, 4)
    )
    clos = topology.load(netns / "clos-8.toml", lab="t")
    hops_only = doctor_store.faithful_rate(DAEMON_DOC, 8, 8)
    rate = doctor_store.faithful_rate(DAEMON_DOC, 8, 8, topo=clos)
    assert 0 < rate < hops_only
    # at that rate the CPU is the budget, to within the bisection
    rtt = max(clos.queues.base_rtt_ns, topology.design_rtt_ns(int(rate), clos.mtu, clos.tiers))
    hop_pps = 8 * 8 * rate / (8 * 3214) * doctor_store.HOPS_PER_PACKET
    cpu = 5e-6 * hop_pps + 8 * doctor_store.daemon_cores(DAEMON_DOC, topology.sending_tick_s(rtt))
    assert cpu == pytest.approx(1.8, rel=1e-3)
    assert doctor_store.faithful_rate(DAEMON_DOC, 64, 8, topo=clos) == 0.0
    no_daemons = {k: v for k, v in DAEMON_DOC.items() if k != "daemons"}  # an older store
    assert doctor_store.faithful_rate(no_daemons, 8, 8, topo=clos) == pytest.approx(hops_only)
