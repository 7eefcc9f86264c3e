"""The verbs API of the emulated MRC NIC, shaped after OCP mrc.h and pyverbs.

    from mrc_nic import verbs

    with verbs.Context() as ctx:                     # inside `mrc-nic exec HOST -- ...`
        pd = verbs.PD(ctx)
        mr = pd.reg_mr(1 << 20)                      # NIC memory; mr.buf, mr.numpy()
        cq = verbs.CQ(ctx, 256)
        qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq))
        qp.to_init(); qp.to_rtr(peer_qpn, peer_gid); qp.to_rts()
        qp.post_send(verbs.SendWR(wr_id=1, sg_list=[verbs.SGE(mr.addr, 4096, mr.lkey)],
                                  remote_addr=peer_addr, rkey=peer_rkey,
                                  send_flags=verbs.SendFlags.SIGNALED))
        wc, = cq.poll(1)

The daemon only sets up (context, MRs, CQs, QPs); WQEs go straight into
the NIC's mapped send queue and completions come straight from the CQ's
ring buffer. docs/api.md has the whole surface and a two-process example.
"""

from mrc_nic.verbs.context import Context, DeviceAttr
from mrc_nic.verbs.cq import CQ, WC
from mrc_nic.verbs.enums import (
    Access,
    AsyncEventType,
    MrcAttrMask,
    MrcQpCap,
    Mtu,
    QpAttrMask,
    QpState,
    SendFlags,
    WcOpcode,
    WcStatus,
    WrOpcode,
)
from mrc_nic.verbs.errors import VerbsError
from mrc_nic.verbs.memory import MR, PD
from mrc_nic.verbs.qp import QP, SGE, AHAttr, MrcQPAttr, QPAttr, QPCap, QPInitAttr, RecvWR, SendWR

__all__ = [
    "CQ",
    "MR",
    "PD",
    "QP",
    "SGE",
    "WC",
    "AHAttr",
    "Access",
    "AsyncEventType",
    "Context",
    "DeviceAttr",
    "MrcAttrMask",
    "MrcQpCap",
    "MrcQPAttr",
    "Mtu",
    "QPAttr",
    "QPCap",
    "QPInitAttr",
    "QpAttrMask",
    "QpState",
    "RecvWR",
    "SendFlags",
    "SendWR",
    "VerbsError",
    "WcOpcode",
    "WcStatus",
    "WrOpcode",
]
