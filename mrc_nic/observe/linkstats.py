"""Kernel link state and counters of every interface of a lab, cheaply and often.

`stats --format jsonl --interval 0.1` reads every namespace several times a
second. pyroute2 (Fabric.link_info) decodes every attribute of every
message, about 2 ms of CPU per namespace: 29 ms per read of the default
lab, 29% of a core at 10 Hz. This reader keeps one rtnetlink socket per
namespace open (made inside it with setns, so no namespace is entered again
later), and decodes only what it reports.

What it asks the kernel for is small, too. A link dump (RTM_GETLINK) builds
some fifty attributes per interface, IPv6 settings and all: in clos-8's 56
namespaces, a third of the cost of a read in the kernel alone. So the link
dump is taken once, when a namespace is first read; the socket is then a
member of the namespace's link notification group (RTNLGRP_LINK), and the
kernel sends an RTM_NEWLINK with an interface's full state each time its
flags, carrier or operstate change (veth carrier events are urgent for
linkwatch, sent at once). Each read then asks for the counters only
(RTM_GETSTATS with IFLA_STATS_LINK_64: the same dev_get_stats numbers the
link dump holds) and the root qdiscs' drops (RTM_GETQDISC), and applies the
notifications queued before the replies, in order: the state it reports is
the last the kernel announced. If notifications were lost (the socket's
queue overflowed: ENOBUFS), or the counters name an interface it has not
heard of, it takes the link dump again.

It returns the same keys as Fabric.link_info, which the snapshot schema
documents (docs/stats-schema.md), in read-only records (jsonenc.Frozen): an
interface whose numbers did not change since the previous read keeps its
record, the same object, which a stream then does not encode again.
"""

from __future__ import annotations

import errno
import socket
import struct

from mrc_nic.kernel import netns
from mrc_nic.observe.jsonenc import Frozen

NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
RTM_NEWSTATS, RTM_GETSTATS = 92, 94
RTNLGRP_LINK = 1
IFF_UP = 0x1
IFLA_IFNAME, IFLA_OPERSTATE, IFLA_STATS64, IFLA_CARRIER = 3, 16, 23, 33
IFLA_STATS_LINK_64 = 1
TCA_STATS = 3
TC_H_ROOT = 0xFFFFFFFF
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_TCMSG = struct.Struct("=BxxxiIII")
_IF_STATS_MSG = struct.Struct("=BxxxiI")  # family, pad, ifindex, filter_mask
_RTATTR = struct.Struct("=HH")
# struct rtnl_link_stats64: rx_packets, tx_packets, rx_bytes, tx_bytes,
# rx_errors, tx_errors, rx_dropped, tx_dropped (the first 8 of its u64s).
_STATS64_HEAD = struct.Struct("=8Q")
# An if_stats_msg holding IFLA_STATS_LINK_64 alone: the attribute's header
# (length, type) comes right after the message's 12 bytes.
_STATS_ATTR_AT = _IF_STATS_MSG.size
# struct tc_stats: bytes (u64), packets, drops (u32), ...
_TC_STATS_HEAD = struct.Struct("=QII")
_RECV_SIZE = 1 << 16
_RCVBUF = 1 << 20  # room for bursts of link notifications (a flap fault) between reads


def _attrs(buf: bytes, start: int, end: int, wanted: frozenset[int]) -> dict[int, bytes]:
    """{type: payload} of the wanted rtattrs in buf[start:end]; the rest are
    skipped by length (a veth's RTM_NEWLINK holds about forty), and the walk
    ends once every wanted one is found."""
    found = {}
    unpack = _RTATTR.unpack_from
    every = len(wanted)
    while start + 4 <= end:
        length, kind = unpack(buf, start)
        if length < 4:
            break
        kind &= 0x3FFF  # strip the NESTED and BYTEORDER bits
        if kind in wanted:
            found[kind] = buf[start + 4 : start + length]
            if len(found) == every:
                break
        start += (length + 3) & ~3
    return found


_LINK_ATTRS = frozenset({IFLA_IFNAME, IFLA_OPERSTATE, IFLA_CARRIER})
_QDISC_ATTRS = frozenset({TCA_STATS})
# The keys of an interface's record, as Fabric.link_info has them.
_KEYS = (
    "admin_up",
    "carrier",
    "operstate",
    "rx_packets",
    "rx_bytes",
    "tx_packets",
    "tx_bytes",
    "rx_dropped",
    "tx_dropped",
    "queue_drops",
)
_NO_STATS = (0,) * 8


class _Namespace:
    """The socket of one namespace and what its notifications said:
    {ifindex: (name, admin_up, carrier, operstate)}."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.links: dict[int, tuple[str, bool, bool, str | None]] = {}
        self.stale = True  # the link dump is (again) needed
        self.last: dict[str, Frozen] = {}  # the previous read's records, by name
        # The previous read's root queues: {ifname: (bytes, packets, drops)}.
        self.queues: dict[str, tuple[int, int, int]] = {}


class LinkStatsReader:
    """One rtnetlink socket per namespace of a lab, kept open between reads."""

    def __init__(self, netns_names: dict[str, str]) -> None:
        """netns_names: {node: namespace name}."""
        self._spaces: dict[str, _Namespace] = {}
        self._netns = netns_names
        self._seq = 0

    def __enter__(self) -> LinkStatsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for space in self._spaces.values():
            space.sock.close()
        self._spaces.clear()

    def _space(self, node: str) -> _Namespace:
        space = self._spaces.get(node)
        if space is None:
            # A socket belongs to the namespace it was created in, for good.
            with netns.entered(self._netns[node]):
                sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
            try:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, 33, _RCVBUF)  # SO_RCVBUFFORCE (root)
                except OSError:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
                # Member of the link group before the first dump: no change is missed.
                sock.bind((0, 1 << (RTNLGRP_LINK - 1)))
            except BaseException:
                sock.close()
                raise
            space = self._spaces[node] = _Namespace(sock)
        return space

    def _request(self, sock: socket.socket, msg_type: int, body: bytes) -> int:
        self._seq += 1
        header = _NLMSGHDR.pack(
            _NLMSGHDR.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP, self._seq, 0
        )
        sock.send(header + body)
        return self._seq

    def _replies(self, space: _Namespace, seq: int, want: int, links: dict | None = None):
        """(buf, body offset, end) of each message of the dump numbered seq; link
        notifications met on the way are applied, in order, to links (default:
        space.links)."""
        sock = space.sock
        if links is None:
            links = space.links
        while True:
            try:
                buf = sock.recv(_RECV_SIZE)
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                space.stale = True  # notifications were dropped: dump the links again
                continue
            at = 0
            while at + _NLMSGHDR.size <= len(buf):
                length, kind, _, msg_seq, _ = _NLMSGHDR.unpack_from(buf, at)
                if length < _NLMSGHDR.size:
                    return
                end = min(at + length, len(buf))
                if msg_seq == seq:
                    if kind == NLMSG_DONE:
                        return
                    if kind == NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", buf, at + _NLMSGHDR.size)
                        raise OSError(-code, f"rtnetlink dump failed: error {-code}")
                    if kind == want:
                        yield buf, at + _NLMSGHDR.size, end
                elif msg_seq == 0 and kind in (RTM_NEWLINK, RTM_DELLINK):
                    _apply_link(links, kind, buf, at + _NLMSGHDR.size, end)
                at += (length + 3) & ~3

    def _dump_links(self, space: _Namespace) -> None:
        """Every interface's name and state, from a link dump. Notifications
        queued among its messages are applied between them, in the order the
        kernel queued them: the later word on an interface wins."""
        space.stale = False
        links: dict[int, tuple[str, bool, bool, str | None]] = {}
        seq = self._request(space.sock, RTM_GETLINK, _IFINFOMSG.pack(0, 0, 0, 0, 0))
        for buf, body, end in self._replies(space, seq, RTM_NEWLINK, links):
            _apply_link(links, RTM_NEWLINK, buf, body, end)
        space.links = links

    def _stats(self, space: _Namespace) -> dict[int, tuple[int, ...]]:
        """{ifindex: the first 8 counters of rtnl_link_stats64}."""
        body = _IF_STATS_MSG.pack(0, 0, 1 << (IFLA_STATS_LINK_64 - 1))
        seq = self._request(space.sock, RTM_GETSTATS, body)
        stats = {}
        for buf, body, end in self._replies(space, seq, RTM_NEWSTATS):
            _, ifindex, _ = _IF_STATS_MSG.unpack_from(buf, body)
            at = body + _STATS_ATTR_AT
            length, kind = _RTATTR.unpack_from(buf, at) if at + 4 <= end else (0, 0)
            if kind & 0x3FFF != IFLA_STATS_LINK_64 or length < 4 + _STATS64_HEAD.size:
                attrs = _attrs(buf, at, end, frozenset({IFLA_STATS_LINK_64}))
                raw = attrs.get(IFLA_STATS_LINK_64, b"")
                stats[ifindex] = (
                    _STATS64_HEAD.unpack_from(raw) if len(raw) >= _STATS64_HEAD.size else None
                )
                continue
            stats[ifindex] = _STATS64_HEAD.unpack_from(buf, at + 4)
        return stats

    def _queue_stats(self, space: _Namespace) -> dict[int, tuple[int, int, int]]:
        """{ifindex: (bytes, packets, drops) of its root qdisc}."""
        seq = self._request(space.sock, RTM_GETQDISC, _TCMSG.pack(0, 0, 0, 0, 0))
        queues: dict[int, tuple[int, int, int]] = {}
        for buf, body, end in self._replies(space, seq, RTM_NEWQDISC):
            _, ifindex, _, parent, _ = _TCMSG.unpack_from(buf, body)
            if parent != TC_H_ROOT:
                continue
            stats = _attrs(buf, body + _TCMSG.size, end, _QDISC_ATTRS).get(TCA_STATS)
            if stats is not None and len(stats) >= _TC_STATS_HEAD.size:
                queues[ifindex] = _TC_STATS_HEAD.unpack_from(stats)
        return queues

    def read(self, node: str) -> dict[str, dict]:
        """{ifname: state and counters} of every interface but lo in node's namespace."""
        space = self._space(node)
        if space.stale:
            self._dump_links(space)
        stats = self._stats(space)
        queue_stats = self._queue_stats(space)
        if space.stale or not stats.keys() <= space.links.keys():
            # Notifications lost, or an interface we were not told about: start over.
            self._dump_links(space)
            stats = self._stats(space)
        before = space.last
        info = {}
        for index, (name, admin_up, carrier, operstate) in space.links.items():
            if name == "lo":
                continue
            c = stats.get(index) or _NO_STATS
            values = (
                admin_up,
                carrier,
                operstate,
                c[0],
                c[2],
                c[1],
                c[3],
                c[6],
                c[7],
                queue_stats.get(index, (0, 0, 0))[2],
            )
            same = before.get(name)
            if same is not None and tuple(same.values()) == values:
                info[name] = same  # unchanged: the same record (see jsonenc)
            else:
                info[name] = Frozen(zip(_KEYS, values, strict=True))
        space.last = info
        space.queues = {
            space.links[index][0]: q for index, q in queue_stats.items() if index in space.links
        }
        return info

    def queues(self, node: str) -> dict[str, tuple[int, int, int]]:
        """{ifname: (bytes, packets, drops)} of each root qdisc (the TBFs) in
        node's namespace, as of the last read(node): bytes and packets are
        what the queue sent, which its rate limits."""
        space = self._spaces.get(node)
        return dict(space.queues) if space is not None else {}

    def read_all(self) -> dict[str, dict[str, dict]]:
        """{node: read(node)} for every namespace of the lab."""
        return {node: self.read(node) for node in self._netns}


def _apply_link(links: dict, kind: int, buf: bytes, body: int, end: int) -> None:
    """Record (or forget, RTM_DELLINK) one interface from an RTM_NEWLINK message."""
    _, _, index, flags, _ = _IFINFOMSG.unpack_from(buf, body)
    if kind == RTM_DELLINK:
        links.pop(index, None)
        return
    attrs = _attrs(buf, body + _IFINFOMSG.size, end, _LINK_ATTRS)
    name = attrs.get(IFLA_IFNAME, b"").rstrip(b"\0").decode()
    oper = attrs.get(IFLA_OPERSTATE)
    carrier = attrs.get(IFLA_CARRIER)
    links[index] = (
        name,
        bool(flags & IFF_UP),
        bool(carrier[0]) if carrier is not None else False,
        _operstate(oper[0]) if oper is not None else None,
    )


def _operstate(value: int) -> str:
    return OPERSTATES[value] if value < len(OPERSTATES) else str(value)
