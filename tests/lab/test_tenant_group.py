"""Running without root (issue 28, item 2; docs/api.md, "Running without root"):
a lab whose topology names a [tenants] group opens its host daemons' sockets
to that group. A member, run in a host by `mrc-nic exec --user`, opens a
session there; operator operations and operator commands stay root's; anyone
else is kept out by the socket's mode, and by the daemon when the mode lets
them through. The users and the group are made here with unique names and
deleted by those names at the end."""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import stat
import subprocess
import sys
import textwrap

import pytest

from mrc_nic.contract import daemonops
from mrc_nic.lab import client
from tests.helpers.env import MRC, NETNS_DIR, ROOT, unique_lab
from tests.helpers.hostpair import run_server_client

TIMEOUT = 120


@pytest.fixture(scope="module")
def accounts():
    """(group, member, outsider): a group, a user in it and one not."""
    tag = os.getpid() % 100000
    group, member, outsider = f"mrcg{tag}", f"mrcm{tag}", f"mrco{tag}"
    for name, exists in ((group, grp.getgrnam), (member, pwd.getpwnam), (outsider, pwd.getpwnam)):
        with pytest.raises(KeyError):  # never take over a name that is someone's
            exists(name)
    made: list[list[str]] = []
    try:
        subprocess.run(["groupadd", group], check=True)
        made.append(["groupdel", group])
        for user, extra in ((member, ["-G", group]), (outsider, [])):
            subprocess.run(
                ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", *extra, user], check=True
            )
            made.append(["userdel", user])
        yield group, member, outsider
    finally:
        for cmd in reversed(made):
            subprocess.run(cmd, check=False)


@pytest.fixture(scope="module")
def lab(accounts, tmp_path_factory):
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import topology

    group = accounts[0]
    path = tmp_path_factory.mktemp("tenants") / "grouped.toml"
    text = (NETNS_DIR / "single-plane.toml").read_text()
    path.write_text(f'{text}\n[tenants]\ngroup = "{group}"\n')
    topo = topology.load(path, lab=unique_lab("tg"))
    testbed.up(topo)
    try:
        yield topo
    finally:
        testbed.down(topo.lab)


def as_user(lab, user: str, host: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MRC, "exec", "-l", lab.lab, "--user", user, host, "--", *command],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
    )


# Who the program is, and what the host's daemon says to it: a session
# (app_hello) and an operator's operation (qp_list) on the same connection.
SESSION = textwrap.dedent(
    """
    import json, os
    from mrc_nic.contract import appops, daemonops
    from mrc_nic.lab import client
    out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
           "home": os.environ["HOME"], "user": os.environ["USER"],
           "lab": os.environ["MRC_NIC_LAB"], "host": os.environ["MRC_NIC_HOST"]}
    try:
        with client.Session(out["lab"], out["host"]) as s:
            out["hello"] = s.call(appops.Hello(pid=os.getpid())).host
            for name, request in (("qp_list", daemonops.QpList()), ("ping", daemonops.Ping())):
                try:
                    s.call(request)
                    out[name] = "answered"
                except client.DaemonError as e:
                    out[name] = [e.errno_name, str(e)]
    except client.DaemonError as e:
        out["hello"] = [e.errno_name, str(e)]
    except PermissionError as e:
        out["hello"] = ["connect", e.errno, str(e)]
    print(json.dumps(out))
    """
)


def session(lab, user: str, host: str = "h0") -> dict:
    done = as_user(lab, user, host, "python", "-c", SESSION)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_host_sockets_are_the_groups_and_the_event_log_stays_roots(lab, accounts):
    gid = grp.getgrnam(accounts[0]).gr_gid
    for host in lab.host_names():
        st = os.stat(client.socket_path(lab.lab, host))
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, gid, 0o660), host
    st = os.stat(client.socket_path(lab.lab, client.EVENTS_SERVICE))
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)
    run_dir = client.socket_path(lab.lab, "h0").parent
    for d in (run_dir, run_dir.parent):
        assert os.stat(d).st_mode & 0o011 == 0o011, d  # the group can search it


def test_a_member_opens_a_session_in_its_host_and_operator_operations_stay_roots(lab, accounts):
    group, member, _ = accounts
    me = pwd.getpwnam(member)
    got = session(lab, member)
    assert (got["uid"], got["user"], got["home"]) == (me.pw_uid, member, me.pw_dir)
    assert grp.getgrnam(group).gr_gid in got["groups"]
    assert (got["lab"], got["host"]) == (lab.lab, "h0")
    assert got["hello"] == "h0"
    for op in ("qp_list", "ping"):
        name, message = got[op]
        assert name == "EPERM", got
        assert f"{op} is an operator's operation and uid {me.pw_uid} is not root" in message
        assert "mrc-nic needs root for it; run it with sudo" in message and "\n" not in message


def test_anyone_else_is_kept_out_by_the_socket_and_by_the_daemon(lab, accounts):
    group, _, outsider = accounts
    got = session(lab, outsider)
    assert got["hello"][:2] == ["connect", errno.EACCES], got  # the socket's mode
    # With the mode wider than the lab makes it (an operator's slip), the
    # daemon itself refuses, on the kernel's word about the peer.
    sock = client.socket_path(lab.lab, "h0")
    os.chmod(sock, 0o666)
    try:
        got = session(lab, outsider)
    finally:
        os.chmod(sock, 0o660)
    name, message = got["hello"]
    uid = pwd.getpwnam(outsider).pw_uid
    assert name == "EPERM", got
    assert f"(uid {uid}, {outsider}) may not open lab {lab.lab}'s NICs" in message
    assert f"only root and group {group!r} may" in message
    assert f"`usermod -aG {group} {outsider}` as root, then log in again" in message


def test_a_member_outside_the_lab_names_no_host(lab, accounts):
    """The group says who; the host rule says where: a member in the machine's
    own namespace may not name a lab and host (root may)."""
    group, member, _ = accounts
    me = pwd.getpwnam(member)
    code = (
        "import os\nfrom mrc_nic.contract import appops\nfrom mrc_nic.lab import client\n"
        f"s = client.Session({lab.lab!r}, 'h0')\n"
        "try:\n    s.call(appops.Hello(pid=os.getpid()))\n    print('opened')\n"
        "except client.DaemonError as e:\n    print(e.errno_name, e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
        user=me.pw_uid,
        group=me.pw_gid,
        extra_groups=[grp.getgrnam(group).gr_gid],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("EPERM "), done.stdout
    assert "only root may name a lab and host from there" in done.stdout


@pytest.mark.parametrize(
    "command",
    [["down", "-l", "{lab}"], ["fail", "-l", "{lab}", "--mode", "down", "p0.t0a-h0"]],
    ids=["down", "fail"],
)
def test_operator_commands_by_a_member_keep_their_one_line(lab, accounts, command):
    _, member, _ = accounts
    args = [a.format(lab=lab.lab) for a in command]
    done = as_user(lab, member, "h0", "python", "-m", "mrc_nic", *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("error: mrc-nic needs root") and done.stderr.count("\n") == 1
    assert "run it with sudo" in done.stderr
    assert client.call(lab.lab, "h0", daemonops.Ping()).host == "h0"  # the lab is still up


def test_a_member_writes_and_the_receiver_checks_every_byte(lab, accounts):
    """The whole path without root: WRITE from h0 to h1, both programs a member's."""
    _, member, _ = accounts
    script = str(ROOT / "examples" / "write_bw.py")
    address = str(lab.host_address(1, 0))

    def run(host: str, *args: str) -> list[str]:
        cmd = ["python", script, "--timeout", "60", "--json", *args]
        return [*MRC, "exec", "-l", lab.lab, "--user", member, host, "--", *cmd]

    client_run, server = run_server_client(
        run("h1"),
        run("h0", address, "--min-size", "4096", "--size", "65536", "--iters", "100"),
        ready="waiting for a client",
    )
    assert client_run.returncode == 0, client_run.stderr
    assert server.returncode == 0, server.stderr
    checks = [json.loads(x) for x in server.stdout.splitlines() if x.startswith("{")]
    assert checks and all(c["errors"] == 0 and c["checked"] == c["size"] for c in checks)


def test_a_members_c_program_runs_unmodified(lab, accounts):
    """perftest's ib_write_bw as a member, through the native library: its
    session hands it its NIC resources as descriptors, so no privilege is
    needed (docs/api.md, "Isolation and cleanup")."""
    import shutil

    if shutil.which("ib_write_bw") is None:
        pytest.skip("ib_write_bw is not installed (scripts/setup installs it)")
    _, member, _ = accounts
    program = ["ib_write_bw", "-s", "65536", "-n", "200"]

    def run(host: str, *args: str) -> list[str]:
        return [*MRC, "exec", "-l", lab.lab, "--user", member, host, "--", *program, *args]

    client_run, server = run_server_client(
        run("h1"), run("h0", str(lab.host_address(1, 0))), settle=1.5
    )
    assert client_run.returncode == 0, client_run.stderr
    assert server.returncode == 0, server.stderr
    assert "65536" in client_run.stdout  # its result row
