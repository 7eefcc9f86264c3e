"""The CLI against a live lab: every command refused to a user who is not
root, in one line; `mrc-nic chaos` with verified traffic, and the lab whole
after it."""

from __future__ import annotations

import json
import os
import subprocess
import time

import click
import pytest

from mrc_nic.cli import cli
from tests.helpers.env import MRC, ROOT, run_cli

NOBODY = 65534  # Debian's nobody/nogroup: no capability, no access to /run/mrc-nic

# Arguments that make each command reach the lab. A command missing here
# fails test_every_command_is_covered: a new command gets checked too.
ARGS = {
    "up": ["--name", "{lab}"],
    "down": [],
    "status": [],
    "fail": ["p1.t0a-h0", "--mode", "blackhole"],
    "heal": ["--all"],
    "chaos": ["--duration", "1s"],
    "port show": [],
    "port set": ["p0.t1a:t0a", "--kmin", "20k"],
    "port forwarding": [],
    "stats": [],
    "events": [],
    "traffic": ["h0", "h1", "--duration", "1s"],
    "ping": ["h0", "h1"],
    "capture": ["p0.t0a-h0", "-w", "/dev/null", "--count", "1"],
    "write": ["h0", "h1", "--size", "1M"],
    "qp list": [],
    "qp show": ["1"],
    "ev list": ["1"],
    "ev deny": ["1", "5"],
    "ev allow": ["1", "5"],
    "ev events": [],
    "ev probe": ["h0", "--dst", "h1", "--ev", "49152"],
    "ev profile list": [],
    "ev profile show": ["0"],
    "ev profile set": ["7", "--state", "offline"],
    "ev profile fmt": ["1"],
    "cc profile list": [],
    "cc profile show": ["1"],
    "cc profile set": ["7", "--state", "init"],
    "nic-port admin": ["h0", "1", "enabled"],
    "nic-port status": ["h0"],
    "nic-port update": ["h0", "--dst", "h1"],
    "scenario single-ev-loss": [],
    "scenario plane-failure": [],
    "scenario allreduce-failure": [],
    "scenario incast": ["--senders", "1"],
    "scenario permutation": [],
    "exec": ["h0", "--", "true"],
    "doctor": [],
}
# Commands that make a lab of their own rather than reach one.
NO_LAB = {"up", "doctor"}


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every command of the CLI's tree, as 'qp list', walked as --help lists them."""
    ctx = click.Context(group)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found += leaf_commands(command, (*prefix, name))
        else:
            found.append(" ".join((*prefix, name)))
    return found


def as_nobody(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MRC, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", "HOME": "/tmp"},
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )


def test_every_command_is_covered():
    assert sorted(leaf_commands(cli)) == sorted(ARGS)


@pytest.mark.parametrize("command", sorted(ARGS))
def test_a_user_who_is_not_root_gets_one_line_saying_so(default_lab, command):
    lab = default_lab.lab
    args = [a.format(lab=lab) for a in ARGS[command]]
    options = [] if command in NO_LAB else ["-l", lab]
    proc = as_nobody(*command.split(), *options, *args)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "needs root" in lines[0] and "sudo" in lines[0], lines[0]
    # and the help still works for them
    help_proc = as_nobody(*command.split(), "--help")
    assert help_proc.returncode == 0 and help_proc.stdout.startswith("Usage:"), help_proc.stderr


def test_chaos_with_verified_traffic_heals_everything(default_lab):
    lab = default_lab.lab
    before = json.loads(run_cli("status", "-l", lab, "--format", "json").stdout)
    # plane-down and switch-down included: one plane at a time, so one stays whole
    proc = run_cli(
        "chaos", "-l", lab, "--duration", "4s", "--every", "250ms", "--hold", "500ms",
        "--seed", "11", "--write-size", "4M", "--format", "json",
        check=False, timeout=120,
    )  # fmt: skip
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, (proc.stderr, report)
    assert report["faults_applied"] >= 4
    assert sum(report["faults_by_kind"].values()) == report["faults_applied"]
    assert report["faults_left"] == [] and report["qps_in_err"] == []
    t = report["traffic"]
    assert t["writes"] >= 1 and t["writes_failed"] == 0, t
    assert t["bytes_written"] == t["writes"] * 4 * 2**20 == t["bytes_verified"]

    after = json.loads(run_cli("status", "-l", lab, "--format", "json").stdout)
    assert after["faults"] == before["faults"] == []
    assert [lk["state"] for lk in after["links"]] == ["up"] * len(after["links"])
    # whole again: every plane carries a verified write
    result = json.loads(
        run_cli(
            "write", "h0", "h1", "--size", "8M", "--verify", "-l", lab, "--format", "json"
        ).stdout
    )
    assert result["completed"] and result["verified"]
    assert all(share > 0 for share in result["per_plane_share"].values()), result


# The NIC's records are timed by its monotonic clock, turned into wall-clock
# time once when the log starts; posted ones by the wall clock: they may
# disagree by this much.
CLOCKS_S = 0.005


def events_json(lab: str, *args: str) -> dict:
    return json.loads(run_cli("events", "-l", lab, "--format", "json", *args).stdout)


def test_events_tell_the_story_in_order(default_lab):
    """A blackholed plane under a write: the fault's record comes before the
    EV changes it causes, every EV record names its plane, --follow starts
    from now, and --summary counts the plane's EVs that went bad."""
    lab = default_lab.lab
    start = events_json(lab, "--since", "0")["next"]
    writer = subprocess.Popen(
        # long enough to outlast the CLI's start-up on a loaded machine
        [*MRC, "write", "h0", "h1", "--size", "2G", "-l", lab, "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while not run_cli("qp", "list", "-l", lab).stdout.count("0x"):
            assert time.monotonic() < deadline and writer.poll() is None, writer.stderr.read()
            time.sleep(0.1)
        time.sleep(0.3)
        fault = json.loads(
            run_cli(
                "fail", "plane", "2", "--mode", "blackhole", "-l", lab, "--format", "json"
            ).stdout
        )
        assert writer.poll() is None, "the write ended before the fault: nothing to see"
        time.sleep(1.0)
        run_cli("heal", str(fault["id"]), "-l", lab)
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err
    log = events_json(lab, "--since", str(start))["events"]
    (record,) = [e for e in log if e["type"] == "fault" and e["id"] == fault["id"]]
    evs = [e for e in log if e["type"] == "ev_state"]
    assert evs and all(isinstance(e["plane"], int) for e in evs), evs[:3]
    bad_on_2 = [
        e
        for e in evs
        if e["plane"] == 2
        and e["new_state"] == "ASSUMED_BAD"
        and e["time"] >= record["time"] + CLOCKS_S
    ]
    assert bad_on_2, "the blackhole made no EV of plane 2 go bad"
    assert all(e["seq"] > record["seq"] for e in bad_on_2)
    # nothing numbered before the fault happened after it
    assert all(e["time"] <= record["time"] + CLOCKS_S for e in log if e["seq"] < record["seq"])
    (heal,) = [e for e in log if e["type"] == "heal" and e["id"] == fault["id"]]
    assert heal["seq"] > record["seq"]

    # --follow starts from now: none of the records above comes back
    follow = events_json(lab, "--follow", "--duration", "1s")
    assert all(e["seq"] > heal["seq"] for e in follow["events"])
    # --summary: the plane's row in the fault's second counts what went bad there
    summary = events_json(lab, "--since", str(start), "--summary")["summary"]
    rows = [r for r in summary if r["plane"] == 2]
    assert sum(r["bad"] for r in rows) == sum(
        1 for e in evs if e["plane"] == 2 and e["new_state"] in ("ASSUMED_BAD", "DENIED")
    )
    assert any(f"fault {fault['id']} blackhole" in note for r in rows for note in r["faults"])
