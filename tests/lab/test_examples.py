"""The programs of examples/ on real labs, run as a user runs them: through
`mrc-nic exec HOST -- python examples/X.py`, server first, then, once it
listens, the client.
Their outputs parse, the receiver's byte check passed, and the all-reduce
agrees with numpy on every rank of clos-8."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.env import MRC, ROOT
from tests.helpers.hostpair import run_server_client

EXAMPLES = ROOT / "examples"
TIMEOUT = 120  # seconds for any one program; the programs' own waits are shorter


def in_host(lab: str, host: str, script: str, *args: str) -> list[str]:
    program = [sys.executable, str(EXAMPLES / script), *args]
    return [*MRC, "exec", "-l", lab, host, "--", *program]


def run_pair(topo, script: str, server_args: list[str], client_args: list[str]):
    """The server on h1, then the client on h0 naming h1's plane-0 address:
    (client, server) as CompletedProcess-like (returncode, stdout, stderr)."""
    address = str(topo.host_address(1, 0))
    return run_server_client(
        in_host(topo.lab, "h1", script, "--timeout", "60", *server_args),
        in_host(topo.lab, "h0", script, address, "--timeout", "60", *client_args),
        ready="waiting for a client",
    )


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_exec_runs_a_python_that_has_mrc_nic_whatever_path_the_caller_has(default_lab):
    """As under sudo, PATH without the venv: `python` is still mrc-nic's own."""
    probe = "import mrc_nic.verbs, os, sys; print(sys.executable, os.environ['MRC_NIC_HOST'])"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    cmd = [*MRC, "exec", "-l", default_lab.lab, "h1", "--", "python", "-c", probe]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert done.returncode == 0, done.stderr
    executable, host = done.stdout.split()
    assert Path(executable).parent == Path(sys.executable).parent and host == "h1"


def test_write_bw_sweeps_sizes_and_the_server_checks_every_byte(default_lab):
    sweep = ["--min-size", "1000", "--size", "9000", "--step-factor", "3"]
    client, server = run_pair(
        default_lab,
        "write_bw.py",
        ["--json"],
        [*sweep, "--iters", "200", "--warmup", "5", "--json"],
    )
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server.stderr
    rows = json_lines(client.stdout)
    assert [(r["size"], r["ops"]) for r in rows] == [(1000, 200), (3000, 200), (9000, 200)]
    assert all(r["gbps"] > 0 and r["mpps"] > 0 for r in rows), rows
    # each size's verdict: which resource bound it, with the figures it rests on
    assert all(r["fidelity"]["verdict"] in ("links", "cpu", "application") for r in rows), rows
    assert all(r["fidelity"]["cpu"]["cores"] for r in rows)
    checks = json_lines(server.stdout)
    assert [(c["size"], c["checked"], c["errors"]) for c in checks] == [
        (1000, 1000, 0),
        (3000, 3000, 0),
        (9000, 9000, 0),
    ]


def test_write_lat_reports_one_way_percentiles(default_lab):
    client, server = run_pair(
        default_lab,
        "write_lat.py",
        [],
        ["--size", "64", "--iters", "200", "--warmup", "10", "--json"],
    )
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server.stderr
    (result,) = json_lines(client.stdout)
    assert (result["size"], result["iters"]) == (64, 200)
    assert 0 < result["p50_us"] <= result["p99_us"] <= result["p99_9_us"], result
    assert result["fidelity"]["verdict"] in ("links", "cpu", "application")
    assert "served 210 round trips of 64 B" in server.stdout


def test_allreduce_on_every_host_of_clos8_matches_numpy(make_lab):
    topo = make_lab("ar", "clos-8.toml")
    launch = [sys.executable, str(EXAMPLES / "allreduce.py"), "--launch", "--lab", topo.lab]
    done = subprocess.run(
        [*launch, "--size", "64K", "--timeout", "150", "--json"],
        capture_output=True,
        text=True,
        timeout=200,  # the launcher stops its ranks at 150 s
    )
    assert done.returncode == 0, done.stdout + done.stderr
    *ranks, summary = json_lines(done.stdout)
    fid = summary.pop("fidelity")
    assert summary == {"world": 8, "ok": True, "failed": [], "stopped": []}
    assert fid["verdict"] in ("links", "cpu", "application") and fid["links"] is not None
    assert sorted(r["rank"] for r in ranks) == list(range(8))
    assert {r["host"] for r in ranks} == {f"h{k}" for k in range(8)}
    assert all(r["ok"] and r["max_error"] < 1e-4 and r["elements"] == 16384 for r in ranks)
