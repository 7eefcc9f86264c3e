"""The user-space driver's formats (mrc_nic.nic.driver) against the generated
ABI, field by field: the precompiled structs the post and poll paths use
must read and write exactly what the bpf/ headers lay out. And the WQE
writer and the doorbell frames on plain memory."""

from __future__ import annotations

import ctypes
import struct

import pytest

from mrc_nic import nic
from mrc_nic.nic.driver import formats
from mrc_nic.nic.driver.doorbell import KICK_TEMPLATE, doorbell_frame, kick_frame
from mrc_nic.nic.driver.sq import SendQueue


def _distinct(layout: type[ctypes.Structure], skip=("reserved",)) -> ctypes.Structure:
    """A value of layout whose every integer field holds a different number."""
    value = layout()
    for i, (name, kind) in enumerate(layout._fields_):
        if not name.startswith(skip) and not issubclass(kind, ctypes.Array):
            setattr(value, name, (0x11 * (i + 1)) & ((1 << (8 * ctypes.sizeof(kind))) - 1))
    return value


def test_the_wqe_struct_is_the_abis_field_by_field():
    assert formats.WQE.size == ctypes.sizeof(nic.Wqe)
    fields = [n for n, _ in nic.Wqe._fields_ if not n.startswith("reserved")]
    assert list(formats.WQE_FIELDS) == fields
    value = _distinct(nic.Wqe)
    unpacked = formats.WQE.unpack(bytes(value))  # what ctypes wrote, read by the struct
    assert dict(zip(fields, unpacked, strict=True)) == {n: getattr(value, n) for n in fields}
    raw = bytearray(formats.WQE.size)
    formats.WQE.pack_into(raw, 0, *unpacked)  # and the struct's bytes are ctypes' bytes
    assert bytes(raw) == bytes(value)


def test_the_send_queue_head_is_the_abis():
    assert formats.WQ_HEAD.size == nic.Wq.wqes.offset == formats.WQ_SLOTS
    assert (nic.Wq.posted.offset, nic.Wq.done.offset) == (formats.WQ_POSTED, formats.WQ_DONE)
    assert ctypes.sizeof(nic.Wq) == formats.WQ_SIZE
    wq = nic.Wq(posted=0x01020304, done=0x0A0B0C0D)
    assert formats.WQ_HEAD.unpack_from(bytes(wq)) == (0x01020304, 0x0A0B0C0D)


@pytest.mark.parametrize("layout", sorted(nic.EVENT_LAYOUTS.values(), key=lambda c: c.__name__))
def test_a_completion_record_reads_every_field_of_every_event_layout(layout):
    """formats.CQE reads any record as its 32-bit words then ts: every field
    of every record type is where the driver's indexes say."""
    assert formats.CQE.size == ctypes.sizeof(layout)
    value = _distinct(layout)
    words = formats.CQE.unpack(bytes(value))
    for name, kind in layout._fields_:
        if name.startswith("reserved"):
            continue
        f = getattr(layout, name)
        if ctypes.sizeof(kind) == 4:
            assert words[formats.word(layout, name)] == getattr(value, name), name
        else:  # a 64-bit field: two words (little-endian), or ts
            if name == "ts":
                assert words[formats.CQE_TS] == value.ts
            else:
                lo, hi = words[f.offset // 4], words[f.offset // 4 + 1]
                assert lo | hi << 32 == getattr(value, name), name


def test_the_indexes_verbs_reads_are_the_fields_it_means():
    assert formats.CQE_TYPE == nic.Event.type.offset // 4 == 0
    assert nic.Event.qpn.offset // 4 == formats.CQE_QPN
    assert nic.SendEvent.wqe.offset // 4 == formats.SEND_WQE
    assert tuple(getattr(nic.Event, n).offset // 4 for n in ("msn", "imm", "len")) == (
        formats.RECV_MSN,
        formats.RECV_IMM,
        formats.RECV_LEN,
    )
    assert (
        nic.QpErrEvent.syndrome.offset // 4,
        nic.QpErrEvent.error.offset // 4,
    ) == (formats.ERR_SYNDROME, formats.ERR_ERROR)
    with pytest.raises(TypeError, match="not a 32-bit word"):
        formats.word(nic.SendEvent, "wr_id")


def test_the_wqe_writer_fills_the_slot_then_publishes():
    memory = bytearray(formats.WQ_SIZE * 3)
    sq = SendQueue(memory, formats.WQ_SIZE)  # the second of three queues
    assert sq.head() == (0, 0)
    wqe = (7, 1 << 40, 0xABC, 64, 5, 100, 0xC0DE, int(nic.wire.Opcode.WRITE_IMM), 1)
    sq.write(nic.SQ_DEPTH + 2, wqe)  # slot 2: the index wraps over the depth
    sq.publish(nic.SQ_DEPTH + 3)
    ring = nic.Wq.from_buffer_copy(memory, formats.WQ_SIZE)
    assert ring.posted == nic.SQ_DEPTH + 3
    got = ring.wqes[2]
    assert tuple(getattr(got, n) for n in formats.WQE_FIELDS) == wqe
    assert bytes(memory[: formats.WQ_SIZE]) == bytes(formats.WQ_SIZE)  # ring 0 untouched
    struct.pack_into("<I", memory, formats.WQ_SIZE + formats.WQ_DONE, 9)  # the NIC's done
    assert (sq.head(), sq.done()) == ((nic.SQ_DEPTH + 3, 9), 9)
    sq.clear()
    assert sq.head() == (0, 0)


def test_the_doorbell_frame_carries_the_kick_after_the_ethernet_header():
    frame = doorbell_frame(0x10005, 1514)
    assert len(frame) == 1514 and frame[:14] == KICK_TEMPLATE[:14]
    kick = nic.Kick.from_buffer_copy(frame, 14)
    assert (kick.qpn, kick.op, kick.arg) == (0x10005, nic.KickOp.SEND, 0)
    data = kick_frame(0x10005)  # BPF_PROG_RUN's: the kick as metadata, then the template
    assert data[ctypes.sizeof(nic.Kick) :] == KICK_TEMPLATE
    assert bytes(nic.Kick.from_buffer_copy(data)) == bytes(kick)


def _imports(path) -> set[str]:
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_applications_reach_the_nic_through_the_driver_only():
    """verbs opens no NicMaps (it holds a driver.views.DeviceMaps), and the
    write workload is an application of verbs: no daemon internals."""
    from pathlib import Path

    import mrc_nic

    root = Path(mrc_nic.__file__).parent
    for path in sorted((root / "verbs").glob("*.py")):
        text = path.read_text()
        assert "NicMaps" not in text and ".maps." not in text, path.name
    used = _imports(root / "workloads" / "rdma_write.py")
    assert not {n for n in used if n.startswith("mrc_nic.transport")}, used
    assert not {n for n in used if n.startswith("mrc_nic.nic")}, used
