"""The OCP QP attributes honoured on a real lab (issue 20 item 6): with dynamic
MPR on both ends the sender keeps to the MPR its peer advertises, so a
receiver with a smaller mpr_dest NACKs nothing out of its window; max_wimm
bounds the WRITE_WITH_IMMs a QP has outstanding."""

from __future__ import annotations

import pytest

from mrc_nic import nic, verbs
from mrc_nic.verbs import SGE, SendFlags, SendWR, WrOpcode

pytestmark = [pytest.mark.root, pytest.mark.netns]
MIB = 2**20
CHUNK = 64 * 1024


def _pair(lab: str, *, mpr: int, mpr_dest: int, cap: int, max_wimm: int | None = None):
    """A connected pair h0 -> h1 (fixed window of the MPR range: CC profile 0, cwnd 0)."""
    tx, rx = verbs.Context(lab=lab, host="h0"), verbs.Context(lab=lab, host="h1")
    txm, rxm = verbs.PD(tx).reg_mr(4 * MIB), verbs.PD(rx).reg_mr(4 * MIB)
    tcq, rcq = verbs.CQ(tx, 256), verbs.CQ(rx, 256)
    cap_q = verbs.QPCap(max_send_wr=256, max_recv_wr=64)
    sqp = verbs.QP(txm.pd, verbs.QPInitAttr(send_cq=tcq, recv_cq=tcq, cap=cap_q))
    rqp = verbs.QP(rxm.pd, verbs.QPInitAttr(send_cq=rcq, recv_cq=rcq, cap=cap_q))
    rqp.to_init()
    rqp.to_rtr(sqp.qp_num, tx.gid(), mpr_dest=mpr_dest, cap=cap)
    sqp.to_init(cc_profile_id=0)
    sqp.to_rtr(rqp.qp_num, rx.gid(), mpr_dest=mpr_dest, cap=cap)
    sqp.to_rts(mpr=mpr, cap=cap, max_wimm=max_wimm, ext={"cwnd": 0})
    return tx, rx, txm, rxm, tcq, rcq, sqp, rqp


def _write(sqp, tcq, txm, rxm, total: int, *, imm: bool = False) -> None:
    op = WrOpcode.RDMA_WRITE_WITH_IMM if imm else WrOpcode.RDMA_WRITE
    n = total // CHUNK
    wrs = [
        SendWR(
            wr_id=i,
            opcode=op,
            imm_data=i,
            sg_list=[SGE(txm.addr + (i * CHUNK) % len(txm.buf), CHUNK, txm.lkey)],
            remote_addr=rxm.addr + (i * CHUNK) % len(rxm.buf),
            rkey=rxm.rkey,
            send_flags=SendFlags.SIGNALED,
        )
        for i in range(n)
    ]
    sqp.post_send(wrs)
    done = 0
    while done < n:
        assert tcq.wait(10), f"{done} of {n} WRs completed"
        wcs = tcq.poll(64)
        assert all(wc.status == 0 for wc in wcs), wcs
        done += len(wcs)


@pytest.mark.parametrize(("cap", "honoured"), [(verbs.MrcQpCap.DYNAMIC_MPR, True), (0, False)])
def test_sender_keeps_to_the_mpr_its_peer_advertises(default_lab, cap, honoured):
    lab = default_lab.lab
    tx, rx, txm, rxm, tcq, rcq, sqp, rqp = _pair(lab, mpr=8, mpr_dest=1, cap=cap)
    with tx, rx, nic.NicMaps.open(lab) as maps:
        oor = maps.counters()["nack_oor"]
        _write(sqp, tcq, txm, rxm, 16 * MIB)
        oor = maps.counters()["nack_oor"] - oor
        s = maps.sq(sqp.qp_num)
    if honoured:
        assert (s.dyn_mpr, s.peer_mpr, s.window) == (True, 1, nic.wire.MPR_UNIT)
        assert oor == 0  # never beyond the receiver's 128-PSN window
    else:
        assert (s.peer_mpr, s.window) == (0, 8 * nic.wire.MPR_UNIT)  # not advertised
        assert oor > 0  # the sender ran 1024 PSNs ahead: the receiver refused some


def test_max_wimm_bounds_write_with_imms_outstanding(default_lab):
    lab = default_lab.lab
    tx, rx, txm, rxm, tcq, rcq, sqp, rqp = _pair(
        lab, mpr=8, mpr_dest=8, cap=verbs.MrcQpCap.DYNAMIC_MPR, max_wimm=2
    )
    with tx, rx:
        rqp.post_recv([verbs.RecvWR(wr_id=i) for i in range(64)])
        with nic.NicMaps.open(lab) as maps:
            _write(sqp, tcq, txm, rxm, 4 * MIB, imm=True)
            s = maps.sq(sqp.qp_num)
        got = []
        while len(got) < 64 and rcq.wait(5):
            got += rcq.poll(64)
    assert s.max_wimm == 2 and s.wimm_out == 0
    assert s.wimm_full > 0  # the engine held WRITE_WITH_IMMs back
    assert [wc.imm_data for wc in got] == list(range(64))
