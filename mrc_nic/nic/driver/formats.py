"""The records user space and the NIC exchange through shared memory, as
precompiled struct.Structs built from the generated ABI (mrc_nic.abi):
a WQE and the send queue's head (struct nic_wq), and a completion record
(the event structs of bpf/nic_structs.h). The hot paths (verbs' post_send
and poll) pack and unpack with these; nothing here is written by hand, and
tests/unit/test_driver.py checks them against the ABI field by field.
"""

from __future__ import annotations

import ctypes
import struct

from mrc_nic.nic.events import EVENT_LAYOUTS, Event, QpErrEvent, SendEvent
from mrc_nic.nic.layout import Wq, Wqe, packer

# struct nic_wqe, its fields in order: wr_id, remote_va, rkey, len, src_region,
# src_off, imm, opcode, flags (the reserved bytes as padding).
WQE = packer(Wqe)
WQE_FIELDS = tuple(name for name, _ in Wqe._fields_ if not name.startswith("reserved"))
# struct nic_wq's head: (posted, done); the WQE slots follow at WQ_SLOTS.
WQ_HEAD = packer(Wq, upto="wqes")
WQ_SIZE = ctypes.sizeof(Wq)
WQ_SLOTS = Wq.wqes.offset
WQ_POSTED = Wq.posted.offset
WQ_DONE = Wq.done.offset
U32 = struct.Struct("<I")


def _completion_record() -> struct.Struct:
    """Every record of a CQ's ring is the same size, with 32-bit words up to
    its 64-bit time stamp, last: read as (word 0, ..., word n-1, ts), one
    format for every type, so a poll unpacks without looking at the type."""
    size, ts = ctypes.sizeof(Event), Event.ts.offset
    for layout in EVENT_LAYOUTS.values():
        if ctypes.sizeof(layout) != size or layout.ts.offset != ts:
            raise TypeError(f"{layout.__name__}: completion records differ in size or ts offset")
    return struct.Struct(f"<{ts // 4}IQ{size - ts - 8}x")


CQE = _completion_record()


def word(layout: type[ctypes.Structure], field: str) -> int:
    """The index in a CQE tuple of a record's field (a 32-bit word, or ts)."""
    f = getattr(layout, field)
    if field == "ts":  # the one 64-bit field: right after the words
        return f.offset // 4
    if f.size != 4 or f.offset % 4:
        raise TypeError(f"{layout.__name__}.{field} is not a 32-bit word of the record")
    return f.offset // 4


CQE_TYPE, CQE_QPN, CQE_TS = word(Event, "type"), word(Event, "qpn"), word(Event, "ts")
SEND_WQE = word(SendEvent, "wqe")  # NIC_EV_SEND_DONE: the WQE's free-running index
RECV_MSN, RECV_IMM, RECV_LEN = word(Event, "msn"), word(Event, "imm"), word(Event, "len")
ERR_SYNDROME, ERR_ERROR = word(QpErrEvent, "syndrome"), word(QpErrEvent, "error")
