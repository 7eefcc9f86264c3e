"""QP states, attributes and the retry schedule (mrc_nic.transport.qp), and the per-host
resource split (mrc_nic.transport.hostmem): pure Python, no root."""

from __future__ import annotations

import errno

import pytest

from mrc_nic import nic
from mrc_nic.testkit import transfer
from mrc_nic.transport import hostmem
from mrc_nic.transport.qp import Qp, QpError, QpState, Retry
from mrc_nic.workloads import rdma_write


def ready(qp: Qp) -> Qp:
    qp.modify(QpState.INIT, ev_profile_id=0, cc_profile_id=0)
    qp.modify(QpState.RTR, mpr=2, dest_host=1, dest_qpn=0x10100)
    qp.modify(QpState.RTS, timeout=12)
    return qp


def test_reset_init_rtr_rts():
    qp = ready(Qp(0x100, 0))
    assert qp.state == QpState.RTS
    d = qp.as_dict()
    assert (d["mpr"], d["dest_qpn"], d["timeout"]) == (2, 0x10100, 12)
    assert d["timeout_us"] == pytest.approx(1.024 * 2**12, rel=1e-6)


@pytest.mark.parametrize("target", [QpState.RTR, QpState.RTS])
def test_skipping_a_state_is_einval_and_changes_nothing(target):
    qp = Qp(0x100, 0)
    with pytest.raises(QpError, match="not a transition") as e:
        qp.modify(target, mpr=2)
    assert e.value.errno == errno.EINVAL
    assert qp.state == QpState.RESET and qp.attrs.mpr is None


def test_a_transition_without_its_attributes_names_them():
    qp = Qp(0x100, 0)
    qp.modify(QpState.INIT, ev_profile_id=0, cc_profile_id=0)
    with pytest.raises(QpError, match="needs dest_host, dest_qpn"):
        qp.modify(QpState.RTR, mpr=2)
    assert qp.state == QpState.INIT and qp.attrs.mpr is None


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("mpr", 0),
        ("mpr", 9),
        ("timeout", 32),
        ("max_wimm", 0),
        ("retry", {"linear_cnt": 8}),
        ("retry", {"exp_cnt": 26}),
        ("dest_qpn", 1 << 24),
        ("mpr", "2"),
        ("nonsense", 1),
    ],
)
def test_bad_attributes_are_einval_with_the_allowed_range(attr, value):
    qp = Qp(0x100, 0)
    qp.modify(QpState.INIT, ev_profile_id=0, cc_profile_id=0)
    attrs = {"dest_host": 1, "dest_qpn": 5, "mpr": 2} | {attr: value}
    with pytest.raises(QpError) as e:
        qp.modify(QpState.RTR, **attrs)
    assert e.value.errno == errno.EINVAL
    assert attr.split(".")[0] in str(e.value) or "retry" in str(e.value)
    assert qp.state == QpState.INIT


def test_err_from_anywhere_keeps_the_reason_and_reset_clears_it():
    qp = ready(Qp(0x100, 0))
    qp.modify(QpState.ERR, reason="retry budget spent")
    assert (qp.state, qp.err_reason) == (QpState.ERR, "retry budget spent")
    with pytest.raises(QpError):
        qp.modify(QpState.RTS)
    qp.modify(QpState.RESET)
    assert (qp.state, qp.err_reason, qp.attrs.mpr) == (QpState.RESET, None, None)


def test_retry_schedule_linear_then_exponential_then_spent():
    r = Retry(linear_cnt=2, exp_cnt=3)
    delays = [r.delay(i, 1.0) for i in range(6)]
    assert delays == [1.0, 1.0, 2.0, 4.0, 8.0, None]


def test_retry_exp_cnt_25_is_forever():
    r = Retry(linear_cnt=0, exp_cnt=25)
    assert r.infinite
    assert all(r.delay(i, 1e-3) is not None for i in range(1000))
    assert r.delay(999, 1e-3) == pytest.approx(1e-3 * 2**20)


def test_hosts_get_disjoint_memory_ids_and_qpns():
    mr_elems = 2 * 65536
    a, b = (hostmem.HostResources(h, 2, mr_elems, nic.DEFAULT_MAX_QPS) for h in (0, 1))
    spans = [a.send_mem.alloc(100, "x"), a.recv_mem.alloc(100, "x"), b.send_mem.alloc(100, "x")]
    ranges = [range(s.first_elem, s.first_elem + s.n_elems) for s in spans]
    assert not set(ranges[0]) & set(ranges[1]) and not set(ranges[1]) & set(ranges[2])
    assert a.regions.take() != b.regions.take()
    assert a.rings.take() != b.rings.take()
    assert a.new_qpn() >> 16 == 0 and b.new_qpn() >> 16 == 1
    assert a.rings.take() >= hostmem.RESERVED_RINGS  # ring 0 is mrc_nic.testkit.transfer's


def test_no_two_qps_of_a_lab_share_a_receive_slot():
    """A QP receives in slot QPN & (max_qps - 1) of nic_rx_qps: every QPN the
    daemons of a lab can hand out has its own, above mrc_nic.testkit.transfer's."""
    max_qps, hosts = 512, 8
    res = [hostmem.HostResources(h, hosts, 8 * 1024, max_qps) for h in range(hosts)]
    qpns = []
    for r in res:
        while True:
            try:
                qpns.append(r.new_qpn())
            except QpError as e:
                assert "no QP number left" in str(e)
                break
    slots = [q & (max_qps - 1) for q in qpns]
    assert len(qpns) == (max_qps - hostmem.QP_INDEX_FIRST) // hosts * hosts == 256
    assert len(set(slots)) == len(slots)
    assert min(slots) >= hostmem.QP_INDEX_FIRST > transfer.qpn(7) & (max_qps - 1)
    assert {q >> 16 for q in qpns} == set(range(hosts))
    res[3].free_qpn(qpns[100])
    assert res[3].new_qpn() == qpns[100]


def test_a_lab_with_no_qp_numbers_per_host_is_refused():
    with pytest.raises(ValueError, match="a lab of 8 hosts needs max_qps above 263"):
        hostmem.HostResources(0, 8, 8 * 1024, 256)
    # The index bits end at 1 << 16, whatever max_qps says: host 1 of 2 gets
    # indices 0x8080..0xFFFF (without the cap, 0x10080.. would spill into the host bits).
    assert hostmem.HostResources(1, 2, 8 * 1024, 1 << 17).new_qpn() == 1 << 16 | 0x8080


def test_memory_runs_out_with_enomem_and_comes_back():
    res = hostmem.HostResources(0, 2, 2 * 1024, nic.DEFAULT_MAX_QPS)
    whole = res.send_mem.alloc(512, "a send buffer")
    with pytest.raises(QpError, match="no 1024 bytes free") as e:
        res.send_mem.alloc(1, "a send buffer")
    assert e.value.errno == errno.ENOMEM
    res.send_mem.release(whole)
    assert res.send_mem.alloc(512, "again").n_elems == 512


def test_chunk_is_the_whole_share_or_what_a_double_buffer_allows():
    half = 32 * 2**20
    assert rdma_write.chunk_bytes(1000, 1, half) == 1024
    assert rdma_write.chunk_bytes(2**30, 1, half) == 16 * 2**20
    assert rdma_write.chunk_bytes(2**30, 4, half) == 4 * 2**20


def test_every_other_host_can_write_to_one_receiver_at_once():
    """clos-8: 8 hosts of 64 MiB; the receive half (32 MiB) holds the double
    buffers of 7 concurrent single-QP transfers (a 7:1 incast)."""
    hosts, mr_elems = 8, 8 * 65536
    half = hostmem.half_elems(mr_elems, hosts) * hostmem.KIB
    chunk = rdma_write.chunk_bytes(2**30, 1, half, peers=hosts - 1)
    assert chunk % hostmem.KIB == 0 and chunk >= 2 * 2**20
    receiver = hostmem.HostResources(0, hosts, mr_elems, nic.DEFAULT_MAX_QPS)
    for _ in range(hosts - 1):
        receiver.recv_mem.alloc(2 * chunk // hostmem.KIB, "a receive region")
        receiver.regions.take()
    senders = [
        hostmem.HostResources(h, hosts, mr_elems, nic.DEFAULT_MAX_QPS) for h in range(1, hosts)
    ]
    for s in senders:
        s.send_mem.alloc(2 * chunk // hostmem.KIB, "a send buffer")
        s.rings.take()
    # Two hosts: as before, one transfer takes its whole half.
    assert rdma_write.chunk_bytes(2**30, 1, half, peers=1) == 16 * 2**20


def test_a_rings_chunk_fits_what_one_session_may_hold():
    """A rank's session holds its send and receive double buffers: on the
    default lab (288 MiB, half a session's) a 256 MiB all-reduce over 2 hosts
    wants 128 MiB WRITEs, and gets 36 MiB, so that 4 of them fit 144 MiB; a
    lab whose [tenants] give a session a quarter gets half that."""
    from mrc_nic.lab import topology
    from mrc_nic.workloads import collective
    from tests.helpers.env import NETNS_DIR

    topo = topology.load(NETNS_DIR / "default.toml")
    assert rdma_write.session_memory(topo) == 144 * 2**20
    raw = {**topo.raw, "tenants": {"memory": "25%"}}
    quarter = topology.from_dict(topo.path, raw, "q")
    assert rdma_write.session_memory(quarter) == 72 * 2**20
    assert collective.ring_chunk(topo, 256 * 2**20, 2) == 36 * 2**20
    assert collective.ring_chunk(quarter, 256 * 2**20, 2) == 18 * 2**20
    assert collective.ring_chunk(quarter, 256 * 2**20, 2, qps=2) == 9 * 2**20
    assert collective.ring_chunk(topo, 8 * 2**20, 4) == 2 * 2**20  # the step's whole chunk
