"""Registered memory: the region table nic_regions and each region's memory (nic_mems).

A region's memory is the map at its index of nic_mems: the lab's shared
array nic_mr for the daemons' regions (the region a slice of it from
first_elem), or a map of its own for an application's MR (first_elem 0),
whose fd only the session that registered it gets (docs/api.md, "Isolation").
"""

from __future__ import annotations

import ctypes
import mmap

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic.layout import (
    MAX_HOSTS,
    MEMS_MAP,
    MR_ELEM_SIZE,
    MR_MAP,
    REGIONS_MAP,
    RegionLayout,
)
from mrc_nic.nic.maps_base import u32_key


def create_region_memory(n_elems: int) -> int:
    """The memory of an application's MR: a new BPF array of n_elems elements,
    mmapable; its fd (the caller owns it). The kernel zeroes it."""
    if not (isinstance(n_elems, int) and n_elems >= 1):
        raise ValueError(f"a region has at least one element, not {n_elems!r}")
    flags = bpfsys.BPF_F_MMAPABLE | bpfsys.BPF_F_INNER_MAP
    return bpfsys.map_create(
        bpfsys.BPF_MAP_TYPE_ARRAY, 4, MR_ELEM_SIZE, n_elems, flags=flags, name="mrc_mr"
    )


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
        memory_fd: int | None = None,
    ) -> None:
        """Define region `region` as n_elems elements of its memory from
        first_elem, base_va naming the first element's first byte. memory_fd:
        a map of its own (create_region_memory), which nic_mems then holds;
        None: nic_mr, the daemons' shared memory.

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
        if memory_fd is None:
            memory_fd, capacity, where = self._fds[MR_MAP], self.mr_elems, "nic_mr"
        else:
            capacity, where = bpfsys.map_info(memory_fd).max_entries, f"map fd {memory_fd}"
        if not (first_elem >= 0 and n_elems >= 1 and first_elem + n_elems <= capacity):
            raise ValueError(
                f"elements [{first_elem}, {first_elem + n_elems}) do not fit {where} "
                f"({capacity} elements)"
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
        self.set_inner_map(MEMS_MAP, region, memory_fd)  # the memory before the region
        bpfsys.map_update(self._fds[REGIONS_MAP], u32_key(region), bytes(value))

    def zero_region_elems(self, first_elem: int, n_elems: int) -> None:
        """Zero NIC memory elements (a new MR must not show an earlier owner's bytes)."""
        if not (first_elem >= 0 and n_elems >= 0 and first_elem + n_elems <= self.mr_elems):
            raise ValueError(f"elements [{first_elem}, {first_elem + n_elems}) are outside nic_mr")
        start, end = first_elem * MR_ELEM_SIZE, (first_elem + n_elems) * MR_ELEM_SIZE
        self.memory()[start:end] = bytes(end - start)

    def new_region_memory(self, n_elems: int) -> int:
        """The memory of an application's MR (create_region_memory): its fd."""
        return create_region_memory(n_elems)

    def clear_region(self, region: int) -> None:
        """Remove a region: data for QPs that use it is NACKed (remote access error)."""
        pins.check_range("region", region, self.max_regions - 1)
        bpfsys.map_update(self._fds[REGIONS_MAP], u32_key(region), bytes(RegionLayout()))
        self.clear_inner_map(MEMS_MAP, region)  # an application's memory: the NIC's no more

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

    def _span(self, region: int, offset: int, length: int) -> tuple[mmap.mmap, int]:
        """The mapped memory of a region and where [offset, offset + length) of it is."""
        layout = self.region(region)
        size = layout.n_elems * MR_ELEM_SIZE
        if layout.n_elems == 0:
            raise KeyError(f"region {region} is not defined")
        if not (offset >= 0 and length >= 0 and offset + length <= size):
            raise ValueError(f"bytes [{offset}, {offset + length}) are outside region {region}")
        return self._region_memory(region, layout), layout.first_elem * MR_ELEM_SIZE + offset

    def _region_memory(self, region: int, layout: RegionLayout) -> mmap.mmap:
        if self.inner_map_id(MEMS_MAP, region) == self._mr_id():
            return self.memory()
        return self._inner_mapped(MEMS_MAP, region, layout.n_elems * MR_ELEM_SIZE)

    def _mr_id(self) -> int:
        if self._mr_map_id is None:
            self._mr_map_id = bpfsys.map_info(self._fds[MR_MAP]).id
        return self._mr_map_id

    def read_region(self, region: int, offset: int, length: int) -> bytes:
        """length bytes of a region from byte offset (offset 0 = its base_va)."""
        memory, start = self._span(region, offset, length)
        return memory[start : start + length]

    def write_region(self, region: int, offset: int, data: bytes) -> None:
        """Write bytes into a region at byte offset (offset 0 = its base_va)."""
        memory, start = self._span(region, offset, len(data))
        memory[start : start + len(data)] = data
