"""Registered memory: the mmapable array nic_mr and the region table nic_regions."""

from __future__ import annotations

import ctypes
import mmap

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic.layout import MAX_HOSTS, MR_ELEM_SIZE, MR_MAP, REGIONS_MAP, RegionLayout
from mrc_nic.nic.maps_base import u32_key


class MemoryMaps:
    """NicMaps' part for registered memory: the mmapable array nic_mr, the region table."""

    def set_region(
        self,
        region: int,
        *,
        first_elem: int,
        n_elems: int,
        rkey: int,
        base_va: int = 0,
        owner: int = 0,
        pd: int = 0,
        remote_write: bool = True,
        head: int = 0,
        tail: int = 0,
    ) -> None:
        """Define region `region` as n_elems elements of nic_mr from first_elem,
        base_va naming the first element's first byte.

        head, tail: bytes of the first and last elements outside the MR (an
        MR at any byte offset, docs/api.md "C programs"): WRITEs and sends
        touch only [base_va + head, base_va + n_elems * MR_ELEM_SIZE - tail).

        owner: host + 1 of an application's MR, which WRITEs reach by its rkey
        (setup_rq's REGION_BY_RKEY); 0 for a region a QP names itself.
        pd: its protection domain (a number of the owner's host; 0: the
        daemon's): only QPs of the same PD write into it (setup_rq pd) or send
        from it (setup_sq pd). remote_write: WRITEs may be placed in it
        (IBV_ACCESS_REMOTE_WRITE)."""
        pins.check_range("region", region, self.max_regions - 1)
        pins.check_range("rkey", rkey, pins.U32_MAX)
        pins.check_range("base_va", base_va, pins.U64_MAX)
        if not (first_elem >= 0 and n_elems >= 1 and first_elem + n_elems <= self.mr_elems):
            raise ValueError(
                f"elements [{first_elem}, {first_elem + n_elems}) do not fit nic_mr "
                f"({self.mr_elems} elements)"
            )
        if head < 0 or tail < 0 or head + tail >= n_elems * MR_ELEM_SIZE:
            raise ValueError(
                f"head {head} and tail {tail} leave no byte of {n_elems} elements to the MR"
            )
        pins.check_range("owner", owner, MAX_HOSTS)
        pins.check_range("pd", pd, pins.U32_MAX)
        value = RegionLayout(base_va=base_va, first_elem=first_elem, n_elems=n_elems, rkey=rkey)
        value.owner, value.pd, value.remote_write = owner, pd, int(bool(remote_write))
        value.head, value.tail = head, tail
        bpfsys.map_update(self._fds[REGIONS_MAP], u32_key(region), bytes(value))

    def zero_region_elems(self, first_elem: int, n_elems: int) -> None:
        """Zero NIC memory elements (a new MR must not show an earlier owner's bytes)."""
        if not (first_elem >= 0 and n_elems >= 0 and first_elem + n_elems <= self.mr_elems):
            raise ValueError(f"elements [{first_elem}, {first_elem + n_elems}) are outside nic_mr")
        start, end = first_elem * MR_ELEM_SIZE, (first_elem + n_elems) * MR_ELEM_SIZE
        self.memory()[start:end] = bytes(end - start)

    def clear_region(self, region: int) -> None:
        """Remove a region: data for QPs that use it is NACKed (remote access error)."""
        pins.check_range("region", region, self.max_regions - 1)
        bpfsys.map_update(self._fds[REGIONS_MAP], u32_key(region), bytes(RegionLayout()))

    def region(self, region: int) -> RegionLayout:
        pins.check_range("region", region, self.max_regions - 1)
        raw = bpfsys.map_lookup(
            self._fds[REGIONS_MAP], u32_key(region), ctypes.sizeof(RegionLayout)
        )
        return RegionLayout.from_buffer_copy(raw)

    def memory(self) -> mmap.mmap:
        """nic_mr mapped into this process: every region of the lab, shared with BPF."""
        return self._mapped(MR_MAP, self.mr_elems * MR_ELEM_SIZE)

    def memory_window(self, start: int, length: int) -> tuple[mmap.mmap, memoryview]:
        """Bytes [start, start + length) of nic_mr in a mapping of their own (the
        whole pages around them) and a view of exactly them. The mapping is the
        caller's: closing it fails (BufferError) while a view of it is alive."""
        if not (start >= 0 and length >= 1 and start + length <= self.mr_elems * MR_ELEM_SIZE):
            raise ValueError(f"bytes [{start}, {start + length}) are outside nic_mr")
        page = mmap.PAGESIZE
        first, end = start - start % page, -(-(start + length) // page) * page
        mapping = mmap.mmap(
            self._fds[MR_MAP], end - first, flags=mmap.MAP_SHARED,
            prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=first,
        )  # fmt: skip
        return mapping, memoryview(mapping)[start - first : start - first + length]

    def _span(self, region: int, offset: int, length: int) -> int:
        layout = self.region(region)
        size = layout.n_elems * MR_ELEM_SIZE
        if layout.n_elems == 0:
            raise KeyError(f"region {region} is not defined")
        if not (offset >= 0 and length >= 0 and offset + length <= size):
            raise ValueError(f"bytes [{offset}, {offset + length}) are outside region {region}")
        return layout.first_elem * MR_ELEM_SIZE + offset

    def read_region(self, region: int, offset: int, length: int) -> bytes:
        """length bytes of a region from byte offset (offset 0 = its base_va)."""
        start = self._span(region, offset, length)
        return self.memory()[start : start + length]

    def write_region(self, region: int, offset: int, data: bytes) -> None:
        """Write bytes into a region at byte offset (offset 0 = its base_va)."""
        start = self._span(region, offset, len(data))
        self.memory()[start : start + len(data)] = data
