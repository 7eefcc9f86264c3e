"""mrc_nic.workloads.scenario without a lab: who sends to whom, fair shares, sizes,
windows of measurement, slowed-down topologies; and the QP timeouts that
rdma_write derives from a lab's design RTT."""

from __future__ import annotations

import pytest

from mrc_nic import verbs
from mrc_nic.lab import names, topology
from mrc_nic.transport import qp
from mrc_nic.workloads import rdma_write, scenario
from mrc_nic.workloads.scenario import Flow

CLOS8 = names.topology_file("clos-8")


@pytest.fixture(scope="module")
def clos8():
    return topology.load(CLOS8, lab="t")


def test_clos8_hosts_hang_two_per_t0(clos8):
    assert [scenario.host_t0(clos8, h) for h in clos8.host_names()] == [
        "t0a",
        "t0a",
        "t0b",
        "t0b",
        "t0c",
        "t0c",
        "t0d",
        "t0d",
    ]


def test_incast_7_to_1_with_a_bystander_under_the_receivers_t0(clos8):
    flows = scenario.incast_flows(clos8, 7)
    incast = [f for f in flows if f.role == "incast"]
    assert [f.src for f in incast] == [f"h{i}" for i in range(1, 8)]
    assert {f.dst for f in incast} == {"h0"}
    (b,) = [f for f in flows if f.role == "bystander"]
    # to h0's T0 neighbour, from another T0: it shares the spines' downlinks to t0a
    assert b.dst == "h1" and scenario.host_t0(clos8, b.src) != "t0a"
    assert b.src != "h0"


def test_fewer_senders_come_from_other_t0s_and_leave_a_free_bystander_source(clos8):
    flows = scenario.incast_flows(clos8, 3)
    senders = [f.src for f in flows if f.role == "incast"]
    assert all(scenario.host_t0(clos8, s) != "t0a" for s in senders)
    (b,) = [f for f in flows if f.role == "bystander"]
    assert b.dst == "h1" and b.src not in senders


def test_incast_arguments_are_checked(clos8):
    with pytest.raises(ValueError, match="senders must be 1..7"):
        scenario.incast_flows(clos8, 8)
    with pytest.raises(ValueError, match="other than the receiver"):
        scenario.incast_flows(clos8, 2, bystander=("h0", "h3"))
    with pytest.raises(ValueError, match="no host 'h9'"):
        scenario.incast_flows(clos8, 2, receiver="h9")
    assert [f.role for f in scenario.incast_flows(clos8, 2, bystander=None)] == ["incast"] * 2


def test_permutation_is_a_derangement_across_t0s(clos8):
    flows = scenario.permutation_flows(clos8)
    assert sorted(f.dst for f in flows) == clos8.host_names()
    for f in flows:
        assert scenario.host_t0(clos8, f.src) != scenario.host_t0(clos8, f.dst)
    seeded = scenario.permutation_flows(clos8, seed=3)
    assert all(f.src != f.dst for f in seeded)
    assert [f.dst for f in seeded] == [f.dst for f in scenario.permutation_flows(clos8, seed=3)]


def test_fair_shares_are_max_min_over_host_links():
    flows = [Flow(f"h{i}>h0", f"h{i}", "h0", "incast") for i in range(1, 8)]
    flows.append(Flow("h7>h1", "h7", "h1", "bystander"))
    fair = scenario.fair_shares(flows, 70.0)
    assert all(fair[f"h{i}>h0"] == pytest.approx(10.0) for i in range(1, 8))
    assert fair["h7>h1"] == pytest.approx(60.0)  # what h7's uplink leaves
    perm = [Flow("a>b", "a", "b", "p"), Flow("b>a", "b", "a", "p")]
    assert scenario.fair_shares(perm, 5.0) == {"a>b": 5.0, "b>a": 5.0}


def test_flows_are_sized_to_last_the_duration_at_their_fair_share():
    flows = [Flow(f"h{i}>h0", f"h{i}", "h0", "incast") for i in range(1, 3)]
    flows.append(Flow("h3>h4", "h3", "h4", "bystander"))
    scenario.size_flows(flows, 80e6, 4.0)
    assert flows[0].size == int(40e6 * 4 / 8) // 1024 * 1024 and flows[0].start == 0
    by = flows[2]
    assert by.fair_bps == pytest.approx(80e6)
    assert by.start == pytest.approx(4.0 * scenario.BYSTANDER_DELAY)
    assert by.size == int(80e6 * 4 * scenario.BYSTANDER_SPAN / 8) // 1024 * 1024


def test_window_goodput_from_samples():
    f = Flow("a>b", "a", "b", "p")
    f.samples = [(0.0, 0), (1.0, 1000), (2.0, 3000), (3.0, 3000)]
    assert scenario.window_goodput(f, 1.0, 2.0) == pytest.approx(16000)
    assert scenario.window_goodput(f, 0.5, 3.0) == pytest.approx(8000)
    assert scenario.window_goodput(f, 2.5, 2.9) is None  # fewer than two samples


def test_payload_ceilings_from_the_wire_format():
    assert scenario.data_frame() == 1114 and scenario.ACK_FRAME == 94
    assert pytest.approx(1024 / 1114) == scenario.ceiling_one_way()
    assert pytest.approx(1024 / 1208) == scenario.ceiling_both_ways()
    # 3 KiB packets (an MTU of 3152 or more)
    assert pytest.approx(3072 / 3162) == scenario.ceiling_one_way(3072)
    assert pytest.approx(3072 / 3256) == scenario.ceiling_both_ways(3072)


def test_slow_topology_gets_a_longer_design_rtt():
    t = scenario.scenario_topology("clos-8", "x", rate="10mbit")
    assert (t.rate_bps, t.fabric_rate_bps) == (10**7, 10**7)
    # 4 MTUs (3214-byte frames: clos-8's MTU is 3200) on a 10 Mbit/s link, in whole us
    assert t.mtu == 3200
    assert t.queues.base_rtt_ns == -(-4 * 3214 * 8 * 100 // 1000) * 1000
    t = scenario.scenario_topology("clos-8", "x", rate="10mbit", mtu=1500)
    assert t.queues.base_rtt_ns == -(-4 * 1514 * 8 * 100 // 1000) * 1000
    t = scenario.scenario_topology("clos-8", "x", rate="10mbit", base_rtt="2ms")
    assert t.queues.base_rtt_ns == 2_000_000
    t = scenario.scenario_topology("clos-8", "x", rate="5mbit", fabric_rate="10mbit")
    assert (t.rate_bps, t.fabric_rate_bps) == (5 * 10**6, 10**7)
    t = scenario.scenario_topology("clos-8-1g", "x")
    # at 1 Gbit/s: 4 MTUs of 3214 bytes (102.8 us) are a little above the file's 100 us
    assert t.queues.base_rtt_ns == 103_000
    t = scenario.scenario_topology("clos-8-1g", "x", mtu=1500)
    assert t.queues.base_rtt_ns == 100_000  # the file's
    # the shipped clos-8 is slow already: its own design RTT, the same floor
    t = scenario.scenario_topology("clos-8", "x")
    assert (t.rate_bps, t.queues.base_rtt_ns) == (10**7, 10_285_000)
    # another rate drops the file's design RTT for that rate's floor
    t = scenario.scenario_topology("clos-8", "x", rate="1gbit")
    assert t.queues.base_rtt_ns == 103_000
    with pytest.raises(topology.TopologyError, match="no such topology"):
        scenario.scenario_topology("nosuch", "x")


def _device() -> verbs.DeviceAttr:
    """The device attributes a daemon reports (app_hello), with its QP defaults."""
    return verbs.DeviceAttr(
        host="h0", host_index=0, planes=4, seg_size=3072, mr_align=1, max_mr_bytes=1 << 24,
        sq_depth=32, max_qp_wr=4096, max_mpr=8, max_wimm=32, cq_ring_bytes=1 << 16, gids=(),
        default_timeout=qp.DEFAULT_TIMEOUT, max_timeout=qp.TIMEOUT_MAX,
        default_reorder_ns=qp.DEFAULT_REORDER_NS, max_reorder_ns=qp.REORDER_NS_MAX,
    )  # fmt: skip


def test_qp_timeouts_follow_the_labs_design_rtt():
    fast = topology.load(scenario.topology_file("clos-8-1g"), lab="t")
    assert rdma_write.lab_defaults(fast, _device()) == (
        12,
        qp.DEFAULT_REORDER_NS,
    )
    slow = scenario.scenario_topology("clos-8", "x", rate="10mbit")
    timeout, reorder = rdma_write.lab_defaults(slow, _device())
    rtt = slow.queues.base_rtt_ns
    assert 1.024e3 * 2**timeout >= rdma_write.TIMEOUT_RTTS * rtt > 1.024e3 * 2 ** (timeout - 1)
    assert reorder == rdma_write.REORDER_RTTS * rtt
    fixed = rdma_write.lab_defaults(slow, _device(), fixed_window=True)[1]
    assert fixed == rdma_write.REORDER_RTTS_FIXED * rtt > reorder, "deeper queues, longer window"


# ---- allreduce-failure (workloads.experiments) ------------------------------------------------
def _job(step_seconds: list[float]):
    from mrc_nic.workloads import collective

    job = collective.JobResult("mrc", ["h0", "h1"], 1 << 20, 2, 60.0)
    t = 0.0
    for i, s in enumerate(step_seconds):
        job.steps.append(collective.StepResult(i, "x", t, t + s, 1))
        t += s
    return job


def test_allreduce_fault_point_is_a_fraction_of_the_steps_timed_by_the_healthy_run():
    from mrc_nic.workloads import experiments

    job = _job([1.0, 3.0])
    assert experiments.fault_point(job, 0.4) == (0, 0.8)  # 0.8 of step 0
    assert experiments.fault_point(job, 0.5) == (1, 0.0)  # at step 1's start
    assert experiments.fault_point(job, 0.75) == (1, 1.5)  # half of step 1
    assert experiments.fault_point(_job([]), 0.4) == (0, 0.0)  # no healthy step: at once


@pytest.mark.parametrize(
    "kw, words",
    [({"at": 1.0}, "0 <= at < 1"), ({"mode": "loss"}, "blackhole or down")],
)
def test_allreduce_failure_arguments_are_checked_before_anything_runs(kw, words):
    from mrc_nic.workloads import experiments

    with pytest.raises(ValueError, match=words):
        experiments.allreduce_failure("nolab", **kw)


def test_repeated_experiments_give_the_median_and_spread_of_their_ratio():
    from mrc_nic.workloads import experiments

    ratios = iter([0.9, None, 1.1, 0.95])
    runs = lambda: {"scenario": "s", "lab": "l", "r": next(ratios), "completed": True}  # noqa: E731
    one = experiments.repeated(runs, 1, "r")
    assert one["r"] == 0.9 and "runs" not in one  # one run: its result as it is
    many = experiments.repeated(runs, 3, "r")
    assert (many["median"], many["min"], many["max"]) == (1.025, 0.95, 1.1)  # None left out
    assert many["rounds"] == 3 and len(many["runs"]) == 3 and many["completed"]
    with pytest.raises(ValueError, match="at least 1"):
        experiments.repeated(runs, 0, "r")


def test_repeated_experiments_judge_only_the_link_bound_rounds():
    from mrc_nic.workloads import experiments

    rounds = iter([(0.78, "links"), (2.17, "cpu"), (0.74, "links")])

    def run():
        ratio, verdict = next(rounds)
        fid = {"verdict": verdict, "why": verdict, "busiest_link": 0.9}
        return {"scenario": "s", "lab": "l", "r": ratio, "completed": True, "fidelity": fid}

    many = experiments.repeated(run, 3, "r")
    assert many["median"] == 0.78  # every round
    lb = many["links_bound"]
    assert (lb["rounds"], lb["median"], lb["min"], lb["max"]) == (2, 0.76, 0.74, 0.78)
    assert many["fidelity"]["verdict"] == "cpu"  # one round was CPU-bound: said


@pytest.mark.parametrize("shape", ["default", "clos-8"])
def test_each_hosts_ends_fit_the_share_of_one_session(shape):
    # A host's process (one session: half its NIC's memory by default) holds the
    # MRs of every end it has: 2 chunks each (a double buffer, rdma_ends).
    topo = topology.load(names.topology_file(shape))
    flows = scenario.permutation_flows(topo)
    capacity = scenario.host_rate_bps(topo)
    scenario.size_flows(flows, capacity, 30.0, scenario.ceiling_both_ways())
    for h, args in scenario.host_args("x", topo, flows).items():
        ends = args["sends"] + args["recvs"]
        assert len(ends) == 2
        assert sum(2 * e["chunk"] for e in ends) <= topo.nic_memory_bytes // 2, h
