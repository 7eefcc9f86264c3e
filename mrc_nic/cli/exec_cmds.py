"""exec: run a program inside a host of a lab, as an application of its NIC."""

from __future__ import annotations

import os
import pwd
import shutil
import sys

import click

from mrc_nic.cli.app import App, command, pass_app


@command(
    "exec",
    formats=(),
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog="""\b
The program runs in the host's network namespace (its ports, addresses and
routes) with MRC_NIC_LAB and MRC_NIC_HOST set, so mrc_nic.verbs.Context()
opens that host's NIC, and with the directory of mrc-nic's own Python first
on PATH, so `python` is one that has mrc_nic. Unlike `ip netns exec`, /sys stays as it is: the
lab's pinned BPF maps under /sys/fs/bpf remain visible.
The program's NIC opens only from this host (another host's or lab's is
refused with EPERM), and its session holds at most its shares of the host's
NIC memory, QPs, CQs and PDs: the lab's [tenants] (half of each by default),
or what --share NAME=VALUE sets (memory, qps, cqs, pds; a fraction "25%",
0.25, or an amount: 8, "8MiB").

\b
--user NAME runs the program as that user once in the host (its groups,
HOME, USER and LOGNAME; the rest of the environment as above). Its NIC
opens if the lab lets that user: members of the group the lab's topology
file names ([tenants] group; docs/api.md, "Running without root").

\b
C programs: the native verbs library (libmrc_nic_verbs.so) is preloaded
(LD_PRELOAD), so an unmodified verbs program (perftest's ib_write_bw,
ibv_devices, the OCP mrc_example, your own) finds one device per host of
the lab, this host's first (mrc_h0, ...). --no-preload leaves it out.

\b
Examples:
  mrc-nic exec h1 -- python examples/write_bw.py                # server on h1
  mrc-nic exec h0 -- python examples/write_bw.py 198.18.0.2     # client on h0
  mrc-nic exec h1 -- ib_write_bw -s 4096                        # perftest server on h1
  mrc-nic exec h0 -- ib_write_bw -s 4096 198.18.0.2             # client on h0
  mrc-nic exec h0 -- ip -br addr
  mrc-nic exec --share memory=75% --share qps=100 h0 -- python big.py
  mrc-nic exec --user alice h0 -- python examples/write_bw.py   # as alice""",
)
@click.argument("host")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--no-preload",
    is_flag=True,
    help="Do not preload the native verbs library (C verbs programs then find no device).",
)
@click.option(
    "--share",
    "share",
    multiple=True,
    metavar="NAME=VALUE",
    help="the program's share of the host's NIC: memory, qps, cqs or pds; a fraction "
    '("25%", 0.25) or an amount (8, "8MiB"). Repeat for several.',
)
@click.option(
    "--user",
    "-u",
    "user",
    metavar="NAME",
    help="Run COMMAND as this user (a name or uid) in the host, not as root.",
)
@pass_app
def exec_cmd(
    app: App,
    host: str,
    command: tuple[str, ...],
    share: tuple[str, ...],
    no_preload: bool,
    user: str | None,
) -> None:
    """Run COMMAND inside HOST's namespace, with the environment the verbs API uses."""
    from mrc_nic.kernel import netns
    from mrc_nic.verbs.context import ENV_HOST, ENV_LAB

    # Without interspersed options click keeps everything after HOST, the `--` too;
    # so exec's own -l may come there (`exec h0 -l LAB -- CMD`): taken, before `--` only.
    while command and command[0] in ("-l", "--lab") and len(command) > 1:
        app.set_lab(command[1])
        command = command[2:]
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise click.UsageError("no COMMAND after `--`")
    share_env = _share_env(share)  # checked before anything else
    account = _account(user) if user is not None else None
    name, topo = app.lab(), app.topology()
    if host not in topo.host_names():
        raise click.UsageError(
            f"{host!r} is not a host of lab {name!r} (hosts: {', '.join(topo.host_names())})"
        )
    # The interpreter running mrc-nic comes first on PATH: `python` is the one
    # that has mrc_nic (a venv's), whatever PATH sudo or the shell left.
    own = os.path.dirname(sys.executable)  # empty if Python cannot tell: not the cwd
    path = os.pathsep.join([*([own] if own else []), os.environ.get("PATH") or os.defpath])
    program = shutil.which(command[0], path=path)
    if program is None:
        raise click.UsageError(f"{command[0]!r}: no such program (is it on PATH?)")
    env = dict(os.environ, PATH=path, **{ENV_LAB: name, ENV_HOST: host}, **share_env)
    if not no_preload:
        env.update(_preload(env.get("LD_PRELOAD", "")))
    netns.enter_for_good(topo.netns(host))
    if account is not None:
        env.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
        _become(account)  # after setns: entering a namespace takes root
    os.execve(program, list(command), env)


def _account(user: str) -> pwd.struct_passwd:
    """--user's account, by name or uid; a one-line error when there is none."""
    try:
        account = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise click.BadParameter(
            f"no user {user!r} on this machine: `getent passwd` lists them, useradd makes one",
            param_hint="--user",
        ) from None
    if os.geteuid() != 0:
        raise click.UsageError("--user runs the program as another user, which takes root: sudo")
    return account


def _become(account: pwd.struct_passwd) -> None:
    """Drop root for good: the user's groups, then its gid, then its uid (in
    this order: once the uid is not root, the groups cannot change)."""
    os.initgroups(account.pw_name, account.pw_gid)
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)


def _share_env(items: tuple[str, ...]) -> dict[str, str]:
    """--share NAME=VALUE as the MRC_NIC_SHARE_<NAME> the library reads, checked."""
    from mrc_nic.contract import shares

    env = {}
    for item in items:
        name, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError(f"{item!r} is not NAME=VALUE (e.g. memory=25%)")
            shares.parse(name, value)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--share") from None
        env[shares.ENV_PREFIX + name.upper()] = value
    return env


def _preload(current: str) -> dict[str, str]:
    """LD_PRELOAD with the native verbs library first (built now if it is not);
    nothing when it cannot be built, which is said on stderr."""
    from mrc_nic import native

    try:
        lib = str(native.library())
    except native.BuildError as e:
        click.echo(f"mrc-nic exec: C verbs programs will find no device here: {e}", err=True)
        return {}
    rest = [p for p in current.replace(":", " ").split() if p and p != lib]
    return {"LD_PRELOAD": " ".join([lib, *rest])}


COMMANDS = [exec_cmd]
