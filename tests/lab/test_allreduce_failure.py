"""`mrc-nic scenario allreduce-failure` on a real lab, small: the ring
all-reduce over the lab's hosts, healthy and with a plane blackholed mid-job,
completes with every step verified; the fault was in force during the job and
is healed after it (issue 20 item 8)."""

from __future__ import annotations

import json

import pytest

from mrc_nic.fabric import faults
from mrc_nic.lab import state
from mrc_nic.workloads import experiments
from tests.helpers.env import run_cli

pytestmark = [pytest.mark.root, pytest.mark.netns]
MIB = 2**20


def test_ring_all_reduce_through_a_plane_blackhole_is_verified(default_lab):
    lab = default_lab.lab
    # Large enough that a fault put in force a quarter into it (a netlink
    # change: ms on a loaded machine) lands while the job still runs.
    r = experiments.allreduce_failure(lab, size=32 * MIB + 1025, at=0.25, limit_s=60)
    assert r["completed"] and r["verified"], r
    assert r["hosts"] == default_lab.host_names() and r["steps"] == 2
    f = r["fault"]
    assert f["error"] is None and f["step"] == 0
    assert 0 <= f["in_force_at_s"] <= r["failed_job_s"]  # in force while the job ran
    assert r["slowdown"] == pytest.approx(r["failed_job_s"] / r["healthy_job_s"])
    assert len(r["step_s"]["healthy"]) == len(r["step_s"]["failed"]) == 2
    record, _ = state.open_lab(lab)
    assert not record.faults  # healed when the job ended


def test_cli_reports_json_and_refuses_a_bad_target_in_one_line(default_lab):
    lab = default_lab.lab
    out = run_cli(
        "scenario", "allreduce-failure", "--size", "2M", "--fault", "p1.t1a-t0a",
        "--at", "0.5", "--lab", lab, "--format", "json", timeout=300,
    )  # fmt: skip
    r = json.loads(out.stdout)
    assert r["scenario"] == "allreduce-failure" and r["completed"] and r["verified"]
    assert r["fault"]["target"] == "p1.t1a-t0a" and r["fault"]["step"] == 1
    bad = run_cli("scenario", "allreduce-failure", "--fault", "plane 9", "--lab", lab, check=False)
    assert bad.returncode == 2 and "plane" in bad.stderr
    assert not faults.heal(lab, None)  # nothing was left in force
