"""What the examples share: argument parsing, one-line errors, a connected QP.

Only the public API is used (`from mrc_nic import verbs`, `mrc_nic.verbs.cm`, `mrc_nic.units`),
so this file is also a template: open the NIC, register memory, create the CQs and
the QP, swap endpoints with the peer over TCP and bring the QP to RTS.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import sys
import time
from collections.abc import Callable
from typing import NoReturn

from mrc_nic import units, verbs
from mrc_nic.verbs import cm

KIB = 1024


class ExampleError(Exception):
    """Something the user should read as one line: printed, exit status 1."""


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block) for a bad argument."""

    def __init__(self, **kw) -> None:
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kw)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def size_arg(low: int = 0, high: int | None = None) -> Callable[[str], int]:
    """A byte count: 4096, 4K, 4KiB, 1M, 1G, 1T (one letter: binary; mrc_nic.units);
    from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = units.parse_size(text, units.TRANSFER_SIZE_UNITS)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a size (4096, 4K, 1M, 1G)") from None
        if value < low or (high is not None and value > high):
            top = f" to {high}" if high is not None else " or more"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {low}{top} bytes")
        return value

    return parse


def int_arg(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            top = f" to {high}" if high is not None else " or more"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {low}{top}")
        return value

    return parse


def seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value


def address_arg(text: str) -> str:
    """A server address that resolves (checked now, not after a minute of retries)."""
    try:
        socket.getaddrinfo(text, None)
    except OSError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an address of this host's network"
        ) from None
    return text


def client_server_parser(script: str, description: str, default_port: int) -> Parser:
    """The parser of a two-sided example: SERVER (none: serve), --port, --timeout."""
    p = Parser(
        prog=script,
        description=description,
        epilog=(
            "examples:\n"
            f"  mrc-nic exec h1 -- python examples/{script}                # server\n"
            f"  mrc-nic exec h0 -- python examples/{script} 198.18.0.2     # client"
        ),
    )
    p.add_argument("server", nargs="?", type=address_arg, help="an address of the server's host")
    add_port_and_timeout(p, default_port, 60.0, "to wait for the client and for each completion")
    return p


def add_port_and_timeout(p: Parser, default_port: int, timeout: float, what: str) -> None:
    p.add_argument(
        "--port", type=int_arg(1, 65535), default=default_port, help="TCP port for the setup"
    )
    p.add_argument(
        "--timeout", type=seconds_arg, default=timeout, help=f"seconds {what} (default {timeout:g})"
    )


# A client waits this long for its server to listen, then fails with a line
# saying so, as perftest's do: a server started at the same moment (`&`) has
# time to open its NIC; one never started is reported at once, not after
# --timeout seconds of silence.
SERVER_WAIT_S = 2.0


def open_link(args: argparse.Namespace, script: str) -> cm.Link:
    """The TCP link of a two-sided example: listen (no SERVER) or connect."""

    def listening(port: int) -> None:  # as perftest's servers say it
        print(f"{script}: waiting for a client on port {port}", file=sys.stderr, flush=True)

    try:
        return cm.Link.open(
            args.server,
            args.port,
            timeout=args.timeout,
            wait_for_server=SERVER_WAIT_S,
            on_listening=listening,
        )
    except cm.NoServer as e:
        raise ExampleError(
            f"{e}: start the server first, on the server's host: "
            f"mrc-nic exec HOST -- python examples/{script} --port {args.port}"
        ) from None


def run(main: Callable[[], int | None]) -> NoReturn:
    """Run main(); print an error as one line (no traceback) and exit non-zero."""
    prog = sys.argv[0].rsplit("/", 1)[-1]
    try:
        code = main() or 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        code = 130
    except (ExampleError, verbs.VerbsError, OSError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        code = 1
    sys.exit(code)


@dataclasses.dataclass
class Conn:
    """One side of a connected QP: its NIC, memory, CQs, QP, the TCP link and the peer."""

    ctx: verbs.Context
    pd: verbs.PD
    mr: verbs.MR
    send_cq: verbs.CQ
    recv_cq: verbs.CQ
    qp: verbs.QP
    link: cm.Link
    peer: cm.Endpoint

    @classmethod
    def open(
        cls,
        ctx: verbs.Context,
        link: cm.Link,
        mr_bytes: int,
        *,
        max_send_wr: int = 128,
        max_recv_wr: int = 16,
        one_cq: bool = False,
    ) -> Conn:
        """Register `mr_bytes`, make the CQs and the QP, swap endpoints over
        `link` and bring the QP to RTS (INIT -> RTR -> RTS, as the OCP example)."""
        attr = ctx.query_device()
        if mr_bytes > attr.max_mr_bytes:
            raise ExampleError(
                f"{mr_bytes} bytes of NIC memory needed, an MR holds {attr.max_mr_bytes}"
            )
        pd = verbs.PD(ctx)
        mr = pd.reg_mr(mr_bytes)
        send_cq = verbs.CQ(ctx, 256)
        recv_cq = send_cq if one_cq else verbs.CQ(ctx, 256)
        cap = verbs.QPCap(max_send_wr=max_send_wr, max_recv_wr=max_recv_wr)
        qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=send_cq, recv_cq=recv_cq, cap=cap))
        qp.to_init()
        peer = link.swap(cm.Endpoint.of(qp, mr, ctx.gid()))
        qp.to_rtr(peer.qpn, peer.gid, rq_psn=peer.psn)
        qp.to_rts()
        return cls(ctx, pd, mr, send_cq, recv_cq, qp, link, peer)

    def sge(self, offset: int, length: int) -> list[verbs.SGE]:
        """The SGE list of `length` bytes at `offset` of our MR (none for 0 bytes)."""
        return [verbs.SGE(self.mr.addr + offset, length, self.mr.lkey)] if length else []


def check(wc: verbs.WC, what: str) -> verbs.WC:
    if wc.status != verbs.WcStatus.SUCCESS:
        raise ExampleError(f"{what}: completion of wr_id {wc.wr_id} failed: {wc.status.name}")
    return wc


def wait_one(cq: verbs.CQ, timeout: float, what: str, *, busy: bool = False) -> verbs.WC:
    """The next completion of `cq` (successful, or ExampleError), blocking on
    the CQ's fd or busy-polling it, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cq.poll(1)
        if got:
            return check(got[0], what)
        left = deadline - time.monotonic()
        if left <= 0:
            raise ExampleError(f"{what}: no completion within {timeout:g} s")
        if not busy:
            cq.wait(min(left, 1.0))


def round_up(n: int, to: int = KIB) -> int:
    return -(-n // to) * to


def fidelity_meter(lab: str):
    """A started observe.fidelity.Meter on `lab`: which resource (the links,
    the CPU, the application) bound what runs until its tick() or stop().
    mrc-nic's observation, not the verbs API: what --json reports beside
    the figures, so that a result measured while the CPU bound it says so."""
    from mrc_nic.observe import fidelity

    meter = fidelity.Meter(lab)
    meter.start()
    return meter
