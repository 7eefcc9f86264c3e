"""Protection domains and memory regions (ibv_alloc_pd, ibv_reg_mr).

An MR is NIC memory: a BPF array of its own that the daemon made for this
session and handed over (reg_mr's memory_fd), mapped into this process
(BPF_F_MMAPABLE). `mr.buf` is a memoryview of it and
`mr.numpy(dtype)` an array over it, so what the application writes there is
what the NIC sends, and what the NIC places there is what the application
reads: no copy on either side. Addresses are the NIC's: `mr.addr + offset`,
as ibv_reg_mr's address is the buffer's.
"""

from __future__ import annotations

import contextlib
import errno
from typing import TYPE_CHECKING, Any

from mrc_nic.contract import appops
from mrc_nic.nic.maps_base import detach
from mrc_nic.verbs.enums import Access
from mrc_nic.verbs.errors import VerbsError

if TYPE_CHECKING:
    from mrc_nic.verbs.context import Context

SUPPORTED_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.RELAXED_ORDERING


class PD:
    """A protection domain: the MRs and QPs of one context that may work
    together. The NIC enforces it: a QP writes into (by rkey) and sends from
    (by lkey) the MRs of its own PD only (docs/api.md, "Protection domains")."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.handle = ctx.call("alloc_pd", appops.AllocPd()).pd  # the NIC's PD number
        self.mrs: dict[int, MR] = {}  # by lkey
        self.qps: dict[int, Any] = {}  # qpn -> verbs.QP of this PD
        self._closed = False
        ctx.pds.append(self)

    def reg_mr(self, length: int, access: int = Access.LOCAL_WRITE | Access.REMOTE_WRITE) -> MR:
        return MR(self, length, access)

    def mr_of(self, lkey: int, verb: str) -> MR:
        mr = self.mrs.get(lkey)
        if mr is None:
            raise VerbsError(
                verb, errno.EINVAL, f"lkey {lkey:#x} is no MR of this PD (deregistered?)"
            )
        return mr

    def close(self) -> None:
        """ibv_dealloc_pd, after deregistering its MRs; EBUSY while QPs of it
        are open (destroy them first)."""
        if self._closed:
            return
        if self.qps:
            raise VerbsError(
                "dealloc_pd",
                errno.EBUSY,
                f"QPs {', '.join(f'{q:#x}' for q in self.qps)} use PD {self.handle}: "
                "destroy them first",
            )
        for mr in list(self.mrs.values()):
            mr.close()
        self._closed = True
        self.ctx.pds.remove(self)
        if not (self.ctx._closed or self.ctx._lost):
            self.ctx.call("dealloc_pd", appops.DeallocPd(pd=self.handle))

    def __enter__(self) -> PD:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MR:
    """Registered NIC memory: `buf`, `addr`, `length`, `lkey`, `rkey`."""

    def __init__(self, pd: PD, length: int, access: int) -> None:
        if not isinstance(length, int) or length < 1:
            raise VerbsError(
                "reg_mr", errno.EINVAL, f"length must be at least 1 byte, not {length!r}"
            )
        unsupported = Access(access) & ~SUPPORTED_ACCESS
        if unsupported:
            raise VerbsError(
                "reg_mr",
                errno.EINVAL,
                f"access {unsupported!r} is not offered: MRC has RDMA WRITE only "
                "(LOCAL_WRITE, REMOTE_WRITE)",
            )
        self.pd, self.ctx = pd, pd.ctx
        request = appops.RegMr(pd=pd.handle, length=length, access=int(access) & 3)
        reply = self.ctx.call("reg_mr", request)
        self.lkey = reply.region
        self.rkey = reply.rkey
        self.addr = reply.addr
        self.length = length
        self.access = Access(access)
        self._in_map = 0  # the MR starts its own memory (no page_off: element-aligned)
        try:
            self._map, self.buf = self.ctx._nic.memory_window(reply.memory_fd, 0, length)
        except (OSError, ValueError) as e:
            with contextlib.suppress(VerbsError):
                self.ctx.call("dereg_mr", appops.DeregMr(region=self.lkey))
            raise VerbsError("reg_mr", getattr(e, "errno", None) or errno.EIO, str(e)) from None
        self.valid = True
        pd.mrs[self.lkey] = self

    def numpy(self, dtype: Any = "uint8") -> Any:
        """The MR's bytes as a numpy array (no copy): writing it is writing NIC
        memory. Delete it (and arrays made from it) before deregistering the MR."""
        import numpy as np

        if not self.valid:
            raise VerbsError("numpy", errno.EINVAL, f"MR {self.lkey:#x} is deregistered")
        return np.frombuffer(self.buf, dtype=dtype)  # it holds an export of the mapping

    def offset_of(self, addr: int, length: int, verb: str) -> int:
        """Where [addr, addr + length) is in this MR; VerbsError if outside it."""
        off = addr - self.addr
        if not self.valid:
            raise VerbsError(verb, errno.EINVAL, f"MR {self.lkey:#x} is deregistered")
        if off < 0 or off + length > self.length:
            raise VerbsError(
                verb,
                errno.EINVAL,
                f"bytes [{addr:#x}, {addr + length:#x}) are outside MR {self.lkey:#x} "
                f"([{self.addr:#x}, {self.addr + self.length:#x}))",
            )
        return off

    def close(self) -> None:
        """ibv_dereg_mr: the memory goes back to the NIC; WRITEs to it fail.
        EBUSY while a view of it is alive: the NIC may give its memory to
        another MR, which that view would write into. (Telling takes releasing
        mr.buf: after that EBUSY, mr.buf is a new view.)"""
        if not self.valid:
            return
        self.buf.release()
        try:
            self._map.close()  # refused while any view of the mapping lives
        except BufferError:
            self.buf = memoryview(self._map)[self._in_map : self._in_map + self.length]
            raise VerbsError(
                "dereg_mr",
                errno.EBUSY,
                f"MR {self.lkey:#x} has a view alive (a numpy() array, or a slice of "
                "mr.buf): delete it first",
            ) from None
        self.valid = False
        self.pd.mrs.pop(self.lkey, None)
        if not (self.ctx._closed or self.ctx._lost):
            self.ctx.call("dereg_mr", appops.DeregMr(region=self.lkey))

    def invalidate(self) -> None:
        """The context closes: the MR is gone whatever views of it remain. Their
        pages become private ones, never the NIC memory the next owner gets;
        the views (numpy's included) hold the mapping until they go."""
        if not self.valid:
            return
        self.valid = False
        detach(self._map)
        self.buf.release()
        with contextlib.suppress(BufferError):  # else unmapped when the last view goes
            self._map.close()

    def privatize(self) -> None:
        """The NIC is gone (verbs.fatal): the MR's pages become private ones
        of this process with the bytes they held, so the program still reads
        what it had, and nothing it writes reaches NIC memory a new daemon
        gives another session."""
        if not self.valid:
            return
        held = bytes(self._map)
        detach(self._map)
        self._map[:] = held

    def __enter__(self) -> MR:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
