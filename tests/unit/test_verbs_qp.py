"""The verbs library's queue pair without a NIC: what post_send writes into the
send queue (checked against the generated struct nic_wq), how it queues past the
NIC's depth, how completions become work completions, and what it refuses.
The NIC side of the same contract is tested in tests/bpf and tests/lab."""

from __future__ import annotations

import ctypes
import errno
import mmap
import types

import pytest

from mrc_nic import nic
from mrc_nic.abi import defs
from mrc_nic.contract import appops
from mrc_nic.nic.driver.sq import SendQueue
from mrc_nic.verbs import SGE, QpAttrMask, QpState, SendFlags, SendWR, WcStatus, WrOpcode
from mrc_nic.verbs.context import DeviceAttr
from mrc_nic.verbs.errors import VerbsError
from mrc_nic.verbs.memory import MR, PD
from mrc_nic.verbs.qp import QP, MrcQPAttr, QPAttr, QPCap, QPInitAttr

RING, QPN, DEPTH = 2, 0x10005, nic.SQ_DEPTH
WQ_SIZE = ctypes.sizeof(defs.NicWq)
ATTR = DeviceAttr(
    host="h0",
    host_index=1,
    planes=4,
    seg_size=3072,
    mr_align=1,
    max_mr_bytes=1 << 24,
    sq_depth=DEPTH,
    max_qp_wr=4096,
    max_mpr=8,
    max_wimm=32,
    cq_ring_bytes=1 << 16,
    gids=("198.18.0.2",),
)


class FakeContext:
    """The daemon's replies and the NIC's mapped memory, as plain buffers."""

    def __init__(self) -> None:
        self.attr = ATTR
        self.wq_memory = bytearray(WQ_SIZE * 4)
        self._nic = types.SimpleNamespace(  # what verbs reaches of the NIC (driver.views)
            memory_window=self.memory_window,
            # the daemon's sq_fd stands for the queue's ring here
            send_queue=lambda sq_fd, depth: SendQueue(self.wq_memory, sq_fd * WQ_SIZE, depth),
            doorbell=lambda qpn: None,  # replaced by each test's fake (qp._kick)
        )
        self._closed = self._fatal = self._lost = False
        self.requests: list = []
        self.pds: list = []
        self.cqs: list = []

    def call(self, verb: str, request):
        self.requests.append(request)
        if isinstance(request, appops.AllocPd):
            return appops.AllocPdReply(pd=1)
        if isinstance(request, appops.CreateQp):
            return appops.CreateQpReply(qpn=QPN, sq_depth=DEPTH, ring=RING, sq_fd=RING)
        if isinstance(request, appops.RegMr):
            return appops.RegMrReply(
                region=3, rkey=0xABC03, addr=3 << 40, length=request.length, memory_fd=64
            )
        if isinstance(request, appops.ModifyQp):
            return appops.ModifyQpReply(qp={"state": request.state})
        return appops.Done()

    @staticmethod
    def memory_window(memory_fd: int, start: int, length: int) -> tuple[mmap.mmap, memoryview]:
        """NIC memory: anonymous pages here."""
        mapping = mmap.mmap(-1, start % mmap.PAGESIZE + length)
        return mapping, memoryview(mapping)[start % mmap.PAGESIZE :][:length]

    def wq(self) -> defs.NicWq:
        return defs.NicWq.from_buffer_copy(self.wq_memory, RING * WQ_SIZE)

    def complete(self, done: int) -> None:
        """The NIC completing WQEs: nic_wq.done."""
        ctypes.c_uint32.from_buffer(self.wq_memory, RING * WQ_SIZE + 4).value = done


class FakeCQ:
    def __init__(self, index: int) -> None:
        self.index, self.qps, self.wcs = index, {}, []

    def deliver(self, wc) -> None:
        self.wcs.append(wc)


@pytest.fixture
def setup():
    ctx = FakeContext()
    pd = PD(ctx)
    mr = MR(pd, 64 * 1024, 3)
    scq, rcq = FakeCQ(0), FakeCQ(1)
    qp = QP(pd, QPInitAttr(send_cq=scq, recv_cq=rcq, cap=QPCap(max_send_wr=100, max_send_sge=2)))
    kicks: list[int] = []
    qp._kick = kicks.append
    qp.modify(QPAttr(qp_state=QpState.RTS), 1)
    return types.SimpleNamespace(ctx=ctx, mr=mr, qp=qp, scq=scq, rcq=rcq, kicks=kicks)


def wr(s, i: int, length: int = 1024, **kw) -> SendWR:
    return SendWR(
        wr_id=i,
        sg_list=[SGE(s.mr.addr + i * 1024, length, s.mr.lkey)],
        remote_addr=(5 << 40) + i * 1024,
        rkey=0x77,
        **kw,
    )


def test_post_send_writes_the_wqe_the_nic_reads_then_rings_once(setup):
    s = setup
    s.qp.post_send(
        [
            wr(s, 0),
            wr(
                s,
                1,
                5000,
                opcode=WrOpcode.RDMA_WRITE_WITH_IMM,
                imm_data=9,
                send_flags=SendFlags.SIGNALED,
            ),
        ]
    )
    wq = s.ctx.wq()
    assert wq.posted == 2
    first, second = wq.wqes[0], wq.wqes[1]
    assert (first.wr_id, first.remote_va, first.rkey, first.len) == (0, 5 << 40, 0x77, 1024)
    assert (first.src_region, first.src_off, first.opcode, first.flags) == (3, 0, 0x0A, 0)
    assert (second.len, second.src_off, second.imm, second.opcode) == (5000, 1024, 9, 0x0B)
    assert second.flags == 1  # NIC_WQE_F_SIGNALED
    assert s.kicks == [1 + 2]  # one doorbell: 1 packet + ceil(5000 / 3072)


def test_sges_become_wqes_to_consecutive_remote_addresses_signaled_on_the_last(setup):
    s = setup
    sges = [SGE(s.mr.addr, 2048, s.mr.lkey), SGE(s.mr.addr + 8192, 100, s.mr.lkey)]
    s.qp.post_send(
        SendWR(
            wr_id=4,
            sg_list=sges,
            remote_addr=5 << 40,
            rkey=1,
            opcode=WrOpcode.RDMA_WRITE_WITH_IMM,
            send_flags=SendFlags.SIGNALED,
        )
    )
    a, b = s.ctx.wq().wqes[0], s.ctx.wq().wqes[1]
    assert (a.remote_va, a.len, a.opcode, a.flags) == (5 << 40, 2048, 0x0A, 0)
    assert (b.remote_va, b.len, b.src_off, b.opcode, b.flags) == (
        (5 << 40) + 2048,
        100,
        8192,
        0x0B,
        1,
    )


def test_work_past_the_nics_depth_waits_and_goes_in_as_the_nic_completes(setup):
    s = setup
    s.qp.post_send([wr(s, i % 60) for i in range(DEPTH + 8)])
    assert s.ctx.wq().posted == DEPTH and s.qp.outstanding == DEPTH + 8
    s.ctx.complete(5)
    s.qp._push()
    assert s.ctx.wq().posted == DEPTH + 5
    assert s.ctx.wq().wqes[0].wr_id == DEPTH % 60  # slot 0 reused by WQE DEPTH
    assert s.qp.outstanding == DEPTH + 3, "the 5 unsignaled WRs the NIC completed are forgotten"


def test_completions_come_for_signaled_work_in_order(setup):
    s = setup
    s.qp.post_send(
        [wr(s, i, send_flags=SendFlags.SIGNALED if i in (3, 6) else 0) for i in range(8)]
    )
    done = int(nic.EventType.SEND_DONE)
    s.ctx.complete(4)
    s.qp._on_record((done, QPN, 0, 0, 3, 0, 1024, 3, 0))  # WQE 3 (wr 3) completed
    assert [(wc.wr_id, wc.status, wc.byte_len) for wc in s.scq.wcs] == [(3, WcStatus.SUCCESS, 1024)]
    assert s.qp.outstanding == 4
    s.ctx.complete(8)
    s.qp._on_record((done, QPN, 0, 0, 6, 0, 1024, 6, 0))
    assert [wc.wr_id for wc in s.scq.wcs] == [3, 6] and s.qp.outstanding == 0


def test_a_fatal_nack_fails_the_oldest_wr_and_flushes_the_others(setup):
    s = setup
    s.qp.post_send([wr(s, i) for i in range(3)])
    s.qp.post_recv([types.SimpleNamespace(wr_id=50)])
    err = int(nic.EventType.QP_ERR)
    s.qp._on_record((err, QPN, 0, 0, int(nic.wire.Syndrome.NAK_REM_ACCESS), 0, 0, 0, 0))
    assert [(wc.wr_id, wc.status) for wc in s.scq.wcs] == [
        (0, WcStatus.REM_ACCESS_ERR),
        (1, WcStatus.WR_FLUSH_ERR),
        (2, WcStatus.WR_FLUSH_ERR),
    ]
    assert [(wc.wr_id, wc.status) for wc in s.rcq.wcs] == [(50, WcStatus.WR_FLUSH_ERR)]
    assert s.qp.state == QpState.ERR and s.qp.outstanding == 0


def test_receives_match_messages_in_order_even_when_posted_late(setup):
    s = setup
    imm = int(nic.EventType.RECV_IMM)
    s.qp._on_record((imm, QPN, 0, 0xAA, 0, 0, 4096, 0, 0))  # before any receive is posted
    s.qp._take_arrivals()
    s.qp.post_recv([types.SimpleNamespace(wr_id=1), types.SimpleNamespace(wr_id=2)])
    s.qp._on_record((imm, QPN, 1, 0xBB, 0, 0, 10, 0, 0))
    s.qp._take_arrivals()
    assert [(wc.wr_id, wc.imm_data, wc.byte_len) for wc in s.rcq.wcs] == [
        (1, 0xAA, 4096),
        (2, 0xBB, 10),
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"opcode": 7}, "MRC posts RDMA_WRITE"),
        ({"imm_data": 1 << 32}, "imm_data must fit 32 bits"),
        ({"sg_list": [SGE(0, 1, 0x99)]}, "no MR of this PD"),
        ({"rkey": 1 << 32}, "rkey must fit 32 bits"),
        ({"rkey": -1}, "rkey must fit 32 bits"),
        ({"remote_addr": -1024}, "remote_addr must be a 64-bit address"),
        ({"remote_addr": (1 << 64) - 512}, "runs past 2\\*\\*64"),
    ],
)
def test_a_bad_wr_refuses_the_whole_list(setup, change, message):
    s = setup
    bad = wr(s, 1)
    for name, value in change.items():
        setattr(bad, name, value)
    with pytest.raises(VerbsError, match=message) as e:
        s.qp.post_send([wr(s, 0), bad])
    assert e.value.errno == errno.EINVAL and e.value.bad_wr in (1, None)
    assert s.ctx.wq().posted == 0 and s.qp.outstanding == 0 and s.kicks == []


def test_modify_translates_masks_into_the_daemons_attributes(setup):
    s = setup
    s.ctx.requests.clear()
    attr = QPAttr(qp_state=QpState.RTS, sq_psn=5, timeout=14, retry_cnt=6)
    s.qp.modify(attr, 1 | (1 << 16) | (1 << 9) | (1 << 10), MrcQPAttr(mpr=4), 1 << 2)
    (req,) = s.ctx.requests
    assert req.state == "RTS"
    assert req.attrs == {"sq_psn": 5, "timeout": 14, "retry_linear_cnt": 6, "mpr": 4}
    with pytest.raises(VerbsError, match="not an MRC QP attribute"):
        s.qp.modify(QPAttr(qp_state=QpState.RTS), 1 | (1 << 14))  # ALT_PATH


def test_a_host_the_lab_does_not_have_is_named_as_such(monkeypatch, tmp_path):
    from mrc_nic.contract import devices
    from mrc_nic.verbs import context

    monkeypatch.setattr(devices, "RUN_DIR", tmp_path)
    (tmp_path / "lab1").mkdir()
    devices.publish(devices.Devices(lab="lab1", hosts=("h0", "h1"), restart="mrc-nic up"))
    why = context._no_daemon("lab1", "h8", OSError("the daemon does not answer"))
    assert why == "lab 'lab1' has no host 'h8' (hosts: h0, h1)"
    assert context._no_daemon("lab1", "h1", OSError("down")) == "down"


def test_several_labs_up_and_no_lab_named_says_so(monkeypatch, tmp_path):
    from mrc_nic.contract import devices
    from mrc_nic.verbs import context

    monkeypatch.delenv(context.ENV_LAB, raising=False)
    monkeypatch.setattr(context, "NETNS_DIR", tmp_path)  # not inside any lab's host
    monkeypatch.setattr(devices, "RUN_DIR", tmp_path)
    for lab in ("a", "b"):  # two labs up: their registries
        (tmp_path / lab).mkdir()
        devices.publish(devices.Devices(lab=lab, hosts=("h0",), restart="mrc-nic up"))
    with pytest.raises(VerbsError, match="labs a, b are up: name one") as e:
        context.locate(host="h0")
    assert e.value.errno == errno.ENODEV


def test_a_post_larger_than_the_send_queue_says_to_post_less(setup):
    s = setup
    with pytest.raises(VerbsError, match="more than the send queue holds \\(100\\)") as e:
        s.qp.post_send([wr(s, 0)] * 101)
    assert e.value.errno == errno.ENOMEM and "poll the CQ" not in str(e.value)


def test_retry_cnt_is_three_bits(setup):
    s = setup
    with pytest.raises(VerbsError, match="retry_cnt is 3 bits"):
        s.qp.modify(QPAttr(qp_state=QpState.RTS, retry_cnt=9), 1 | QpAttrMask.RETRY_CNT)


def test_a_fatal_nack_after_the_nic_completed_earlier_work_blames_the_first_not_done(setup):
    s = setup
    s.qp.post_send([wr(s, 0), wr(s, 1)])
    s.ctx.complete(1)  # WR 0 is done (unsignaled: no record)
    err = int(nic.EventType.QP_ERR)
    s.qp._on_record((err, QPN, 0, 0, int(nic.wire.Syndrome.NAK_REM_ACCESS), 0, 0, 0, 0))
    assert [(wc.wr_id, wc.status) for wc in s.scq.wcs] == [(1, WcStatus.REM_ACCESS_ERR)]


def test_completions_go_out_in_post_order_whatever_order_their_records_come_in(setup):
    s = setup
    s.qp.post_send([wr(s, i, send_flags=SendFlags.SIGNALED) for i in range(3)])
    done = int(nic.EventType.SEND_DONE)
    s.ctx.complete(3)
    s.qp._on_record((done, QPN, 0, 0, 2, 0, 1024, 2, 0))  # WQE 2's record first
    assert s.scq.wcs == []
    s.qp._on_record((done, QPN, 0, 0, 0, 0, 1024, 0, 0))
    s.qp._on_record((done, QPN, 0, 0, 1, 0, 1024, 1, 0))
    assert [wc.wr_id for wc in s.scq.wcs] == [0, 1, 2]
    imm = int(nic.EventType.RECV_IMM)
    s.qp.post_recv([types.SimpleNamespace(wr_id=10), types.SimpleNamespace(wr_id=11)])
    s.qp._on_record((imm, QPN, 1, 0xB, 0, 0, 8, 0, 0))  # MSN 1 before MSN 0, one ring read
    s.qp._on_record((imm, QPN, 0, 0xA, 0, 0, 8, 0, 0))
    s.qp._take_arrivals()
    assert [(wc.wr_id, wc.imm_data) for wc in s.rcq.wcs] == [(10, 0xA), (11, 0xB)]


def test_room_counts_what_the_nic_completed_since_the_last_post(setup):
    s = setup
    s.qp.post_send([wr(s, i % 60) for i in range(100)])  # max_send_wr 100
    s.ctx.complete(DEPTH)  # the NIC completed its 32 (unsignaled)
    s.qp.post_send([wr(s, 0)])  # fits: those 32 WRs are gone
    assert s.qp.outstanding == 100 - DEPTH + 1
