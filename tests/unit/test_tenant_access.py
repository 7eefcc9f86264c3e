"""Who may open a lab's NICs (docs/api.md, "Running without root"): the
topology's [tenants] group, the daemon's check of a peer's credentials (as
data: uid, gid, groups), operator operations kept to root on the same socket,
and the one-line refusals that say what to do."""

from __future__ import annotations

import errno
import grp
import os
import socket
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from mrc_nic.contract import appops, framing
from mrc_nic.lab import access, topology
from mrc_nic.lab.service import Conn, LineService
from mrc_nic.transport import tenancy
from mrc_nic.transport.qp import QpError
from tests.helpers.env import NETNS_DIR

OUTSIDER = 4_242_424  # a uid and gid no test runs as, nor the machine's groups
GROUP = tenancy.Group("mrcnictest", 4_343_434)


def lab_file(tmp_path: Path, tenants: str) -> Path:
    path = tmp_path / "lab.toml"
    path.write_text((NETNS_DIR / "single-plane.toml").read_text() + "\n[tenants]\n" + tenants)
    return path


def missing_group() -> str:
    name = f"nogrp{os.getpid()}"
    with pytest.raises(KeyError):
        grp.getgrnam(name)
    return name


# ---- the setting ------------------------------------------------------------------
def test_the_tenants_group_is_read_beside_the_shares(tmp_path):
    topo = topology.load(lab_file(tmp_path, 'group = "mrc-nic"\nqps = 16\n'), lab="t")
    assert topo.tenant_group == "mrc-nic"
    assert topo.tenant_shares() == {"qps": 16}  # what the daemon parses as shares
    assert topology.load(NETNS_DIR / "single-plane.toml", lab="t").tenant_group is None


@pytest.mark.parametrize("value", ["7", '"Bad Group"', '""', '"-x"', "true", '"a/b"'])
def test_a_tenants_group_that_is_no_groups_name_is_one_line_naming_the_key(tmp_path, value):
    path = lab_file(tmp_path, f"group = {value}\n")
    with pytest.raises(topology.TopologyError) as e:
        topology.load(path, lab="t")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: tenants.group: must be a group's name")
    assert "leave it out for root only" in msg


def test_the_group_must_exist_where_the_lab_comes_up(tmp_path):
    name = missing_group()
    topo = topology.load(lab_file(tmp_path, f'group = "{name}"\n'), lab="t")
    with pytest.raises(access.NoSuchGroup) as e:
        access.group_id(topo)
    msg = str(e.value)
    assert "\n" not in msg and f"there is no group {name!r} on this machine" in msg
    assert f"`groupadd {name}`" in msg and f"`usermod -aG {name} USER`" in msg
    mine = grp.getgrgid(os.getgid()).gr_name
    topo = topology.load(lab_file(tmp_path, f'group = "{mine}"\n'), lab="t")
    assert access.group_id(topo) == os.getgid()
    assert access.group_id(topology.load(NETNS_DIR / "single-plane.toml", lab="t")) is None


# ---- the daemon's check of who opens a session -------------------------------------
def peer(uid: int, gid: int, groups: tuple[int, ...] = ()) -> tenancy.Peer:
    return tenancy.Peer(77, uid, None, "prog", gid, frozenset(groups))


def test_root_and_the_groups_members_open_the_nics():
    for ok in (
        peer(0, 0),  # root, with or without a group
        peer(OUTSIDER, GROUP.gid),  # the group as its own
        peer(OUTSIDER, OUTSIDER, (5, GROUP.gid)),  # among its supplementary groups
    ):
        tenancy.check_member(ok, "lab1", GROUP)
    tenancy.check_member(peer(0, 0), "lab1", None)


def test_anyone_else_is_refused_with_eperm_naming_the_group_and_how_to_join():
    with pytest.raises(QpError) as e:
        tenancy.check_member(peer(OUTSIDER, OUTSIDER, (5, 6)), "lab1", GROUP)
    assert e.value.errno == errno.EPERM
    msg = str(e.value)
    assert "\n" not in msg and f"pid 77 (uid {OUTSIDER}, {OUTSIDER})" in msg
    assert "may not open lab lab1's NICs: only root and group 'mrcnictest' may" in msg
    assert f"`usermod -aG mrcnictest {OUTSIDER}` as root, then log in again" in msg


def test_without_a_group_the_nics_are_roots_alone():
    with pytest.raises(QpError) as e:
        tenancy.check_member(peer(OUTSIDER, GROUP.gid, (GROUP.gid,)), "lab1", None)
    assert e.value.errno == errno.EPERM
    assert "they are root's alone" in str(e.value) and "[tenants] group" in str(e.value)


def test_a_member_still_opens_only_from_its_host(monkeypatch):
    """The group says who; where stays tenancy's rule: a member in the
    machine's own namespace may not name a lab and host (only root may)."""
    home = (1, 2)
    monkeypatch.setattr(tenancy, "_home", home)
    monkeypatch.setattr(tenancy, "_group", GROUP)
    member = tenancy.Peer(77, OUTSIDER, home, "prog", GROUP.gid, frozenset())
    with pytest.raises(QpError, match="only root may name a lab and host from there"):
        tenancy.check(member, "lab1", "h0")
    outsider = tenancy.Peer(77, OUTSIDER, home, "prog", OUTSIDER, frozenset())
    with pytest.raises(QpError, match="only root and group 'mrcnictest' may"):
        tenancy.check(outsider, "lab1", "h0")


def test_a_peers_groups_are_the_kernels():
    a, b = socket.socketpair()
    with a, b:
        me = tenancy.peer_of(a)
    assert (me.pid, me.uid, me.gid) == (os.getpid(), os.geteuid(), os.getegid())
    assert me.groups == frozenset(os.getgroups())


# ---- operator operations stay root's ----------------------------------------------
class PingService(LineService):
    operations = framing.Ops("test", [framing.Ping])

    def op_ping(self, req: framing.Ping, conn: Conn) -> framing.PingReply:
        return framing.PingReply(pid=os.getpid())


def test_a_peer_that_is_not_root_calls_only_the_open_operations(tmp_path):
    svc = PingService(tmp_path / "t.sock")
    a, b = socket.socketpair()
    with a, b:
        assert svc.handle_line(b'{"op": "ping"}', Conn(a, uid=0))[0]["ok"]
        refused = svc.handle_line(b'{"op": "ping"}', Conn(a, uid=OUTSIDER))[0]
        assert refused["ok"] is False and refused["errno"] == "EPERM"
        assert (
            f"ping is an operator's operation and uid {OUTSIDER} is not root" in refused["message"]
        )
        assert "mrc-nic needs root for it; run it with sudo" in refused["message"]
        svc.open_ops = frozenset({"ping"})
        assert svc.handle_line(b'{"op": "ping"}', Conn(a, uid=OUTSIDER))[0]["ok"]


def test_a_host_daemon_opens_the_applications_operations_and_its_socket_to_the_group(
    tmp_path, monkeypatch
):
    mine = grp.getgrgid(os.getgid()).gr_name
    topo = topology.load(lab_file(tmp_path, f'group = "{mine}"\n'), lab="t")
    monkeypatch.setattr(tenancy, "_group", None)
    svc = PingService(tmp_path / "t.sock")
    assert tenancy.open_to_tenants(svc, topo) == tenancy.Group(mine, os.getgid())
    assert svc.group == os.getgid()
    assert svc.open_ops == {r.OP for r in appops.APP_OPS} and "app_hello" in svc.open_ops
    assert "ping" not in svc.open_ops and "qp_list" not in svc.open_ops
    plain = PingService(tmp_path / "u.sock")
    assert tenancy.open_to_tenants(plain, topology.load(lab_file(tmp_path, ""), lab="t")) is None
    assert plain.group is None and plain.open_ops == svc.open_ops


# ---- what a client that the socket's mode kept out is told --------------------------
def test_a_refused_connect_is_told_whose_the_nics_are(tmp_path):
    sock = tmp_path / "h0.sock"
    sock.touch(mode=0o600)
    os.chmod(sock, 0o600)
    msg = access.refusal(sock, "lab1")
    assert "\n" not in msg and "may not open lab lab1's NICs: they are root's alone" in msg
    os.chmod(sock, 0o660)
    group = grp.getgrgid(os.stat(sock).st_gid).gr_name
    msg = access.refusal(sock, "lab1")
    assert f"only root and group {group!r} may; join it (`usermod -aG {group} " in msg
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o660


# ---- exec --user ------------------------------------------------------------------
def test_exec_user_names_a_user_of_this_machine(monkeypatch):
    from mrc_nic.cli import cli

    result = CliRunner().invoke(cli, ["exec", "--user", "no-such-user-x", "h0", "--", "true"])
    assert result.exit_code == 2
    assert "no user 'no-such-user-x' on this machine: `getent passwd` lists them" in result.output


def test_exec_user_runs_the_program_as_that_user_after_entering_the_host(monkeypatch):
    """The order is the point: the namespace first (it takes root), then the
    groups, the gid and the uid; the environment is exec's, with the user's
    HOME, USER and LOGNAME."""
    import pwd

    from mrc_nic.cli import cli
    from mrc_nic.kernel import netns
    from mrc_nic.lab import state

    me = pwd.getpwuid(os.geteuid())
    topo = topology.load(NETNS_DIR / "default.toml", lab="lab1")
    monkeypatch.setattr(state, "open_lab", lambda name: (None, topo))
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # as root runs it
    calls: list[tuple] = []
    monkeypatch.setattr(netns, "enter_for_good", lambda ns: calls.append(("setns", ns)))
    for name in ("initgroups", "setgid", "setuid"):
        monkeypatch.setattr(os, name, lambda *a, name=name: calls.append((name, *a)))
    monkeypatch.setattr(os, "execve", lambda prog, argv, env: calls.append(("exec", argv, env)))
    result = CliRunner().invoke(
        cli, ["exec", "-l", "lab1", "--user", me.pw_name, "--no-preload", "h1", "--", "true"]
    )
    assert result.exit_code == 0, result.output
    *steps, (_, argv, env) = calls
    assert steps == [
        ("setns", topo.netns("h1")),
        ("initgroups", me.pw_name, me.pw_gid),
        ("setgid", me.pw_gid),
        ("setuid", me.pw_uid),
    ]
    assert argv == ["true"] and env["MRC_NIC_LAB"] == "lab1" and env["MRC_NIC_HOST"] == "h1"
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (me.pw_dir, me.pw_name, me.pw_name)


def test_exec_user_takes_root(monkeypatch):
    import click

    from mrc_nic.cli import exec_cmds

    monkeypatch.setattr(os, "geteuid", lambda: OUTSIDER)
    with pytest.raises(click.UsageError, match="another user, which takes root: sudo"):
        exec_cmds._account("0")
