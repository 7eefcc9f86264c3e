"""The lab's event log (python -m mrc_nic.observe.eventlog LAB events).

`mrc-nic up` starts one per lab, next to the host daemons; `down` ends it.
It is the one consumer of the NIC's event ring buffer (nic_events, shared by
every host of the lab: a ring buffer has one consumer position), and the
place where the CLI and the daemons post what BPF cannot see: faults put in
force and healed, QPs put in ERR by a daemon. `mrc-nic events [--follow]`
reads it.

Each event gets a sequence number (1, 2, ...) and a wall-clock time. The log
keeps the last QUEUE_MAX events; a reader asks for those after the last
sequence number it saw, and is told exactly how many it missed:
- `evicted`: events it asked for that the log no longer holds (the gap
  between its `since` and the oldest event kept);
- `nic_lost`: records the NIC could not write because the ring buffer was
  full (the NIC's EVENTS_LOST counter, since the log started).
Completions (NIC_EV_RECV_IMM, NIC_EV_SEND_DONE) and per-PSN losses are kept
as well; `types` filters them out for a reader that wants state changes only.

Control socket: /run/mrc-nic/<lab>/events.sock (mrc_nic.lab.client's protocol),
its operations declared in mrc_nic.contract.eventops: `read` (wait > 0: answer
when an event arrives or after that many seconds, a long poll), `post`,
`ping`. client.post_event is the posting client.
"""

from __future__ import annotations

import collections
import errno
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass

from mrc_nic import nic
from mrc_nic.abi.nic_const_defs import NIC_QPN_HOST_SHIFT
from mrc_nic.contract import eventops
from mrc_nic.contract.eventops import POSTED_TYPES, READ_BYTES_MAX, READ_MAX
from mrc_nic.lab import client, state
from mrc_nic.lab.service import Conn, LineService

SERVICE = client.EVENTS_SERVICE  # its socket: client.socket_path(lab, SERVICE)
QUEUE_MAX = 65536
PLANES_KEPT = 65536  # (QP, EV) -> plane entries remembered
WAIT_MAX_S = 30.0

NIC_TYPES = {
    nic.EventType.RECV_IMM: "recv_imm",
    nic.EventType.EV_STATE: "ev_state",
    nic.EventType.LOSS: "loss",
    nic.EventType.QP_ERR: "qp_err",
    nic.EventType.SEND_DONE: "send_done",
}


@dataclass(eq=False)
class Waiter:
    conn: Conn
    since: int
    types: set[str] | None
    limit: int
    until: float


class EventLog(LineService):
    operations = eventops.OPS
    tick_s = 0.01  # the ring buffer's fd wakes the loop; the tick answers long polls

    def __init__(self, lab: str) -> None:
        super().__init__(client.socket_path(lab, SERVICE))
        _, self.topo = state.open_lab(lab)
        self.hosts = {
            node.index: name for name, node in self.topo.nodes.items() if not node.is_switch
        }
        self.maps = nic.NicMaps.open(lab)
        self.reader = self.maps.events()
        self.log: collections.deque[dict] = collections.deque(maxlen=QUEUE_MAX)
        self.seq = 0
        self.lost_at_start = self.maps.counter(nic.Counter.EVENTS_LOST)
        # bpf_ktime_get_ns() is CLOCK_MONOTONIC: this turns it into wall-clock time.
        self.wall_minus_mono = time.time() - time.monotonic()
        self.waiters: list[Waiter] = []
        # (qpn, ev) -> plane, of EVs an ev_state record named: the plane is
        # in the EV's map entry, not in the NIC's record; kept because a
        # replaced EV's entry is deleted a few ms after the swap.
        self.planes: dict[tuple[int, int], int] = {}
        self.watch(self.reader, self.drain)

    def close(self) -> None:
        self.reader.close()
        self.maps.close()

    # ---- events in ---------------------------------------------------------------
    def drain(self) -> None:
        for record in self.reader.read():
            self.add(self.from_nic(record))

    def from_nic(self, record: nic.AnyEvent) -> dict:
        fields = record.as_dict()
        kind = NIC_TYPES.get(fields.pop("type"), "unknown")
        ts = fields.pop("ts")
        event = {"type": kind, "time": ts / 1e9 + self.wall_minus_mono, "source": "nic"}
        qpn = fields.get("qpn", 0)
        event["host"] = self.hosts.get(qpn >> NIC_QPN_HOST_SHIFT)
        for key in ("old_state", "new_state"):
            if key in fields:
                fields[key] = _name(nic.EvState, fields[key])
        if "cause" in fields:
            fields["cause"] = _name(nic.EvCause, fields["cause"])
        if kind == "ev_state":
            event["plane"] = self.plane_of(qpn, fields["ev"])
        return event | fields

    def plane_of(self, qpn: int, ev: int) -> int | None:
        """The plane of a send QP's EV (None once its state is gone, unseen)."""
        key = (qpn, ev)
        if key not in self.planes:
            try:
                self.planes[key] = self.maps.ev_raw(qpn, ev).plane
            except KeyError:
                return None
            if len(self.planes) > PLANES_KEPT:  # QPs come and go: forget the oldest
                del self.planes[next(iter(self.planes))]
        return self.planes[key]

    def add(self, event: dict) -> int:
        self.seq += 1
        event["seq"] = self.seq
        self.log.append(event)
        return self.seq

    # ---- the loop ------------------------------------------------------------------
    def tick(self, now: float) -> None:
        if not self.waiters:
            return
        self.drain()
        for w in list(self.waiters):
            reply = self.read(w.since, w.types, w.limit)
            if reply.events or now >= w.until:
                self.waiters.remove(w)
                self.reply(w.conn, reply)

    def on_drop(self, conn: Conn) -> None:
        self.waiters = [w for w in self.waiters if w.conn is not conn]

    # ---- requests ----------------------------------------------------------------
    def read(self, since: int, types: set[str] | None, limit: int) -> eventops.ReadReply:
        """Events after `since` (of these types), at most `limit` and about
        READ_BYTES_MAX of them as JSON; `next` is the sequence number to ask
        from next time."""
        oldest = self.log[0]["seq"] if self.log else self.seq + 1
        evicted = max(0, oldest - since - 1)
        out, last, room = [], self.seq, READ_BYTES_MAX
        # Sequence numbers are contiguous in the log: skip to the first one wanted.
        for event in itertools.islice(self.log, max(0, since + 1 - oldest), None):
            if types is None or event["type"] in types:
                size = len(json.dumps(event)) + 2
                if out and size > room:  # the rest in the next reply
                    last = event["seq"] - 1
                    break
                room -= size
                out.append(event)
                if len(out) >= limit:
                    last = event["seq"]
                    break
        lost = self.maps.counter(nic.Counter.EVENTS_LOST) - self.lost_at_start
        return eventops.ReadReply(events=out, next=last, evicted=evicted, nic_lost=lost)

    def op_read(self, req: eventops.Read, conn: Conn) -> eventops.ReadReply | None:
        types = set(req.types) if req.types else None
        limit = max(1, min(req.max, READ_MAX))
        wait = min(req.wait, WAIT_MAX_S)
        self.drain()
        reply = self.read(req.since, types, limit)
        if reply.events or wait <= 0:
            return reply
        self.waiters.append(Waiter(conn, reply.next, types, limit, time.monotonic() + wait))
        return None

    def op_post(self, req: eventops.Post, conn: Conn) -> eventops.PostReply:
        if req.event.get("type") not in POSTED_TYPES:
            raise client.RequestError(
                errno.EINVAL, f"event must be an object with type one of {', '.join(POSTED_TYPES)}"
            )
        # What the NIC recorded before this post gets its numbers first, and
        # an event posted without a time gets the time it is numbered at: a
        # fault posted just before it is applied then comes after everything
        # that happened before it and before everything it causes, in
        # sequence numbers and in time alike.
        self.drain()
        event = dict(req.event, source=req.source)
        event.setdefault("time", time.time())
        return eventops.PostReply(seq=self.add(event))

    def op_ping(self, req: eventops.Ping, conn: Conn) -> eventops.PingReply:
        return eventops.PingReply(pid=os.getpid(), seq=self.seq)


def _name(kind: type, value: int) -> str | int:
    try:
        return kind(value).name
    except ValueError:
        return value


def main(argv: list[str]) -> int:
    lab = argv[0]
    log = EventLog(lab)
    log.serve_until_signalled()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
