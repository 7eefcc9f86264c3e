"""The event ring buffer nic_events (and the CQs' rings) read without bcc, and the
record layouts."""

from __future__ import annotations

import ctypes
import mmap
import os
import select
import struct
from collections.abc import Callable, Iterator

from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys
from mrc_nic.nic.layout import BPF_MAP_TYPE_RINGBUF, EventType


class _Record:
    """A record of the ring buffer nic_events: 40 bytes, type and qpn first, ts last."""

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name, *_ in self._fields_ if name != "reserved"}


class Event(defs.NicEvent, _Record):
    """struct nic_event: one record of the ring buffer nic_events (NIC_EV_RECV_IMM)."""


class EvEvent(defs.NicEvEvent, _Record):
    """struct nic_ev_event: an EV changed state (NIC_EV_EV_STATE)."""


class LossEvent(defs.NicLossEvent, _Record):
    """struct nic_loss_event: a PSN declared lost and queued (NIC_EV_LOSS)."""


class QpErrEvent(defs.NicQpErrEvent, _Record):
    """struct nic_qp_err_event: a send QP went to ERR on a fatal NACK (NIC_EV_QP_ERR)."""


class SendEvent(defs.NicSendEvent, _Record):
    """struct nic_send_event: a WQE completed, every packet acknowledged (NIC_EV_SEND_DONE)."""


AnyEvent = Event | EvEvent | LossEvent | QpErrEvent | SendEvent
# Event type -> record layout; every record is ctypes.sizeof(Event) bytes.
EVENT_LAYOUTS: dict[int, type[ctypes.Structure]] = {
    EventType.RECV_IMM: Event,
    EventType.EV_STATE: EvEvent,
    EventType.LOSS: LossEvent,
    EventType.QP_ERR: QpErrEvent,
    EventType.SEND_DONE: SendEvent,
}


_RINGBUF_BUSY = 1 << 31
_RINGBUF_DISCARD = 1 << 30
_RINGBUF_HDR = 8
_RECORD = ctypes.sizeof(Event)  # every event record's size
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")  # the ring's header and positions


class EventReader:
    """Consumer of the ring buffer nic_events, or of a CQ's ring (any BPF ring
    buffer fd: NicMaps.create_cq_ring), by mmap (as libbpf's ring_buffer does).
    fileno() is the ring's fd, for select, poll, epoll and asyncio.

    Layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position (the
    reader writes it), page 1 the producer position, and the data pages
    follow, mapped twice in a row so that a record never wraps. Each ring
    record has an 8-byte header: length | BUSY | DISCARD bits, then the page
    offset. A ring record holds one event record or, in a CQ's ring, a batch
    of them back to back (the completions of one packet or engine run).
    """

    def __init__(self, map_fd: int) -> None:
        info = bpfsys.map_info(map_fd)
        if info.type != BPF_MAP_TYPE_RINGBUF:
            raise ValueError(f"map fd {map_fd} is not a ring buffer (type {info.type})")
        self._fd = os.dup(map_fd)
        self._poller = select.poll()  # made once: a wait per completion (a ping-pong) costs less
        self._poller.register(self._fd, select.POLLIN)
        self._size = info.max_entries
        page = mmap.PAGESIZE
        self._page = page
        self._cons = mmap.mmap(
            self._fd, page, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
        self._prod = mmap.mmap(
            self._fd,
            page + 2 * self._size,
            flags=mmap.MAP_SHARED,
            prot=mmap.PROT_READ,
            offset=page,
        )

    def close(self) -> None:
        self._cons.close()
        self._prod.close()
        os.close(self._fd)

    def __enter__(self) -> EventReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fileno(self) -> int:
        """The ring buffer's fd: readable (poll, select) when records are there."""
        return self._fd

    def wait(self, timeout: float | None) -> bool:
        """Wait up to timeout seconds (None: for ever) for data; True if some is there."""
        return bool(self._poller.poll(None if timeout is None else int(timeout * 1000)))

    def read(self) -> list[AnyEvent]:
        """Every complete record available now, oldest first; consumes them.

        Each record is decoded by its type (EVENT_LAYOUTS): Event for a
        completion, EvEvent, LossEvent, QpErrEvent; an unknown type as Event.
        """
        events: list[AnyEvent] = []

        def decode(data: mmap.mmap, off: int) -> None:
            record = data[off : off + _RECORD]
            layout = EVENT_LAYOUTS.get(int.from_bytes(record[:4], "little"), Event)
            events.append(layout.from_buffer_copy(record))

        self.consume(decode)
        return events

    def read_unpacked(self, layout: struct.Struct) -> list[tuple]:
        """The same records as tuples of `layout` (a CQ's hot path: no ctypes
        objects, no call per record, nothing sliced)."""
        if _U64.unpack_from(self._cons)[0] >= _U64.unpack_from(self._prod)[0]:
            return []  # an empty poll: two loads
        out: list[tuple] = []
        data, unpack = self._prod, layout.unpack_from
        for start, end in self._spans():
            out.extend(unpack(data, off) for off in range(start, end, _RECORD))
        return out

    def consume(self, handle: Callable[[mmap.mmap, int], None]) -> None:
        """handle(data, offset) for every event record available now, oldest
        first (several per ring record in a CQ's batches); consumes them."""
        data = self._prod
        for start, end in self._spans():
            for off in range(start, end, _RECORD):
                handle(data, off)

    def _spans(self) -> Iterator[tuple[int, int]]:
        """The event records' offsets of each complete ring record, oldest first
        (range(start, end, _RECORD)); a ring record is consumed when the caller
        asks for the next one."""
        cons, prod = _U64.unpack_from(self._cons)[0], _U64.unpack_from(self._prod)[0]
        data, mask, page = self._prod, self._size - 1, self._page
        while cons < prod:
            at = page + (cons & mask)
            header = _U32.unpack_from(data, at)[0]
            if header & _RINGBUF_BUSY:
                return  # being written
            length = header & ~(_RINGBUF_BUSY | _RINGBUF_DISCARD)
            if not header & _RINGBUF_DISCARD:
                start = at + _RINGBUF_HDR
                yield start, start + length - _RECORD + 1
            cons += (length + _RINGBUF_HDR + 7) & ~7
            _U64.pack_into(self._cons, 0, cons)
