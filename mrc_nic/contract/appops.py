"""The daemon operations behind the verbs API (mrc_nic.verbs): setup only.

An application keeps one connection to its host's daemon (mrc_nic.lab.client.Session) and
creates memory registrations, CQs and QPs through it; everything a session
creates is released when its connection closes, also when the process dies.
The daemon hands the session each NIC resource it made as a file descriptor
(framing.fd_arg, SCM_RIGHTS): an MR's memory, a QP's send queue, a CQ's ring,
the doorbell. Those are all a process reaches of the NIC (docs/api.md,
"Isolation"). Posting and completions never come here: the application
writes WQEs into its mapped send queue and reads completions from its CQ's
ring buffer. Names follow the OCP API (mrc.h) and verbs (ibv_*).
"""

from __future__ import annotations

from mrc_nic.contract.framing import Reply, Request, arg, fd_arg, op, reply


@reply
class HelloReply(Reply):
    host: str = arg("the daemon's host")
    index: int = arg("the host's index in the lab (the host part of its QPNs)")
    planes: int = arg("the lab's planes: one port each")
    seg_size: int = arg("payload bytes of a full data packet on this lab")
    mr_align: int = arg("SGE and remote addresses are multiples of it: 1, the NIC places any byte")
    max_mr_bytes: int = arg("the most bytes one registration can have now")
    sq_depth: int = arg("WQEs the NIC holds per send queue")
    max_qp_wr: int = arg(
        "work requests a queue may have outstanding (the rest of sq_depth waits in the library)"
    )
    max_mpr: int = arg("the largest MPR, in 128-PSN units (OCP mpr_attr.max_mpr)")
    max_wimm: int = arg("WRITE_WITH_IMMs in flight per QP, at most (OCP wimm_attr.max_wimm)")
    cq_ring_bytes: int = arg("the size of a CQ's ring buffer")
    max_mr_size: int = arg("the most bytes one registration may ever have: half the host's memory")
    default_timeout: int = arg("a QP's timeout when RTS names none (1.024 us * 2^timeout)")
    max_timeout: int = arg("the largest timeout RTS takes")
    default_reorder_ns: int = arg("the loss detector's reorder window when RTS names none, ns")
    max_reorder_ns: int = arg("the largest reorder window RTS takes, ns")
    host_addrs: list[str] = arg("the host's address on each plane: its GIDs")
    shares: dict = arg(
        "this session's limits on the host: memory (bytes), qps, cqs, pds "
        "(contract.shares; a refusal past one is ENOMEM or ENOSPC)",
        factory=dict,
    )
    kick_fd: int = fd_arg(
        "the doorbell program: BPF_PROG_RUN of a kick frame runs the send engine "
        "(send kicks only, bpf/nic_xdp.c nic_doorbell)"
    )
    cq_lost_fd: int = fd_arg(
        "nic_cq_lost (mmap it read-only; the map is frozen, BPF alone writes it): "
        "completions each CQ index lost to a full ring, a __u64 each"
    )


@op("app_hello")
class Hello(Request[HelloReply]):
    """An application opens its session: what this NIC offers (mrc_query_device),
    and the doorbell. Only root, or a member of the lab's [tenants] group, in
    the host's network namespace (root also in the machine's) may (EPERM
    otherwise: transport.tenancy)."""

    pid: int = arg("the application's process id (the kernel's, SO_PEERCRED, is what counts)")
    shares: dict | None = arg(
        "shares it asks for instead of the lab's ([tenants]): memory, qps, cqs, pds, each a "
        'fraction (0.5, "50%") or an amount (64, "8MiB")',
        None,
    )


@reply
class AllocPdReply(Reply):
    pd: int = arg("the protection domain's number: nonzero, unique on the host while allocated")


@op("alloc_pd")
class AllocPd(Request[AllocPdReply]):
    """A protection domain for this session (ibv_alloc_pd): the NIC lets a QP
    write into and send from the MRs of its own PD only."""


@reply
class RegMrReply(Reply):
    region: int = arg("the NIC's region id (the MR's lkey)")
    rkey: int = arg("the remote key a peer names in its WRITEs")
    addr: int = arg("the MR's first byte in the NIC's address space (RETH.va)")
    length: int = arg("bytes registered: the request rounded up to whole elements")
    memory_fd: int = fd_arg(
        "the MR's memory, a BPF array of its own: mmap it (MAP_SHARED) from offset 0; "
        "the MR starts page_off bytes in"
    )


@op("reg_mr")
class RegMr(Request[RegMrReply]):
    """Register NIC memory for this session (ibv_reg_mr): zeroed, mapped by the caller."""

    pd: int = arg("a PD of this session (alloc_pd)")
    length: int = arg("bytes, at least 1")
    access: int = arg("ibv_access_flags (LOCAL_WRITE 1, REMOTE_WRITE 2)")
    iova: int | None = arg(
        "the MR's address as peers name it (a C program's buffer address, ibv_reg_mr_iova2); "
        "None: the NIC's own (region << 40)",
        None,
    )
    page_off: int | None = arg(
        "the buffer's offset in its page (0..4095): the window of NIC memory starts at the same "
        "offset in a page of its own, so the caller can map it over the buffer (zero-copy); "
        "None: element-aligned",
        None,
    )


@reply
class Done(Reply):
    pass


@op("dealloc_pd")
class DeallocPd(Request[Done]):
    """Release a PD of this session (ibv_dealloc_pd; EBUSY while MRs or QPs use it)."""

    pd: int = arg("alloc_pd's pd")


@op("dereg_mr")
class DeregMr(Request[Done]):
    """Deregister an MR of this session (EBUSY while a QP of it can still write there)."""

    region: int = arg("reg_mr's region")


@reply
class CreateCqReply(Reply):
    cq: int = arg("the CQ's index in nic_cq_rings (its lost count's in nic_cq_lost)")
    ring_fd: int = fd_arg("the CQ's ring buffer (BPF_MAP_TYPE_RINGBUF): mmap and epoll it")
    lost_base: int = arg(
        "nic_cq_lost[cq] now: the CQ's losses are what that count gains from here (a __u64)"
    )


@op("create_cq")
class CreateCq(Request[CreateCqReply]):
    """A completion queue for this session (mrc_create_cq)."""

    cqe: int = arg("completions it must hold at least")


@op("destroy_cq")
class DestroyCq(Request[Done]):
    """Destroy a CQ of this session (EBUSY while a QP uses it)."""

    cq: int = arg("create_cq's cq")


@reply
class CreateQpReply(Reply):
    qpn: int = arg("the QP number")
    sq_depth: int = arg("WQEs the NIC holds for it; the library queues the rest")
    ring: int = arg("its send ring's index (nic_wqs, nic_tx_ring)")
    sq_fd: int = fd_arg("its send queue, a BPF array of one struct nic_wq: mmap it (MAP_SHARED)")


@op("create_qp")
class CreateQp(Request[CreateQpReply]):
    """A QP in RESET (mrc_create_qp)."""

    pd: int = arg("a PD of this session (alloc_pd): the MRs it may use")
    send_cq: int = arg("the CQ of its send completions")
    recv_cq: int = arg("the CQ of its receive completions (WRITE_WITH_IMM)")
    max_send_wr: int = arg("send work requests outstanding, at most")
    max_recv_wr: int = arg("receive work requests outstanding, at most")
    max_send_sge: int = arg("SGEs per send work request")
    max_recv_sge: int = arg("SGEs per receive work request")


@reply
class ModifyQpReply(Reply):
    qp: dict = arg("the QP as query_qp shows it")


@op("modify_qp")
class ModifyQp(Request[ModifyQpReply]):
    """One transition with its attributes (mrc_modify_qp); a refused call changes nothing."""

    qpn: int = arg("a QP of this session")
    state: str = arg("INIT, RTR, RTS or ERR")
    attrs: dict = arg(
        "what the transition sets: dest_qp_num, dest_gid, rq_psn, sq_psn, path_mtu, "
        "qp_access_flags, timeout, retry_linear_cnt, retry_exp_cnt, mpr, mpr_dest, "
        "max_wimm, max_wimm_dest, ev_profile_id, cc_profile_id"
    )


@op("query_qp")
class QueryQp(Request[ModifyQpReply]):
    """A QP's state and attributes (mrc_query_qp)."""

    qpn: int = arg("a QP of this session")


@op("destroy_qp")
class DestroyQp(Request[Done]):
    """Destroy a QP of this session (mrc_destroy_qp)."""

    qpn: int = arg("a QP of this session")


APP_OPS = [
    Hello,
    AllocPd,
    DeallocPd,
    RegMr,
    DeregMr,
    CreateCq,
    DestroyCq,
    CreateQp,
    ModifyQp,
    QueryQp,
    DestroyQp,
]
