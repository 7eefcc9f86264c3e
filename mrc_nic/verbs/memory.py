"""Protection domains and memory regions (ibv_alloc_pd, ibv_reg_mr).

An MR is NIC memory: a window of the lab's BPF array nic_mr, mapped into
this process (BPF_F_MMAPABLE). `mr.buf` is a memoryview of it and
`mr.numpy(dtype)` an array over it, so what the application writes there is
what the NIC sends, and what the NIC places there is what the application
reads: no copy on either side. Addresses are the NIC's: `mr.addr + offset`,
as ibv_reg_mr's address is the buffer's.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from mrc_nic.transport import appops
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
        if not self.ctx._closed:
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
        start = reply.first_elem * self.ctx.attr.mr_align
        self._start = start
        self.buf = memoryview(self.ctx.memory)[start : start + length]
        self.valid = True
        pd.mrs[self.lkey] = self

    def numpy(self, dtype: Any = "uint8") -> Any:
        """The MR's bytes as a numpy array (no copy): writing it is writing NIC memory."""
        import numpy as np

        return np.frombuffer(self.buf, dtype=dtype)

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
        """ibv_dereg_mr: the memory goes back to the NIC; WRITEs to it fail."""
        if not self.valid:
            return
        self.valid = False
        self.buf.release()
        self.pd.mrs.pop(self.lkey, None)
        if not self.ctx._closed:
            self.ctx.call("dereg_mr", appops.DeregMr(region=self.lkey))

    def __enter__(self) -> MR:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
