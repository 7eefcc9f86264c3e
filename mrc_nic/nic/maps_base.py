"""What every part of NicMaps shares: the pinned maps' fds, mmaps, the program fd."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
from typing import Self

from mrc_nic.kernel import bpfsys, pins, program
from mrc_nic.kernel.pins import MapsMissing, pin_dir
from mrc_nic.nic import auth, wireconst
from mrc_nic.nic.layout import (
    BPF_F_LOCK,
    COUNTERS_MAP,
    CQ_RINGS_MAP,
    CQ_TEMPLATE_MAP,
    DOORBELL_JUMP_MAP,
    DOORBELL_PIN,
    EVS_MAP,
    FANOUT_MAP,
    MAP_PINS,
    MAX_HOSTS,
    MEMS_MAP,
    MPR_MAX,
    MR_ELEM_SIZE,
    MR_MAP,
    PORT_UP_MAP,
    PORTS_MAP,
    PROG_PIN,
    REGIONS_MAP,
    RX_QPS_MAP,
    RX_SLOTS_MAP,
    TX_PORTS_MAP,
    TX_QPS_MAP,
    TX_RING_MAP,
    WQ_MAP,
    EvStateLayout,
    Port,
    RegionLayout,
    RqLayout,
    SqLayout,
    TxRing,
)


def u32_key(value: int) -> bytes:
    return int(value).to_bytes(4, "little")


def mac_bytes(mac: str) -> ctypes.Array:
    raw = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return (ctypes.c_uint8 * 6)(*raw)


def locked_lookup(map_fd: int, key: bytes, value_size: int) -> bytes:
    """The value copied under its bpf_spin_lock (BPF_F_LOCK)."""
    return bpfsys.map_lookup(map_fd, key, value_size, flags=BPF_F_LOCK)


def check_qp_ends(
    qpn: int, *, local_host: int, peer_host: int, peer_qpn: int, mpr: int, psn: int
) -> None:
    """What setup_rq and setup_sq check alike: the QP, both ends, the window, the PSN."""
    pins.check_range("qpn", qpn, wireconst.QPN_MASK)
    pins.check_range("local_host", local_host, MAX_HOSTS - 2)
    pins.check_range("peer_host", peer_host, MAX_HOSTS - 2)
    pins.check_range("peer_qpn", peer_qpn, wireconst.QPN_MASK)
    if not (isinstance(mpr, int) and 1 <= mpr <= MPR_MAX):
        raise ValueError(f"mpr must be an integer in [1, {MPR_MAX}], not {mpr!r}")
    pins.check_range("psn", psn, wireconst.PSN_MASK)


def set_auth_key(value: ctypes.Structure, auth_key: bytes | None) -> None:
    """A QP's 16-byte key (nic/auth.py) into its state (RqLayout, SqLayout): its
    packets then carry a MAC and must get answers that do. None: no MAC."""
    if auth_key is not None:
        value.auth = 1
        value.auth_key[0], value.auth_key[1] = auth.key_words(auth_key)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]  # fmt: skip


def detach(view: mmap.mmap) -> None:
    """Put private zero pages where a writable shared mapping of a BPF map was
    (mmap MAP_FIXED over it): what still points there touches this process's
    memory only. A read-only mapping stays as it is."""
    try:
        anchor = ctypes.c_char.from_buffer(view)
    except (TypeError, ValueError):  # read-only, or closed
        return
    addr = ctypes.addressof(anchor)
    del anchor
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10  # MAP_FIXED
    got = _libc.mmap(addr, len(view), mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if got != addr:
        raise OSError(ctypes.get_errno(), "mmap(MAP_FIXED) over a closed map's pages")


class MapsBase:
    """The pinned maps' fds, the mmaps, the pinned program: what every part of NicMaps uses."""

    def __init__(self, lab: str, fds: dict[str, int]) -> None:
        self.lab = lab
        self._fds = fds
        self.max_regions = bpfsys.map_info(fds[REGIONS_MAP]).max_entries
        self.max_qps = bpfsys.map_info(fds[RX_QPS_MAP]).max_entries
        self.mr_elems = bpfsys.map_info(fds[MR_MAP]).max_entries
        self.tx_rings = bpfsys.map_info(fds[TX_RING_MAP]).max_entries
        self.max_cqs = bpfsys.map_info(fds[CQ_RINGS_MAP]).max_entries
        # A CQ's ring buffer size, bytes: the template's (what create_cq_ring makes).
        self.cq_ring_bytes = bpfsys.map_info(fds[CQ_TEMPLATE_MAP]).max_entries
        self._views: dict[str, mmap.mmap] = {}  # the mmapable maps mapped so far, by name
        # Inner maps mapped so far, by (outer map, index): (map id, mapping).
        self._inner_views: dict[tuple[str, int], tuple[int, mmap.mmap]] = {}
        self._prog_fd: int | None = None
        self._mr_map_id: int | None = None  # nic_mr's id: which regions are the daemons'

    @classmethod
    def open(cls, lab: str) -> Self:
        """Open the pinned NIC maps of a lab (MapsMissing if the lab is not up)."""
        expected = {
            RX_QPS_MAP: ctypes.sizeof(RqLayout),
            RX_SLOTS_MAP: 4,
            MR_MAP: MR_ELEM_SIZE,
            REGIONS_MAP: ctypes.sizeof(RegionLayout),
            PORT_UP_MAP: 4,
            COUNTERS_MAP: 8,
            TX_QPS_MAP: ctypes.sizeof(SqLayout),
            EVS_MAP: ctypes.sizeof(EvStateLayout),
            TX_RING_MAP: ctypes.sizeof(TxRing),
            WQ_MAP: 4,  # an inner map's fd (written) or id (read)
            MEMS_MAP: 4,  # likewise
            PORTS_MAP: ctypes.sizeof(Port),
            TX_PORTS_MAP: 4,
            CQ_RINGS_MAP: 4,  # an inner map's fd (written) or id (read)
            FANOUT_MAP: 4,  # likewise
            DOORBELL_JUMP_MAP: 4,  # a program's fd (written) or id (read)
        }
        sizes = {name: expected.get(name) for name in MAP_PINS}
        fds = program.open_pinned_maps(lab, sizes, "NIC maps")
        try:
            return cls(lab, fds)
        except BaseException:
            program.close_fds(fds)
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        views = [*self._views.values(), *(view for _, view in self._inner_views.values())]
        for view in views:
            # A caller's view (an MR's buffer, a numpy array over it) may outlive
            # this: its pages become private zeros first, so that it can never
            # write into memory the NIC has since given to someone else.
            detach(view)
            with contextlib.suppress(BufferError):  # else unmapped when its views go
                view.close()
        self._views.clear()
        self._inner_views.clear()
        program.close_fds(self._fds)
        if self._prog_fd is not None:
            os.close(self._prog_fd)
            self._prog_fd = None

    def _mapped(
        self, name: str, size: int, prot: int = mmap.PROT_READ | mmap.PROT_WRITE
    ) -> mmap.mmap:
        """The first `size` bytes of the mmapable map `name`, mapped into this
        process (shared with BPF) on the first call; close unmaps them."""
        view = self._views.get(name)
        if view is None:
            view = mmap.mmap(self._fds[name], size, flags=mmap.MAP_SHARED, prot=prot)
            self._views[name] = view
        return view

    # ---- map-in-maps: a map of its own per send queue, per region's memory -----------
    def inner_map_id(self, outer: str, index: int) -> int | None:
        """The id of the map at `index` of the map-in-map `outer`, or None."""
        try:
            raw = bpfsys.map_lookup(self._fds[outer], u32_key(index), 4)
        except FileNotFoundError:
            return None
        return int.from_bytes(raw, "little")

    def inner_map_fd(self, outer: str, index: int) -> int:
        """A new fd of the map at `index` of `outer` (the caller owns it; KeyError
        if there is none)."""
        return self._fd_of(outer, index, self.inner_map_id(outer, index))

    @staticmethod
    def _fd_of(outer: str, index: int, map_id: int | None) -> int:
        try:
            if map_id is not None:
                return bpfsys.map_fd_by_id(map_id)
        except FileNotFoundError:  # replaced and freed since the lookup
            pass
        raise KeyError(f"{outer} has no map at {index}")

    def set_inner_map(self, outer: str, index: int, map_fd: int) -> None:
        """Put the map behind map_fd at `index` of `outer` (the outer map holds it)."""
        bpfsys.map_update(self._fds[outer], u32_key(index), u32_key(map_fd))

    def clear_inner_map(self, outer: str, index: int) -> None:
        """Take the map at `index` out of `outer` (none: nothing to do)."""
        with contextlib.suppress(FileNotFoundError):
            bpfsys.map_delete(self._fds[outer], u32_key(index))

    def _inner_mapped(self, outer: str, index: int, size: int) -> mmap.mmap:
        """The first `size` bytes of the map at `index` of `outer`, mapped into
        this process; kept while that map stays there (KeyError if none)."""
        map_id = self.inner_map_id(outer, index)
        cached = self._inner_views.get((outer, index))
        if cached is not None and cached[0] == map_id:
            return cached[1]
        fd = self._fd_of(outer, index, map_id)  # the map whose id is cached with its view
        try:
            view = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        finally:
            os.close(fd)
        if cached is not None:  # a map the index no longer holds: the old pages go
            detach(cached[1])
            with contextlib.suppress(BufferError):
                cached[1].close()
        self._inner_views[(outer, index)] = (map_id, view)
        return view

    def fd(self, name: str) -> int:
        """The fd of one of the pinned maps (owned by this object)."""
        return self._fds[name]

    def doorbell_program_fd(self) -> int:
        """A new fd of the lab's doorbell program (send kicks only, bpf/nic_xdp.c
        nic_doorbell): what an application kicks with; the caller owns it."""
        path = pin_dir(self.lab) / DOORBELL_PIN
        try:
            return bpfsys.obj_get(path)
        except FileNotFoundError:
            raise MapsMissing(
                errno.ENOENT, f"the doorbell program of lab {self.lab!r} is not pinned", str(path)
            ) from None

    def program_fd(self) -> int:
        """The fd of the lab's pinned NIC program (owned by this object)."""
        if self._prog_fd is None:
            path = pin_dir(self.lab) / PROG_PIN
            try:
                self._prog_fd = bpfsys.obj_get(path)
            except FileNotFoundError:
                raise MapsMissing(
                    errno.ENOENT, f"the NIC program of lab {self.lab!r} is not pinned", str(path)
                ) from None
        return self._prog_fd
