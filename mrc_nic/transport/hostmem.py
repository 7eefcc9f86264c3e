"""What each host's daemon owns of the lab-wide NIC resources.

The NIC maps are one set per lab (docs/fastpath.md), so the daemons split
them by host index, with no talk between them:
- memory: host h owns an equal slice of the lab's registered memory (the
  mmapable nic_mr), the lower half for the buffers it sends from, the upper
  half for the regions it receives into;
- memory region ids (nic_regions), send-ring ids (nic_tx_ring / nic_wq) and
  QP numbers come from per-host ranges. A QP number is host << 16 | index,
  and the index ranges of the hosts do not overlap either: a QP receives in
  slot QPN & (max_qps - 1) of nic_rx_qps (bpf/nic_structs.h), which is then its
  index (max_qps is at most 1 << 16), so no two QPs of the lab want one slot.
  The range counts send and receive QPs together (a QP number serves both).
The fixed ids of mrc_nic.testkit.transfer (the daemon-less WRITE of the tests and
benchmarks: ring 0, regions 1 and 2, QP index 1, memory from element 0)
are kept out of every range but memory: do not run it on a lab whose
daemons are writing. Every host's transfer QP receives in slot 1, which
transfer.write frees of an earlier transfer's.
"""

from __future__ import annotations

import dataclasses
import errno

from mrc_nic import nic
from mrc_nic.transport.qp import QpError

RESERVED_RINGS = 1  # ring 0: mrc_nic.testkit.transfer
RESERVED_REGIONS = 3  # region 0 unused, 1 and 2: mrc_nic.testkit.transfer
QP_INDEX_FIRST = 0x100  # below: mrc_nic.testkit.transfer and tests
KIB = nic.MR_ELEM_SIZE


@dataclasses.dataclass
class Span:
    first_elem: int
    n_elems: int


class ElemAllocator:
    """First-fit over a range of nic_mr elements."""

    def __init__(self, first: int, count: int) -> None:
        self.first, self.count = first, count
        self._free = [Span(first, count)] if count else []

    def alloc(self, n_elems: int, what: str, align: int = 1) -> Span:
        """n_elems elements from the first free span that holds them starting
        at a multiple of align (a page of elements: a window a program maps)."""
        for i, span in enumerate(self._free):
            start = -(-span.first_elem // align) * align
            if start + n_elems > span.first_elem + span.n_elems:
                continue
            got = Span(start, n_elems)
            before = Span(span.first_elem, start - span.first_elem)
            after = Span(start + n_elems, span.first_elem + span.n_elems - start - n_elems)
            self._free[i : i + 1] = [s for s in (before, after) if s.n_elems]
            return got
        raise QpError(
            errno.ENOMEM,
            f"no {n_elems * KIB} bytes free for {what} (this host has "
            f"{self.count * KIB} bytes for it, {self.free_elems * KIB} free): "
            "deregister memory first or register less (mrc-nic write: fewer QPs "
            "or a smaller chunk), or give each host more NIC memory in the topology "
            "file ([nic] memory)",
        )

    def release(self, span: Span) -> None:
        self._free.append(Span(span.first_elem, span.n_elems))
        self._free.sort(key=lambda s: s.first_elem)
        merged: list[Span] = []
        for s in self._free:
            if merged and merged[-1].first_elem + merged[-1].n_elems == s.first_elem:
                merged[-1].n_elems += s.n_elems
            else:
                merged.append(s)
        self._free = merged

    @property
    def free_elems(self) -> int:
        return sum(s.n_elems for s in self._free)


class IdPool:
    """Ids from a fixed range, lowest first."""

    def __init__(self, first: int, count: int, what: str) -> None:
        self._free = list(range(first, first + max(0, count)))
        self.what = what
        self.size = max(0, count)

    def take(self) -> int:
        if not self._free:
            raise QpError(errno.ENOSPC, f"no {self.what} left on this host")
        return self._free.pop(0)

    def give(self, value: int) -> None:
        self._free.append(value)
        self._free.sort()


class HostResources:
    """One host's share of the lab's NIC maps."""

    def __init__(self, host: int, hosts: int, mr_elems: int, max_qps: int) -> None:
        self.host = host
        per_host = mr_elems // hosts
        half = half_elems(mr_elems, hosts)
        base = host * per_host
        self.send_mem = ElemAllocator(base, half)
        self.recv_mem = ElemAllocator(base + half, per_host - half)
        rings = (nic.DEFAULT_TX_RINGS - RESERVED_RINGS) // hosts
        regions = (nic.DEFAULT_MAX_REGIONS - RESERVED_REGIONS) // hosts
        self.rings = IdPool(RESERVED_RINGS + host * rings, rings, "send ring (nic_tx_ring)")
        self.regions = IdPool(RESERVED_REGIONS + host * regions, regions, "memory region id")
        qps = (min(max_qps, nic.QPN_INDEX_SPAN) - QP_INDEX_FIRST) // hosts
        if qps < 1:
            raise ValueError(
                f"a lab of {hosts} hosts needs max_qps above {QP_INDEX_FIRST + hosts - 1} "
                f"(QP indices from {QP_INDEX_FIRST:#x}, a range per host), not {max_qps}"
            )
        self.qp_index = IdPool(QP_INDEX_FIRST + host * qps, qps, "QP number")

    def new_qpn(self) -> int:
        return self.host << 16 | self.qp_index.take()

    def free_qpn(self, qpn: int) -> None:
        self.qp_index.give(qpn & 0xFFFF)


def half_elems(mr_elems: int, hosts: int) -> int:
    """Elements of a host's send half (its receive half is the rest of its slice)."""
    return mr_elems // hosts // 2
