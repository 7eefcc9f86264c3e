"""The NIC XDP program's loader: compile bpf/nic_xdp.c once per lab (bcc), pin, attach."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

from mrc_nic.abi import defs
from mrc_nic.kernel import bpfsys, pins, program, xdp
from mrc_nic.nic import wireconst
from mrc_nic.nic.driver.doorbell import run_kick
from mrc_nic.nic.layout import (
    BPF_DIR,
    CQ_LOST_MAP,
    DEFAULT_CQ_RING_PAGES,
    DEFAULT_EVENT_PAGES,
    DEFAULT_HOST_NET,
    DEFAULT_MAX_CQS,
    DEFAULT_MAX_EVS,
    DEFAULT_MAX_QPS,
    DEFAULT_MAX_REGIONS,
    DEFAULT_MR_ELEMS,
    DEFAULT_SKIP_NS,
    DEFAULT_TX_RINGS,
    DOORBELL_FUNC,
    DOORBELL_JUMP_MAP,
    DOORBELL_PIN,
    FUNC_NAME,
    MAP_PINS,
    MR_ELEM_SIZE,
    PINNED_MAPS,
    PROG_PIN,
    QPN_INDEX_SPAN,
    SOURCE,
)


def unpin(lab: str) -> None:
    """Remove the pins this module made for a lab (only nic_*), then its directory if empty."""
    pins.unpin(lab, PINNED_MAPS)


@dataclasses.dataclass(frozen=True)
class NicConfig:
    """What NicProgram.load compiled the program with (its -D tunables)."""

    host_net: ipaddress.IPv4Network = ipaddress.IPv4Network(DEFAULT_HOST_NET)
    max_qps: int = DEFAULT_MAX_QPS
    mr_elems: int = DEFAULT_MR_ELEMS
    max_regions: int = DEFAULT_MAX_REGIONS
    event_pages: int = DEFAULT_EVENT_PAGES
    mtu: int = wireconst.MTU
    max_evs: int = DEFAULT_MAX_EVS
    tx_rings: int = DEFAULT_TX_RINGS
    skip_ns: int = DEFAULT_SKIP_NS
    cq_ring_pages: int = DEFAULT_CQ_RING_PAGES
    max_cqs: int = DEFAULT_MAX_CQS
    ack_every: int = defs.NIC_ACK_EVERY  # ACK coalescing, the lab's default (docs/nic-program.md)
    ack_delay_ns: int = defs.NIC_ACK_DELAY_NS

    def cflags(self) -> list[str]:
        return [
            f"-I{BPF_DIR}",
            f"-DNIC_HOST_NET={int(self.host_net.network_address):#010x}U",
            f"-DNIC_MAX_QPS={self.max_qps}",
            f"-DNIC_MR_ELEMS={self.mr_elems}",
            f"-DNIC_MAX_REGIONS={self.max_regions}",
            f"-DNIC_EVENT_PAGES={self.event_pages}",
            f"-DMRC_MTU={self.mtu}",
            f"-DNIC_MAX_EVS={self.max_evs}",
            f"-DNIC_TX_RINGS={self.tx_rings}",
            f"-DNIC_SKIP_NS={self.skip_ns}ULL",
            f"-DNIC_CQ_RING_PAGES={self.cq_ring_pages}",
            f"-DNIC_MAX_CQS={self.max_cqs}",
            f"-DNIC_ACK_EVERY={self.ack_every}",
            f"-DNIC_ACK_DELAY_NS={self.ack_delay_ns}",
        ]

    def check(self) -> None:
        if self.host_net.prefixlen > 16:
            raise ValueError(
                f"host_net must be a /16 or larger (one /24 per plane): {self.host_net}"
            )
        for name in ("max_qps", "mr_elems", "max_regions", "max_evs", "tx_rings", "max_cqs"):
            value = getattr(self, name)
            if not (isinstance(value, int) and 1 <= value <= pins.U32_MAX // MR_ELEM_SIZE):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.max_qps & (self.max_qps - 1) or not 2 <= self.max_qps <= QPN_INDEX_SPAN:
            raise ValueError(
                f"max_qps must be a power of two from 2 to {QPN_INDEX_SPAN} (QPN & "
                f"(max_qps - 1) picks a QP's receive slot, within the QPN's index "
                f"bits), not {self.max_qps}"
            )
        for name in ("event_pages", "cq_ring_pages"):
            pages = getattr(self, name)
            if not (isinstance(pages, int) and pages >= 1 and pages & (pages - 1) == 0):
                raise ValueError(f"{name} must be a power of two, not {pages!r}")
        if wireconst.payload_max(self.mtu) <= 0:
            raise ValueError(f"mtu {self.mtu} is too small for a data packet")
        if not (isinstance(self.skip_ns, int) and 0 <= self.skip_ns < 1 << 63):
            raise ValueError(f"skip_ns must be a non-negative integer, not {self.skip_ns!r}")
        if not (isinstance(self.ack_every, int) and 1 <= self.ack_every <= 0xFFFF):
            raise ValueError(f"ack_every must be an integer 1..65535, not {self.ack_every!r}")
        if not (isinstance(self.ack_delay_ns, int) and 1 <= self.ack_delay_ns <= pins.U32_MAX):
            raise ValueError(
                f"ack_delay_ns must be an integer 1..{pins.U32_MAX}, not {self.ack_delay_ns!r}"
            )


class NicProgram:
    """The compiled XDP program of one lab, its fd, and its pinned maps."""

    def __init__(
        self, lab: str, config: NicConfig, bpf: Any, func: Any, doorbell: Any = None
    ) -> None:
        self.lab = lab
        self.config = config
        self.bpf = bpf  # the bcc.BPF object: keeps the program and maps alive
        self.fd: int = func.fd
        self.name: str = program.function_name(func)
        # the applications' doorbell program (nic_doorbell)
        self.doorbell_fd: int = doorbell.fd if doorbell is not None else -1

    @classmethod
    def load(
        cls,
        lab: str,
        *,
        host_net: str = DEFAULT_HOST_NET,
        max_qps: int = DEFAULT_MAX_QPS,
        mr_elems: int = DEFAULT_MR_ELEMS,
        max_regions: int = DEFAULT_MAX_REGIONS,
        event_pages: int = DEFAULT_EVENT_PAGES,
        mtu: int = wireconst.MTU,
        max_evs: int = DEFAULT_MAX_EVS,
        tx_rings: int = DEFAULT_TX_RINGS,
        skip_ns: int = DEFAULT_SKIP_NS,
        cq_ring_pages: int = DEFAULT_CQ_RING_PAGES,
        max_cqs: int = DEFAULT_MAX_CQS,
        ack_every: int = defs.NIC_ACK_EVERY,
        ack_delay_ns: int = defs.NIC_ACK_DELAY_NS,
    ) -> NicProgram:
        """Compile bpf/nic_xdp.c for a lab and pin its maps under pin_dir(lab).

        host_net is the lab's host network (topology's ``hosts``): the program
        checks that data comes from the QP's peer and goes to its local host
        on one plane of it. mr_elems sizes the memory of every region of the
        lab together, in MR_ELEM_SIZE-byte elements. max_evs is the number
        of (send QP, EV) entries of the lab, tx_rings the number of send QPs
        with a PSN -> EV table, skip_ns how long an EV stays in SKIP after an
        ECN mark or a fabric trim (NIC_SKIP_NS). cq_ring_pages is the size
        of a completion queue's ring buffer (the template applications copy),
        max_cqs the number of completion queues of the lab, ack_every and ack_delay_ns
        the lab's ACK coalescing (docs/nic-program.md). Refuses (FileExistsError)
        when the lab's NIC maps are already pinned.
        """
        config = NicConfig(
            host_net=ipaddress.IPv4Network(host_net),
            max_qps=max_qps,
            mr_elems=mr_elems,
            max_regions=max_regions,
            event_pages=event_pages,
            mtu=mtu,
            max_evs=max_evs,
            tx_rings=tx_rings,
            skip_ns=skip_ns,
            cq_ring_pages=cq_ring_pages,
            max_cqs=max_cqs,
            ack_every=ack_every,
            ack_delay_ns=ack_delay_ns,
        )
        config.check()
        bpf, funcs = program.compile_and_pin(
            lab,
            SOURCE,
            config.cflags(),
            {FUNC_NAME: "XDP", DOORBELL_FUNC: "XDP"},
            MAP_PINS,
            {PROG_PIN: FUNC_NAME, DOORBELL_PIN: DOORBELL_FUNC},
            what="NIC maps",
        )
        # The doorbell program hands its frames to nic_xdp (a tail call): entry 0.
        jump = bpf[DOORBELL_JUMP_MAP.encode()]
        jump[jump.Key(0)] = jump.Leaf(funcs[FUNC_NAME].fd)
        # Every session maps the CQs' lost counts: none may write them, BPF counts.
        bpfsys.map_freeze(bpf[CQ_LOST_MAP.encode()].map_fd)
        return cls(lab, config, bpf, funcs[FUNC_NAME], funcs[DOORBELL_FUNC])

    def attach(self, ipr: Any, ifindex: int, *, mode: str = "native") -> None:
        """Attach the program at XDP of an interface (mode: native, generic or auto).

        ipr is a pyroute2 IPRoute, possibly IPRoute(netns=...) for a host
        namespace: the program fd is passed by netlink, so the caller stays in
        its own namespace. Replaces a program already attached in that mode.
        """
        xdp.attach(ipr, ifindex, self.fd, mode)

    def attach_doorbell(self, ipr: Any, ifindex: int) -> None:
        """The applications' doorbell program at XDP (native) of an interface
        that takes no traffic of its own (a host's `doorbell`). Why: a program
        attached natively stays in the kernel's XDP dispatcher; one that is not
        is put in and taken out at every BPF_PROG_RUN, which rebuilds the
        dispatcher each time (measured: 24 ms for a 16-frame kick, against
        0.13 ms for nic_xdp, which is attached)."""
        xdp.attach(ipr, ifindex, self.doorbell_fd, "native")

    @staticmethod
    def detach(ipr: Any, ifindex: int, *, mode: str = "native") -> None:
        """Remove whatever XDP program is attached to an interface in that mode."""
        xdp.detach(ipr, ifindex, mode)

    def kick(
        self, qpn: int, packets: int, *, live: bool = True, batch_size: int = 0
    ) -> bpfsys.TestRunResult:
        """Run the send engine for a QP, `packets` times (see run_kick)."""
        return run_kick(self.fd, qpn, packets, live=live, batch_size=batch_size)

    def close(self) -> None:
        """Drop this process's references; attached ports and pins keep the rest."""
        self.bpf.cleanup()
