"""The event log's operations (mrc_nic.observe.eventlog serves them).

Declared here, in the lab package, because the lab's lower layers post
events (fault injection, the daemons: mrc_nic.lab.client.post_event) and may not
import the observe package that runs the log.
"""

from __future__ import annotations

from mrc_nic.contract import framing
from mrc_nic.contract.framing import Reply, Request, arg, op, reply

READ_MAX = 10_000  # events one reply carries, at most
# ... and at most this many bytes of them: a reply is one line, and a line
# over framing.MAX_LINE is refused (10,000 events of about 250 bytes were).
READ_BYTES_MAX = framing.MAX_LINE // 2
POSTED_TYPES = (
    "fault",
    "heal",
    "qp_error",
    "ev_replaced",
    "reverse_ev_state",  # a receive QP's reverse EV went bad or came back (transport.reverse)
    "reverse_ev_replaced",
    "note",
)


@reply
class ReadReply(Reply):
    events: list[dict] = arg("the events, oldest first")
    next: int = arg("the sequence number to read from next time")
    evicted: int = arg("events after `since` that left the log before this read")
    nic_lost: int = arg("records the NIC could not write (ring full) since the log started")


@op("read")
class Read(Request[ReadReply]):
    """Events after a sequence number; with `wait`, a long poll."""

    since: int = arg("the last sequence number seen", 0)
    types: list[str] | None = arg("only events of these types (all when null or empty)", None)
    max: int = arg(
        f"at most this many events (1..{READ_MAX}), and at most READ_BYTES_MAX bytes of "
        "them: read on from `next` until a reply is empty",
        READ_MAX,
    )
    wait: float = arg("seconds to wait for an event when none is there (at most 30)", 0.0)


@reply
class PostReply(Reply):
    seq: int = arg("the event's sequence number")


@op("post")
class Post(Request[PostReply]):
    """Record an event that BPF cannot see (a fault, a heal, a QP put in ERR)."""

    event: dict = arg(f"the event; its `type` one of {', '.join(POSTED_TYPES)}")
    source: str = arg("who posted it", "cli")


@reply
class PingReply(framing.PingReply):
    seq: int = arg("the last sequence number given")


@op("ping")
class Ping(framing.Ping, Request[PingReply]):
    """Is the event log there, and where is it?"""


OPS = framing.Ops("events", [Read, Post, Ping])
