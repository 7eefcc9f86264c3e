"""A machine's part of a run that spans machines lives only while its parent
does (agent.Agent's part_* calls, without Ray), and times cross machines as
wall-clock time (kernel.clocks)."""

from __future__ import annotations

import time

import pytest

from mrc_nic.cluster import agent as agent_mod
from mrc_nic.kernel import clocks

# A part that answers each line it is told and ends at EOF on stdin, as
# workloads.host_part does.
ECHO_PART = """
import json, sys
print(json.dumps({"started": json.loads(sys.argv[1])}), flush=True)
for raw in sys.stdin:
    print(json.dumps({"echo": json.loads(raw)}), flush=True)
"""


@pytest.fixture
def agent(tmp_path, monkeypatch):
    (tmp_path / "echo_part.py").write_text(ECHO_PART)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(agent_mod, "PART_ORPHAN_S", 1.0)
    made = agent_mod.Agent("t")
    yield made
    for pid in list(made._parts):
        made.part_end(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _read_until(agent, pid, want, deadline_s=10.0):
    got: list[dict] = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        got += agent.part_read(pid, 0.5)[0]
    return got


def test_a_part_whose_parent_keeps_calling_lives_on(agent):
    pid = agent.part_start("echo_part", {"n": 1})
    assert _read_until(agent, pid, 1) == [{"started": {"n": 1}}]
    for _ in range(6):  # 3 s, three times the orphan limit, heard every 0.5 s
        time.sleep(0.5)
        assert agent.part_alive([pid]) == []
    agent.part_tell(pid, {"x": 2})
    assert _read_until(agent, pid, 1) == [{"echo": {"x": 2}}]
    assert _alive(pid)


def test_a_part_whose_parent_falls_silent_is_ended(agent):
    pid = agent.part_start("echo_part", {"n": 1})
    assert _read_until(agent, pid, 1)
    end = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _alive(pid), "an orphaned part still runs"
    assert agent.part_alive([pid]) == [pid]
    with pytest.raises(agent_mod.ShardError, match="silent"):
        agent.part_tell(pid, {"x": 2})


def test_clock_fields_cross_machines_as_wall_time_and_come_back():
    now = time.monotonic_ns()
    message = {"done_ns": now, "bytes": 5, "name": "h0"}
    sent = clocks.mono_to_wall(message, ["done_ns"])
    assert abs(sent["done_ns"] - time.time_ns()) < 10**9
    assert sent["bytes"] == 5 and sent["name"] == "h0"
    back = clocks.wall_to_mono(sent, ["done_ns"])
    assert abs(back["done_ns"] - now) < 10**7
    assert clocks.mono_to_wall({"bytes": 5}, ["done_ns"]) == {"bytes": 5}


def test_the_orphan_limit_outlasts_several_keep_alives():
    from mrc_nic.cluster.machines import Parts

    assert agent_mod.PART_ORPHAN_S >= 4 * Parts.KEEPALIVE_S
