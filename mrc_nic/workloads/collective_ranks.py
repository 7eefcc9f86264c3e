"""The ring all-reduce on mrc-nic: one process per rank, in its host's namespace.

As NCCL runs its ranks, each rank is a process of its own (hostprocs.HostProc:
in its host's network namespace, MRC_NIC_LAB and MRC_NIC_HOST set as `mrc-nic
exec` sets them) that opens its host's NIC through the verbs API and holds
only its own ends of the ring: a send QP to the next rank and a receive QP
from the previous one (rdma_ends; `qps` of each per edge). The ranks swap
endpoints through the process that runs them (MrcRing, in collective), which
then drives the schedule step by step as it drives the socket peer's
processes: "go" to every rank, each rank WRITEs its chunk (every WRITE with
an immediate) into the next rank's buffer while it counts, and with verify
compares, what the previous rank WRITEs into its own; it reports when the
last of those arrived (the NIC's time of the completion) and what its send
did. A step ends when every rank has received its chunk.
"""

from __future__ import annotations

import socket
import time

from mrc_nic import verbs
from mrc_nic.kernel.fdwait import Waiter
from mrc_nic.lab.state import open_lab
from mrc_nic.workloads import hostprocs, rdma_ends, rdma_write


def lane_shares(size: int, lanes: int) -> list[int]:
    """Each QP's bytes of a transfer of `size` (as rdma_write.Transfer cuts it)."""
    share = -(-size // lanes)
    return [max(0, min(size, (i + 1) * share) - min(size, i * share)) for i in range(lanes)]


def host_main(args: dict) -> None:
    """One rank: its ends, the connection, then each step it is told."""
    lab, host, chunk, qps = args["lab"], args["host"], args["chunk"], args["qps"]
    _, topo = open_lab(lab)
    with verbs.Context(lab, host) as ctx:
        pd = verbs.PD(ctx)
        senders = [rdma_ends.SendEnd(ctx, pd, chunk, i) for i in range(qps)]
        receivers = [rdma_ends.RecvEnd(ctx, pd, chunk, i) for i in range(qps)]
        credits = _Credits(topo, host, args, senders, receivers)
        ready = {"send": [e.endpoint() for e in senders], "recv": [e.endpoint() for e in receivers]}
        hostprocs.say({"ready": {**ready, **credits.listening()}})
        order = hostprocs.hear()["connect"]
        opts = rdma_write.QpOptions(**order["opts"])
        for end, peer in zip(receivers, order["left_send"], strict=True):
            end.connect(peer, opts)
        for end, peer in zip(senders, order["right_recv"], strict=True):
            end.connect(peer, topo, opts)
        credits.connect(order.get("credit_left"))
        hostprocs.say({"connected": True})
        every = [ctx.fileno(), *(fd for e in [*senders, *receivers] for fd in e.fds())]
        sending = [ctx.fileno(), *(fd for e in senders for fd in e.fds())]
        with Waiter(every) as waiter, Waiter(sending) as send_waiter:
            while "go" in (order := hostprocs.hear()):
                _step(ctx, (waiter, send_waiter), senders, receivers, order)


class _Credits:
    """A rank's credit sockets (rdma_ends): handed to it as descriptors
    (credit_send, credit_recv: socketpairs of one machine's ranks), or, for
    ranks on several machines (credit_plane), TCP over that plane of the lab:
    a listener per QP for the right neighbour's receiver, and a connection
    per QP to the left neighbour's listener."""

    ACCEPT_S = 60.0

    def __init__(self, topo, host: str, args: dict, senders: list, receivers: list) -> None:
        self.senders, self.receivers = senders, receivers
        self.sockets: list[socket.socket] = []  # kept open for the rank's life
        self.listeners: list[socket.socket] = []
        if "credit_send" in args:
            for end, fd in zip(senders, args["credit_send"], strict=True):
                end.take_credits(fd)
            for end, fd in zip(receivers, args["credit_recv"], strict=True):
                end.credit_fd = fd
            return
        self.address = str(topo.host_address(topo.nodes[host].index, args["credit_plane"]))
        for _ in senders:
            self.listeners.append(socket.create_server((self.address, 0)))

    def listening(self) -> dict:
        """What the ready line says of them: where this rank's listeners are."""
        if not self.listeners:
            return {}
        return {"credit": [[self.address, s.getsockname()[1]] for s in self.listeners]}

    def connect(self, left: list | None) -> None:
        """Connect the receivers to the left neighbour, then take the right's."""
        if not self.listeners:
            return
        for end, (address, port) in zip(self.receivers, left or [], strict=True):
            sock = socket.create_connection((address, port), timeout=self.ACCEPT_S)
            end.credit_fd = self._keep(sock)
        for end, listener in zip(self.senders, self.listeners, strict=True):
            listener.settimeout(self.ACCEPT_S)
            sock, _ = listener.accept()
            end.take_credits(self._keep(sock))
            listener.close()

    def _keep(self, sock: socket.socket) -> int:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a credit is 8 bytes, now
        sock.settimeout(None)
        self.sockets.append(sock)
        return sock.fileno()


def _step(
    ctx: verbs.Context,
    waiters: tuple[Waiter, Waiter],
    senders: list[rdma_ends.SendEnd],
    receivers: list[rdma_ends.RecvEnd],
    go: dict,
) -> None:
    """One step: send `send` bytes to the next rank, receive `recv` bytes from the
    previous one, by the deadline. Said in two lines: "step" once this rank
    has received its chunk (the step's dependency: the data is delivered, as
    the socket peer's receiver says it), "sent" once its own WRITEs have
    completed (their acknowledgements; the next step starts after them).
    Meanwhile the receive side is left alone: what arrives on it now is the
    next step's (the previous rank may have started it), read once this rank
    starts that step too. waiters: over every end's fds, over the senders'."""
    verify, seed, deadline = go["verify"], go["seed"], go["deadline_ns"] / 1e9
    for end, size in zip(receivers, lane_shares(go["recv"], len(receivers)), strict=True):
        end.expect(size, seed=seed, verify=verify)
    for end, size in zip(senders, lane_shares(go["send"], len(senders)), strict=True):
        end.start(size, seed=seed, imm=True, fill=verify, gated=verify)
    step = go["go"]
    failed = _until(ctx, waiters[0], [*senders, *receivers], receivers, deadline)
    hostprocs.say(
        {
            "step": step,
            "recv_done_ns": max((e.done_ns or 0) for e in receivers),
            "received": sum(e.received for e in receivers),
            "verified": verify and all(e.verified and e.finished for e in receivers),
            "recv_error": "; ".join(e.error for e in receivers if e.error) or failed,
        }
    )
    failed = failed or _until(ctx, waiters[1], senders, senders, deadline)
    stuck = {f"{e.qp.qp_num:#x}": e.stuck() for e in senders if failed and not e.finished}
    for e in senders if failed else []:
        e.cancel(f"step {step}: {failed}")
    sends = [e.result() for e in senders]
    per_plane: dict[str, float] = {}
    for r in sends:
        for p, share in r["per_plane_share"].items():
            per_plane[p] = per_plane.get(p, 0.0) + share / len(sends)
    hostprocs.say(
        {
            "sent": step,
            "bytes": sum(e.done_bytes for e in senders),
            "send_error": "; ".join(e.error for e in senders if e.error) or None,
            "retransmits": sum(r["retransmits"] for r in sends),
            "timeouts": sum(r["timeouts"] for r in sends),
            "per_plane_share": per_plane,
            "stuck": stuck,
        }
    )


def _until(
    ctx: verbs.Context, waiter: Waiter, ends: list, wanted: list, deadline: float
) -> str | None:
    """Progress every end until the wanted ones have finished; why not, if they did not."""
    while not all(e.finished for e in wanted):
        if sum(e.progress() for e in ends):
            continue  # more may wait in the CQs' batches
        now = time.monotonic()
        if now > deadline:
            return "time limit"
        if ctx.fileno() in waiter.wait(min(0.05, deadline - now)) and ctx.device_fatal():
            return f"the daemon of {ctx.attr.host} ended (did it die?)"
    return None
