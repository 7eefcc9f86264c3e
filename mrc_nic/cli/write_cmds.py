"""write: an RDMA WRITE between two hosts of a lab, through the verbs API (workloads.rdma_write)."""

from __future__ import annotations

import click

from mrc_nic.cli import output
from mrc_nic.cli.app import App, Outcome, command, pass_app
from mrc_nic.cli.common import size_option
from mrc_nic.fabric import preflight


@command(
    view=lambda r, *, app: _print_write(r, app=app),
    epilog="""\b
Examples:
  mrc-nic write h0 h1 --size 1G --verify
  mrc-nic write h0 h1 --size 256M --qps 4 --imm
  mrc-nic write h0 h1 --size 1G --evs 256 --ev-min-active 64""",
)
@click.argument("src")
@click.argument("dst")
@size_option(
    "--size",
    required=True,
    help_text="Bytes: 4096, 64K, 256MiB, 1.5G, 1T (K..T binary, KB..TB decimal; at most 1 TiB).",
)
@click.option("--qps", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option("--imm", is_flag=True, help="WRITE_WITH_IMM: completions at the receiver, in order.")
@click.option("--verify", is_flag=True, help="Compare every byte that arrived with what was sent.")
@click.option(
    "--auth",
    is_flag=True,
    help="A MAC on every packet, with a fresh key for this connection (mrc-nic extension): "
    "forged packets are dropped and counted as drop_auth.",
)
@click.option(
    "--mpr",
    type=click.IntRange(1, 8),
    default=8,
    show_default=True,
    help="Max PSN range in flight, in units of 128 packets.",
)
@click.option(
    "--cwnd",
    type=click.IntRange(0, 1024),
    default=None,
    help="Most packets in the network (mrc-nic extension, a fixed window until NSCC; "
    "default 128; 0: the whole MPR range).",
)
@click.option(
    "--reorder-window",
    "reorder_us",
    type=click.IntRange(0, 10**6),
    default=None,
    help="Microseconds a packet may trail one sent after it before it counts as lost "
    "(mrc-nic extension; default 250, or 2 design RTTs of a slowed-down lab; 0: wait for the "
    "timeout).",
)
@click.option(
    "--timeout",
    "timeout_exp",
    type=click.IntRange(0, 24),
    default=None,
    help="Retransmission timeout: 1.024 us * 2^T (default 12: 4.2 ms, or at least 8 design "
    "RTTs of a slowed-down lab).",
)
@click.option("--retry-linear", type=click.IntRange(0, 7), default=None)
@click.option("--retry-exp", type=click.IntRange(0, 25), default=None, help="25: forever.")
@click.option(
    "--evs",
    "ev_count",
    type=click.IntRange(1, 256),
    default=None,
    help="EVs per QP, equal per plane: a multiple of the planes (OCP ev_count; default 128).",
)
@click.option(
    "--ev-min-active",
    type=click.IntRange(0, 256),
    default=None,
    help="Floor of active EVs: below it, failed EVs are replaced whatever their plane "
    "(OCP ev_min_active; default a quarter of --evs).",
)
@click.option(
    "--ev-profile",
    type=int,
    default=None,
    help="The QPs' EV profile (OCP ev_profile_id; `mrc-nic ev profile list`). Default 0: "
    "AUTO with --evs EVs.",
)
@click.option(
    "--cc-profile",
    type=int,
    default=None,
    help="The QPs' CC profile (OCP cc_profile_id; `mrc-nic cc profile list`). Default 1: NSCC.",
)
@pass_app
def write(
    app: App,
    src,
    dst,
    size,
    qps,
    imm,
    verify,
    auth,
    mpr,
    cwnd,
    reorder_us,
    timeout_exp,
    retry_linear,
    retry_exp,
    ev_count,
    ev_min_active,
    ev_profile,
    cc_profile,
) -> Outcome:
    """RDMA WRITE SIZE bytes from SRC's memory to DST's, sprayed over every plane."""
    from mrc_nic.workloads import rdma_write

    # An operator's tool, as root: it opens both hosts' NICs from the machine's
    # namespace (a member of the lab's group runs a program in a host instead).
    preflight.require_root()

    retry = {}
    if retry_linear is not None:
        retry["linear_cnt"] = retry_linear
    if retry_exp is not None:
        retry["exp_cnt"] = retry_exp
    try:
        result = rdma_write.write(
            app.lab(),
            src,
            dst,
            size,
            qps=qps,
            imm=imm,
            verify=verify,
            mpr=mpr,
            cwnd=cwnd,
            reorder_ns=None if reorder_us is None else reorder_us * 1000,
            timeout=timeout_exp,
            retry=retry or None,
            ev_count=ev_count,
            ev_min_active=ev_min_active,
            auth=auth,
            cc_profile=cc_profile,
            **({} if ev_profile is None else {"ev_profile": ev_profile}),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    except KeyboardInterrupt:
        click.echo("write cancelled (its QPs were moved to ERR and released)", err=True)
        raise SystemExit(130) from None
    return Outcome(result, 0 if result.get("completed") else 1)


def _print_write(r: dict, *, app: App) -> None:
    shares = " ".join(f"p{p}:{v:.0%}" for p, v in r["per_plane_share"].items())
    line = (
        f"{r['src']} -> {r['dst']}: {r['bytes']:,} of {r['size']:,} bytes in {r['seconds']:.3f} s, "
        f"{r['goodput_bps'] / 1e9:.3f} Gbit/s goodput; {len(r['qps'])} QP(s), "
        f"{r['chunks']} WRITE(s) of up to {r['chunk']:,} B; {r['retransmits']} retransmitted, "
        f"{r['timeouts']} timeouts; per plane {shares}"
    )
    if r.get("completed"):
        verified = "byte-exact (verified)" if r.get("verified") else "not verified"
        if any(q.get("auth") for q in r["qps"]):
            verified += "; every packet MAC'd"
        output.success(f"{line}; {verified}")
    else:
        output.error(f"{line}\n{r['error']}")
    _print_fidelity(r, app.topology())


def _print_fidelity(r: dict, topo=None) -> None:
    """The links' share and the fidelity verdict: which resource bound the write."""
    from mrc_nic.observe import fidelity

    share = r.get("links_share")
    if share:
        click.echo(
            f"{share['of_payload']:.0%} of the links' payload capacity "
            f"({share['payload_capacity_bps'] / 1e9:.3g} Gbit/s after per-packet headers; "
            f"{share['of_rate']:.0%} of their raw rate)"
        )
    fid = r.get("fidelity")
    if fid:
        click.echo(fidelity.summary(fid))
        output.fidelity_advice(fid, topo)


COMMANDS = [write]
