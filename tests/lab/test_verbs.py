"""The verbs API on a real lab: a QP pair between h0 and h1, each side a Context of
its own (as two processes would be), checked completion by completion and byte by
byte, then bad input, a dead process, and two processes on one host."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mrc_nic import nic, verbs
from mrc_nic.contract import appops
from mrc_nic.contract import daemonops as ops
from mrc_nic.kernel.fdwait import readable
from mrc_nic.lab import client
from mrc_nic.verbs import SGE, SendFlags, SendWR, WcOpcode, WcStatus, WrOpcode
from tests.helpers.verbspair import MR_BYTES, Side, connect, poll_n, write

KIB = 1024
WqeLayout = nic.Wqe  # struct nic_wqe: what the NIC reads from the mapped send queue


@pytest.fixture
def pair(default_lab):
    a, b = Side(default_lab.lab, "h0"), Side(default_lab.lab, "h1", max_send_wr=128)
    connect(a, b)
    yield a, b
    a.close()
    b.close()


def test_a_write_with_imm_lands_byte_exact_and_completes_on_both_sides(pair):
    a, b = pair
    data = os.urandom(256 * KIB)
    a.mr.buf[: len(data)] = data
    b.qp.post_recv(verbs.RecvWR(wr_id=77))
    a.qp.post_send(
        [
            write(a, b, 0, 128 * KIB, wr_id=1),  # unsignaled: no completion of its own
            write(
                a,
                b,
                128 * KIB,
                128 * KIB,
                wr_id=2,
                opcode=WrOpcode.RDMA_WRITE_WITH_IMM,
                imm_data=0xABCD,
                send_flags=SendFlags.SIGNALED,
            ),  # fmt: skip
        ]
    )
    (sent,) = poll_n(a.scq, 1)
    assert (sent.wr_id, sent.status, sent.opcode) == (2, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE)
    assert (sent.qp_num, sent.byte_len) == (a.qp.qp_num, 128 * KIB)
    (got,) = poll_n(b.rcq, 1)
    assert (got.wr_id, got.status, got.opcode) == (
        77,
        WcStatus.SUCCESS,
        WcOpcode.RECV_RDMA_WITH_IMM,
    )
    assert (got.imm_data, got.byte_len, got.qp_num) == (0xABCD, 128 * KIB, b.qp.qp_num)
    assert got.wc_flags & 2  # IBV_WC_WITH_IMM
    assert bytes(b.mr.buf[: len(data)]) == data
    assert a.scq.poll(4) == [] and b.rcq.poll(4) == []


def test_cq_moderation_completes_only_signaled_work_and_the_library_queues_past_the_nic(pair):
    """200 WRITEs of 1 KiB with a signal every 64 (the OCP example's moderation):
    only the signaled complete, though the NIC holds 32 WQEs at a time."""
    a, b = pair
    a.mr.buf[: 200 * KIB] = os.urandom(200 * KIB)
    signaled = [i for i in range(200) if i % 64 == 63 or i == 199]
    done: list[verbs.WC] = []
    posted = 0
    while posted < 200:
        n = min(128 - a.qp.outstanding, 200 - posted)
        a.qp.post_send(
            [
                write(
                    a,
                    b,
                    i * KIB,
                    KIB,
                    wr_id=i,
                    send_flags=SendFlags.SIGNALED if i in signaled else 0,
                )
                for i in range(posted, posted + n)
            ]
        )
        posted += n
        done += a.scq.poll(16)
    done += poll_n(a.scq, len(signaled) - len(done))
    assert [wc.wr_id for wc in done] == signaled
    assert all(wc.status == WcStatus.SUCCESS for wc in done)
    assert bytes(b.mr.buf[: 200 * KIB]) == bytes(a.mr.buf[: 200 * KIB])


def test_a_wrong_rkey_fails_at_the_sender_writes_nothing_and_flushes_the_rest(pair):
    a, b = pair
    a.mr.buf[: 8 * KIB] = b"\x5a" * 8 * KIB
    b.mr.buf[: 8 * KIB] = bytes(8 * KIB)
    bad = write(a, b, 0, 4 * KIB, wr_id=10)
    bad.rkey ^= 0x100  # the right region, a forged key
    a.qp.post_send([bad, write(a, b, 4 * KIB, 4 * KIB, wr_id=11, send_flags=SendFlags.SIGNALED)])
    wcs = poll_n(a.scq, 2)
    assert [(wc.wr_id, wc.status) for wc in wcs] == [
        (10, WcStatus.REM_ACCESS_ERR),
        (11, WcStatus.WR_FLUSH_ERR),
    ]
    assert a.qp.state == verbs.QpState.ERR
    time.sleep(0.05)
    # The refused WRITE placed nothing. The flushed one may have (verbs leaves a
    # flushed WR's effect at the responder undefined: its packets were on their way).
    assert bytes(b.mr.buf[: 4 * KIB]) == bytes(4 * KIB), "the refused WRITE placed nothing"
    a.qp.post_send(write(a, b, 0, KIB, wr_id=12))  # posted in ERR: flushed, as in verbs
    assert [(wc.wr_id, wc.status) for wc in a.scq.poll(4)] == [(12, WcStatus.WR_FLUSH_ERR)]


def test_bad_requests_are_refused_and_corrupt_nothing(pair):
    a, b = pair
    mr = a.mr
    refusals = {
        "outside the MR": SendWR(
            sg_list=[SGE(mr.addr + MR_BYTES - 512, KIB, mr.lkey)], rkey=b.mr.rkey
        ),
        "unknown lkey": SendWR(sg_list=[SGE(mr.addr, 64, 0xFFFF)], rkey=b.mr.rkey),
        "two SGEs on a 1-SGE QP": SendWR(sg_list=[SGE(mr.addr, KIB, mr.lkey)] * 2, rkey=b.mr.rkey),
    }
    for why, field, value in (
        ("rkey over 32 bits", "rkey", 1 << 32),
        ("negative rkey", "rkey", -1),
        ("negative remote_addr", "remote_addr", -KIB),
        ("remote_addr past 2**64", "remote_addr", (1 << 64) - 512),
    ):
        refusals[why] = write(a, b, 0, KIB)
        setattr(refusals[why], field, value)
    for why, wr in refusals.items():
        with pytest.raises(verbs.VerbsError) as e:
            a.qp.post_send([write(a, b, 0, KIB, wr_id=100), wr])
        assert e.value.errno == errno.EINVAL and e.value.bad_wr == 1, why
        assert a.qp.outstanding == 0, f"{why}: nothing posted, not even the good WR before it"
    with pytest.raises(verbs.VerbsError) as e:
        b.qp.post_send([write(b, a, 0, KIB) for _ in range(129)])  # max_send_wr 128
    assert e.value.errno == errno.ENOMEM and "128" in str(e.value)
    # The QP still works.
    a.mr.buf[:KIB] = b"\x11" * KIB
    a.qp.post_send(write(a, b, 0, KIB, wr_id=5, send_flags=SendFlags.SIGNALED))
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(5, WcStatus.SUCCESS)]
    assert bytes(b.mr.buf[:KIB]) == b"\x11" * KIB
    # Any byte address, both ends: 64 bytes from source byte 100 to remote byte 8.
    a.mr.buf[100:164] = bytes(range(1, 65))
    wr = write(a, b, 0, 64, wr_id=6, send_flags=SendFlags.SIGNALED)
    wr.sg_list, wr.remote_addr = [SGE(mr.addr + 100, 64, mr.lkey)], b.mr.addr + 8
    a.qp.post_send(wr)
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(6, WcStatus.SUCCESS)]
    assert bytes(b.mr.buf[:80]) == b"\x11" * 8 + bytes(range(1, 65)) + b"\x11" * 8


def test_before_rts_and_after_dereg_are_clear_errors(default_lab):
    a = Side(default_lab.lab, "h0")
    try:
        with pytest.raises(verbs.VerbsError, match="post_send needs RTS"):
            a.qp.post_send(SendWR(sg_list=[SGE(a.mr.addr, 64, a.mr.lkey)]))
        lkey = a.mr.lkey
        a.mr.close()
        a.qp.to_init()
        with pytest.raises(verbs.VerbsError, match="no MR of this PD"):
            a.pd.mr_of(lkey, "post_send")
        with pytest.raises(verbs.VerbsError, match="RTR needs dest_qp_num"):
            a.qp.modify(verbs.QPAttr(qp_state=verbs.QpState.RTR), verbs.QpAttrMask.STATE)
        # another process's session cannot query (or change) this one's QP
        other = Side(default_lab.lab, "h0")
        try:
            with pytest.raises(verbs.VerbsError, match="in this session") as e:
                other.ctx.call("query_qp", appops.QueryQp(qpn=a.qp.qp_num))
            assert e.value.errno == errno.ENOENT
        finally:
            other.close()
    finally:
        a.close()


def test_a_zero_length_write_with_imm_completes_with_no_bytes(pair):
    a, b = pair
    b.qp.post_recv(verbs.RecvWR(wr_id=9))
    a.qp.post_send(
        SendWR(
            wr_id=3,
            opcode=WrOpcode.RDMA_WRITE_WITH_IMM,
            imm_data=7,
            remote_addr=b.mr.addr,
            rkey=b.mr.rkey,
            send_flags=SendFlags.SIGNALED,
        )  # fmt: skip
    )
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(3, WcStatus.SUCCESS)]
    (got,) = poll_n(b.rcq, 1)
    assert (got.wr_id, got.imm_data, got.byte_len) == (9, 7, 0)
    # Its address is not checked, as in verbs: any va completes, with nothing written.
    b.qp.post_recv(verbs.RecvWR(wr_id=10))
    odd = SendWR(wr_id=4, opcode=WrOpcode.RDMA_WRITE_WITH_IMM, imm_data=8, rkey=b.mr.rkey,
                 remote_addr=b.mr.addr + 8, send_flags=SendFlags.SIGNALED)  # fmt: skip
    a.qp.post_send(odd)
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(4, WcStatus.SUCCESS)]
    assert [(wc.wr_id, wc.imm_data) for wc in poll_n(b.rcq, 1)] == [(10, 8)]


def test_a_cq_fd_is_readable_when_completions_wait(pair):
    a, b = pair
    assert readable([a.scq], 0) == []
    a.qp.post_send(write(a, b, 0, KIB, send_flags=SendFlags.SIGNALED))
    assert readable([a.scq], 5) == [a.scq]
    assert len(a.scq.poll(4)) == 1


def test_a_cq_fd_is_readable_for_completions_the_library_makes(pair):
    """Flushes and a receive matched late come from the library, not the NIC's
    ring: the fd says so too, until they are polled."""
    a, b = pair
    b.qp.post_send(write(b, a, 0, KIB, opcode=WrOpcode.RDMA_WRITE_WITH_IMM, imm_data=5))
    deadline = time.monotonic() + 10
    while not a.qp._early and time.monotonic() < deadline:  # arrived, no receive posted
        a.rcq.poll(1)
        time.sleep(0.01)
    assert readable([a.rcq], 0) == []
    a.qp.post_recv(verbs.RecvWR(wr_id=6))  # matches the message that waited
    assert readable([a.rcq], 0) == [a.rcq]
    assert [(wc.wr_id, wc.imm_data) for wc in a.rcq.poll(4)] == [(6, 5)]
    assert readable([a.rcq], 0) == []
    a.qp.post_recv([verbs.RecvWR(wr_id=7), verbs.RecvWR(wr_id=8)])
    a.qp.modify(verbs.QPAttr(qp_state=verbs.QpState.ERR), verbs.QpAttrMask.STATE)
    assert readable([a.rcq], 0) == [a.rcq]
    assert [wc.wr_id for wc in a.rcq.poll(1)] == [7]
    assert readable([a.rcq], 0) == [a.rcq], "one flush is still held"
    assert [(wc.wr_id, wc.status) for wc in a.rcq.poll(4)] == [(8, WcStatus.WR_FLUSH_ERR)]
    assert readable([a.rcq], 0) == []


def test_a_completion_made_by_a_poll_that_failed_keeps_the_fd_readable(pair, monkeypatch):
    a, b = pair
    a.qp.post_recv(verbs.RecvWR(wr_id=3))
    b.qp.post_send(write(b, a, 0, KIB, opcode=WrOpcode.RDMA_WRITE_WITH_IMM, imm_data=9))
    assert readable([a.rcq], 5) == [a.rcq], "the NIC's record is in the ring"

    def failing_push() -> None:
        raise OSError(errno.EIO, "the doorbell failed")

    monkeypatch.setattr(a.qp, "_push", failing_push)
    with pytest.raises(OSError):
        a.rcq.poll(1)  # the record became a WC, then the drain failed
    monkeypatch.undo()
    assert readable([a.rcq], 0) == [a.rcq], "the WC the failed poll made waits"
    assert [(wc.wr_id, wc.imm_data) for wc in a.rcq.poll(4)] == [(3, 9)]
    assert readable([a.rcq], 0) == []


def test_an_mr_with_a_live_view_is_not_deregistered(default_lab):
    a = Side(default_lab.lab, "h0")
    try:
        mr = a.pd.reg_mr(4 * KIB)
        array = mr.numpy()
        with pytest.raises(verbs.VerbsError, match="numpy") as e:
            mr.close()
        assert e.value.errno == errno.EBUSY and mr.valid
        derived = array[8:]  # a view of the array keeps it alive
        del array
        with pytest.raises(verbs.VerbsError, match="numpy"):
            mr.close()
        del derived
        piece = mr.buf[:16]
        with pytest.raises(verbs.VerbsError, match="mr.buf"):
            mr.close()
        piece.release()
        mr.close()
        assert not mr.valid
    finally:
        a.close()


def test_what_outlives_a_closed_context_reaches_no_one_elses_memory(default_lab):
    """After close, a kept view of an MR writes into private pages, not into the
    NIC memory a later session got; the objects refuse with EBADF."""
    a = Side(default_lab.lab, "h0")
    addr, buf, array = a.mr.addr, a.mr.buf[:64], a.mr.numpy()  # a slice outlives mr.buf
    a.close()
    b = Side(default_lab.lab, "h0")  # the same host: the NIC hands out the freed memory
    try:
        assert b.mr.addr == addr, "the test needs the same window again"
        buf[:4] = b"EVIL"
        array[4:8] = 7
        assert bytes(b.mr.buf[:8]) == bytes(8), "the stale views wrote into b's MR"
        with pytest.raises(ValueError, match="released"):
            a.mr.buf[:4] = b"gone"
        with pytest.raises(verbs.VerbsError) as e:
            a.qp.post_send(SendWR(sg_list=[SGE(a.mr.addr, 64, a.mr.lkey)]))
        assert e.value.errno == errno.EBADF
        with pytest.raises(verbs.VerbsError) as e:
            a.scq.poll(1)
        assert e.value.errno == errno.EBADF
        with pytest.raises(verbs.VerbsError) as e:
            a.qp.post_recv(verbs.RecvWR())
        assert e.value.errno == errno.EBADF
        assert not a.mr.valid
    finally:
        b.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from mrc_nic import verbs
    ctx = verbs.Context(sys.argv[1], "h0")
    pd = verbs.PD(ctx)
    mr = pd.reg_mr(1 << 20)
    cq = verbs.CQ(ctx, 16)
    qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq))
    qp.to_init()
    print(qp.qp_num, mr.lkey, flush=True)
    time.sleep(60)
    """
)


def app_qpns(lab: str, host: str) -> set[int]:
    qps = client.call(lab, host, ops.QpList()).qps
    return {q["qpn"] for q in qps if q.get("role") == "app"}


def test_a_dead_process_loses_its_qps_and_memory_and_another_keeps_its_own(pair, default_lab):
    a, b = pair
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, default_lab.lab], stdout=subprocess.PIPE, text=True
    )
    try:
        qpn, lkey = map(int, child.stdout.readline().split())
        assert qpn in app_qpns(default_lab.lab, "h0")
        with pytest.raises(client.DaemonError, match="ENOENT|no QP"):
            a.ctx.session.call(ops.appops.DestroyQp(qpn=qpn))  # not this session's
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 5
    while qpn in app_qpns(default_lab.lab, "h0") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert qpn not in app_qpns(default_lab.lab, "h0"), "the daemon released the dead process's QP"
    assert a.qp.qp_num in app_qpns(default_lab.lab, "h0")
    a.mr.buf[:KIB] = b"\x22" * KIB
    a.qp.post_send(write(a, b, 0, KIB, wr_id=1, send_flags=SendFlags.SIGNALED))
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(1, WcStatus.SUCCESS)]


def test_a_refused_modify_changes_nothing_and_rts_twice_is_refused(default_lab):
    a, b = Side(default_lab.lab, "h0"), Side(default_lab.lab, "h1")
    try:
        a.qp.to_init()
        b.qp.to_init()
        attr = verbs.QPAttr(qp_state=verbs.QpState.RTR, dest_qp_num=b.qp.qp_num, timeout=14,
                            ah_attr=verbs.AHAttr(dgid=b.ctx.gid()))  # fmt: skip
        mask = verbs.QpAttrMask
        with pytest.raises(verbs.VerbsError, match="RTR does not take timeout"):
            a.qp.modify(attr, mask.STATE | mask.AV | mask.DEST_QPN | mask.TIMEOUT)
        assert a.qp.query()["state"] == "INIT", "nothing applied"
        a.qp.to_rtr(b.qp.qp_num, b.ctx.gid())  # the same, right, now works
        a.qp.to_rts()
        with pytest.raises(verbs.VerbsError, match="in RTS already"):
            a.qp.to_rts(timeout=14)
    finally:
        a.close()
        b.close()


def test_an_mr_without_remote_write_refuses_writes(pair, default_lab):
    a, b = pair
    local_only = b.pd.reg_mr(4 * KIB, verbs.Access.LOCAL_WRITE)
    a.qp.post_send(
        SendWR(
            wr_id=1,
            sg_list=[SGE(a.mr.addr, KIB, a.mr.lkey)],
            remote_addr=local_only.addr,
            rkey=local_only.rkey,
            send_flags=SendFlags.SIGNALED,
        )  # fmt: skip
    )
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(1, WcStatus.REM_ACCESS_ERR)]
    assert bytes(local_only.buf) == bytes(4 * KIB)


def test_a_qp_without_remote_write_access_takes_no_write(default_lab):
    """qp_access_flags are the QP's, too: a receive QP moved to INIT with
    LOCAL_WRITE only refuses a WRITE into an MR that would take it
    (remote access error at the sender, nothing written)."""
    a, b = Side(default_lab.lab, "h0"), Side(default_lab.lab, "h1")
    try:
        a.qp.to_init()
        b.qp.to_init(verbs.Access.LOCAL_WRITE)
        a.qp.to_rtr(b.qp.qp_num, b.ctx.gid())
        b.qp.to_rtr(a.qp.qp_num, a.ctx.gid())
        a.qp.to_rts()
        assert b.qp.query()["access"] == int(verbs.Access.LOCAL_WRITE)
        a.mr.buf[:KIB] = b"\x5a" * KIB
        a.qp.post_send(write(a, b, 0, KIB, wr_id=7, send_flags=SendFlags.SIGNALED))
        assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(7, WcStatus.REM_ACCESS_ERR)]
        assert bytes(b.mr.buf[:KIB]) == bytes(KIB), "nothing was written"
    finally:
        a.close()
        b.close()


def doorbell_frames(lab: str, host: str) -> int:
    """Frames the host's doorbell port took (its NIC end's rx_packets)."""
    from mrc_nic.kernel import netns
    from mrc_nic.lab.topology import NS_PREFIX

    with netns.iproute(f"{NS_PREFIX}{lab}-{host}") as ipr:
        (link,) = ipr.get_links(ifname=nic.DOORBELL_NIC_IFNAME)
        return link.get_attr("IFLA_STATS64")["rx_packets"]


def test_a_small_post_rings_the_doorbell_port_and_a_large_one_a_live_frames_run(pair, default_lab):
    a, b = pair
    assert a.ctx._nic.port is not None  # the lab gave h0 a doorbell port
    lab = default_lab.lab
    a.mr.buf[:64] = b"d" * 64
    before = doorbell_frames(lab, "h0")
    a.qp.post_send(write(a, b, 0, 64, wr_id=1, send_flags=SendFlags.SIGNALED))
    (wc,) = poll_n(a.scq, 1)
    assert wc.status == WcStatus.SUCCESS and bytes(b.mr.buf[:64]) == b"d" * 64
    assert doorbell_frames(lab, "h0") == before + 1  # one engine run: one frame
    many = [write(a, b, i * KIB, 64, wr_id=10 + i) for i in range(31)]
    many.append(write(a, b, 31 * KIB, 64, wr_id=41, send_flags=SendFlags.SIGNALED))
    a.qp.post_send(many)  # 32 runs: one BPF_PROG_RUN, no frames
    (wc,) = poll_n(a.scq, 1)
    assert (wc.wr_id, wc.status) == (41, WcStatus.SUCCESS)
    assert doorbell_frames(lab, "h0") == before + 1


def test_a_cq_that_overruns_is_in_error_after_what_it_held(default_lab):
    """A CQ never polled while more signaled WRs complete than its ring holds:
    the NIC loses the rest and counts them for that CQ; polling delivers what
    the ring held, then fails with EOVERFLOW (IBV_EVENT_CQ_ERR), never silently."""
    a, b = Side(default_lab.lab, "h0", max_send_wr=4096), Side(default_lab.lab, "h1")
    try:
        connect(a, b)
        deadline = time.monotonic() + 30
        posted = 0
        while a.scq._ring.lost() == 0 and time.monotonic() < deadline:
            a.qp.post_send(write(a, b, 0, 0, wr_id=posted, send_flags=SendFlags.SIGNALED))
            posted += 1
        lost = a.scq._ring.lost()
        assert lost > 0, f"{posted} WRs completed into the CQ and none was lost"
        held = []
        with pytest.raises(verbs.VerbsError, match="overran") as e:
            while True:
                held += a.scq.poll(64)
        assert e.value.errno == errno.EOVERFLOW
        assert held and [wc.wr_id for wc in held] == list(range(len(held)))  # in order
        assert all(wc.status == WcStatus.SUCCESS for wc in held)
    finally:
        a.close()
        b.close()


# ---- protection domains: the NIC keeps a QP to the MRs of its own PD ---------------------------


def test_an_rkey_of_another_pd_of_the_host_is_a_remote_access_error(pair):
    """h1 has two PDs: its QP's (A) and B. A WRITE into A's MR lands byte-exact;
    one through the same QP with the rkey of B's MR fails at the sender and
    leaves that MR as it was."""
    a, b = pair
    pd_b = verbs.PD(b.ctx)
    mr_b = pd_b.reg_mr(8 * KIB)
    assert pd_b.handle not in (0, b.pd.handle)
    mr_b.buf[:] = b"\x3c" * 8 * KIB
    data = os.urandom(8 * KIB)
    a.mr.buf[: 8 * KIB] = data
    a.qp.post_send(write(a, b, 0, 8 * KIB, wr_id=1, send_flags=SendFlags.SIGNALED))
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(1, WcStatus.SUCCESS)]
    assert bytes(b.mr.buf[: 8 * KIB]) == data, "same-PD traffic is byte-exact"
    a.qp.post_send(
        SendWR(
            wr_id=2,
            sg_list=[SGE(a.mr.addr, 8 * KIB, a.mr.lkey)],
            remote_addr=mr_b.addr,
            rkey=mr_b.rkey,
            send_flags=SendFlags.SIGNALED,
        )  # fmt: skip
    )
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(2, WcStatus.REM_ACCESS_ERR)]
    assert a.qp.state == verbs.QpState.ERR
    time.sleep(0.05)
    assert bytes(mr_b.buf) == b"\x3c" * 8 * KIB, "PD B's MR untouched"


def test_a_wqe_naming_another_pds_mr_is_a_local_protection_error(pair):
    """The send queue is the process's memory: a WQE written there naming an MR
    of another PD (its lkey as src_region) is refused by the NIC, which sends
    nothing from it (IBV_WC_LOC_PROT_ERR)."""
    a, b = pair
    other = verbs.PD(a.ctx)
    secret = other.reg_mr(4 * KIB)
    secret.buf[:] = b"\x77" * 4 * KIB
    b.mr.buf[: 4 * KIB] = bytes(4 * KIB)
    qp, ring = a.qp, a.qp._kick
    field = WqeLayout.src_region.offset

    def forged(packets: int):  # after the library wrote the WQE, before the doorbell
        sq = qp._sq
        at = sq.slots + (qp._posted - 1) % sq.depth * ctypes.sizeof(WqeLayout) + field
        sq.memory[at : at + 4] = secret.lkey.to_bytes(4, "little")
        return ring(packets)

    qp._kick = forged
    qp.post_send(write(a, b, 0, 4 * KIB, wr_id=3, send_flags=SendFlags.SIGNALED))
    assert [(wc.wr_id, wc.status) for wc in poll_n(a.scq, 1)] == [(3, WcStatus.LOC_PROT_ERR)]
    assert qp.state == verbs.QpState.ERR
    time.sleep(0.05)
    assert bytes(b.mr.buf[: 4 * KIB]) == bytes(4 * KIB), "nothing was sent from that memory"


def test_pds_are_the_daemons_and_dealloc_waits_for_their_users(default_lab):
    a = Side(default_lab.lab, "h0")
    other = verbs.Context(default_lab.lab, "h0")
    try:
        other_pd = verbs.PD(other)
        assert other_pd.handle not in (0, a.pd.handle), "unique on the host"
        assert a.qp.query()["pd"] == a.pd.handle
        for verb, request in [
            ("reg_mr", appops.RegMr(pd=other_pd.handle, length=KIB, access=3)),
            ("dealloc_pd", appops.DeallocPd(pd=other_pd.handle)),
        ]:  # another session's PD is none of this one's
            with pytest.raises(verbs.VerbsError, match="no protection domain of this session"):
                a.ctx.call(verb, request)
        with pytest.raises(verbs.VerbsError, match="use PD") as e:
            a.pd.close()  # its QP is open
        assert e.value.errno == errno.EBUSY and a.mr.valid, "nothing released"
        with pytest.raises(verbs.VerbsError, match="is used by MR lkey .* QP") as e:
            a.ctx.call("dealloc_pd", appops.DeallocPd(pd=a.pd.handle))
        assert e.value.errno == errno.EBUSY
        a.qp.close()
        a.pd.close()  # its MR, then the PD
        assert not a.mr.valid
        with pytest.raises(verbs.VerbsError, match="no protection domain"):
            a.pd.reg_mr(KIB)
    finally:
        a.close()
        other.close()
