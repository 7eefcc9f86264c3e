"""CLI and fault logic without a lab: specs, targets, enforcement points,
durations, click wiring and the one-line error path.

Tier 1: pure Python, no root needed, no namespaces, no BPF. The subprocess
tests run `mrc-nic up` with files that fail while loading the topology, so
nothing is created; they check that too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from mrc_nic.cli import cli
from mrc_nic.cli.common import DURATION
from mrc_nic.fabric import faults
from mrc_nic.fabric.faults import FaultError, FaultSpec, enforcement_points, resolve_target
from mrc_nic.fabric.switchport import EGRESS, INGRESS
from mrc_nic.lab import state as state_errors
from mrc_nic.lab import topology
from mrc_nic.units import parse_duration
from tests.helpers.env import NETNS_DIR, ROOT

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
RUN_NETNS = Path("/run/netns")


@pytest.fixture(scope="module")
def topo():
    return topology.load(NETNS_DIR / "default.toml")


# ---- FaultSpec.validate ------------------------------------------------------
VALID_SPECS = [
    FaultSpec("down"),
    FaultSpec("down", duration=2.0),
    FaultSpec("blackhole"),
    FaultSpec("blackhole", "up"),
    FaultSpec("blackhole", "down", duration=0.5),
    FaultSpec("loss", rate=0.2),
    FaultSpec("loss", rate=1.0, seed=7),
    FaultSpec("loss", "up", rate=0.001, seed=0, duration=1.0),
    FaultSpec("flap", period=0.2),
    FaultSpec("flap", period=0.02, duration=5.0),
]


@pytest.mark.parametrize("spec", VALID_SPECS, ids=repr)
def test_valid_fault_specs(spec):
    spec.validate()  # raises on error


# spec, fragments of the message that say how to fix it
INVALID_SPECS = [
    ("unknown-mode", FaultSpec("explode"), ["unknown mode 'explode'", "down, blackhole, loss"]),
    ("bad-direction", FaultSpec("blackhole", "sideways"), ["--direction", "both, up, down"]),
    ("loss-no-rate", FaultSpec("loss"), ["--mode loss needs --rate", "0 < R <= 1"]),
    ("loss-rate-0", FaultSpec("loss", rate=0.0), ["0 < R <= 1"]),
    ("loss-rate-negative", FaultSpec("loss", rate=-0.1), ["0 < R <= 1"]),
    ("loss-rate-over-1", FaultSpec("loss", rate=1.5), ["0 < R <= 1"]),
    ("loss-rate-nan", FaultSpec("loss", rate=float("nan")), ["0 < R <= 1"]),
    ("rate-with-blackhole", FaultSpec("blackhole", rate=0.5), ["--rate goes with --mode loss"]),
    ("rate-with-down", FaultSpec("down", rate=0.5), ["--rate goes with --mode loss"]),
    ("seed-with-blackhole", FaultSpec("blackhole", seed=7), ["--seed goes with --mode loss"]),
    ("seed-with-flap", FaultSpec("flap", seed=7, period=0.2), ["--seed goes with --mode loss"]),
    ("flap-no-period", FaultSpec("flap"), ["--mode flap needs --period", "20ms"]),
    ("flap-period-short", FaultSpec("flap", period=0.019), ["at least 20ms", "200ms"]),
    ("flap-period-0", FaultSpec("flap", period=0.0), ["at least 20ms"]),
    ("period-with-down", FaultSpec("down", period=0.2), ["--period goes with --mode flap"]),
    ("period-with-loss", FaultSpec("loss", rate=0.1, period=0.2), ["--period goes with"]),
    ("down-direction-up", FaultSpec("down", "up"), ["drop --direction", "--mode blackhole"]),
    ("down-direction-down", FaultSpec("down", "down"), ["drop --direction"]),
    ("flap-direction-up", FaultSpec("flap", "up", period=0.2), ["drop --direction"]),
    ("flap-direction-down", FaultSpec("flap", "down", period=0.2), ["drop --direction"]),
    ("duration-negative", FaultSpec("blackhole", duration=-1.0), ["--duration must be positive"]),
    ("duration-zero", FaultSpec("down", duration=0.0), ["--duration must be positive", "2s"]),
]


@pytest.mark.parametrize(
    "spec, fragments", [c[1:] for c in INVALID_SPECS], ids=[c[0] for c in INVALID_SPECS]
)
def test_invalid_fault_specs(spec, fragments):
    with pytest.raises(FaultError) as exc:
        spec.validate()
    msg = str(exc.value)
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
    assert "\n" not in msg


def test_every_user_error_shares_the_base_the_cli_prints_as_one_line():
    import importlib
    import pkgutil

    import mrc_nic
    from mrc_nic.errors import MrcNicError

    user_errors = {
        "FaultError", "LabNotUp", "LabBusy", "BadLabName", "DaemonError", "RequestError",
        "TopologyError", "QueueError", "FabricError", "LabError", "PreflightError",
        "CaptureError", "TrafficError", "MapsMissing", "MapsMismatch", "QpError",
    }  # fmt: skip
    found = {}
    for info in pkgutil.walk_packages(mrc_nic.__path__, "mrc_nic."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name in user_errors & set(vars(module)):
            found[name] = getattr(module, name)
    assert set(found) == user_errors
    for name, cls in found.items():
        assert issubclass(cls, MrcNicError), name


# ---- resolve_target ------------------------------------------------------------
def names(links):
    return sorted(lk.name for lk in links)


def test_target_link(topo):
    label, links = resolve_target(topo, ("p1.t0a-h0",))
    assert label == "p1.t0a-h0"
    assert links == [topo.links["p1.t0a-h0"]]


@pytest.mark.parametrize(
    "given, canonical", [("p1.h0-t0a", "p1.t0a-h0"), ("p1.t0b-t1a", "p1.t1a-t0b")]
)
def test_target_reversed_link(topo, given, canonical):
    label, links = resolve_target(topo, (given,))
    assert label == canonical
    assert links == [topo.links[canonical]]


def test_target_switch(topo):
    label, links = resolve_target(topo, ("p1.t0a",))
    assert label == "switch p1.t0a"
    assert names(links) == ["p1.t0a-h0", "p1.t1a-t0a", "p1.t1b-t0a"]


def test_target_spine(topo):
    label, links = resolve_target(topo, ("p0.t1b",))
    assert label == "switch p0.t1b"
    assert names(links) == ["p0.t1b-t0a", "p0.t1b-t0b"]


def test_target_host(topo):
    label, links = resolve_target(topo, ("h0",))
    assert label == "host h0"
    assert names(links) == ["p0.t0a-h0", "p1.t0a-h0", "p2.t0a-h0", "p3.t0a-h0"]
    assert sorted(lk.plane for lk in links) == [0, 1, 2, 3]


@pytest.mark.parametrize("port", ["h0.eth1", "h0:eth1"])
def test_target_host_port(topo, port):
    label, links = resolve_target(topo, (port,))
    assert label == port
    assert links == [topo.links["p1.t0a-h0"]]


def test_target_host_port_other_host(topo):
    _, links = resolve_target(topo, ("h1.eth3",))
    assert links == [topo.links["p3.t0b-h1"]]


def test_target_plane(topo):
    label, links = resolve_target(topo, ("plane", "2"))
    assert label == "plane 2"
    assert len(links) == 6
    assert all(lk.plane == 2 for lk in links)
    assert names(links) == sorted(n for n in topo.links if n.startswith("p2."))


@pytest.mark.parametrize(
    "words, plain",
    [
        (("switch", "p1.t0a"), ("p1.t0a",)),
        (("link", "p1.t0a-h0"), ("p1.t0a-h0",)),
        (("port", "h0.eth1"), ("h0.eth1",)),
        (("host", "h0"), ("h0",)),
        (("", "h0"), ("h0",)),
    ],
)
def test_target_optional_kind_word(topo, words, plain):
    assert resolve_target(topo, words) == resolve_target(topo, plain)


@pytest.mark.parametrize("name, suggestion", [("p1.t0a-h9", "p1.t0a-h0"), ("p1.t0x", "p1.t0a")])
def test_target_unknown_suggests(topo, name, suggestion):
    with pytest.raises(FaultError) as exc:
        resolve_target(topo, (name,))
    msg = str(exc.value)
    assert f"unknown target {name!r}" in msg
    assert "did you mean" in msg
    assert suggestion in msg
    assert "mrc-nic status" in msg


@pytest.mark.parametrize("name", ["h0.eth9", "h7", "qqqqqqqqqqqqqq"])
def test_target_unknown(topo, name):
    with pytest.raises(FaultError, match="unknown target") as exc:
        resolve_target(topo, (name,))
    assert "plane N" in str(exc.value)  # lists what a target can be


def test_target_plane_out_of_range(topo):
    with pytest.raises(FaultError) as exc:
        resolve_target(topo, ("plane", "9"))
    assert "no plane 9" in str(exc.value)
    assert "0..3" in str(exc.value)


def test_target_plane_not_a_number(topo):
    with pytest.raises(FaultError) as exc:
        resolve_target(topo, ("plane", "x"))
    assert "plane must be a number 0..3" in str(exc.value)
    assert "'x'" in str(exc.value)


@pytest.mark.parametrize("words", [(), ("a", "b", "c"), ("plane",), ("plane", "1", "2")])
def test_target_unreadable(topo, words):
    with pytest.raises(FaultError):
        resolve_target(topo, words)


# ---- enforcement points ----------------------------------------------------------
def test_enforcement_host_link(topo):
    link = topo.links["p1.t0a-h0"]
    upper = link.upper.port_id
    assert isinstance(upper, int)
    assert link.lower.port_id is None
    assert enforcement_points(link, "up") == [(upper, INGRESS)]
    assert enforcement_points(link, "down") == [(upper, EGRESS)]
    assert enforcement_points(link, "both") == [(upper, INGRESS), (upper, EGRESS)]


def test_enforcement_fabric_link(topo):
    link = topo.links["p1.t1a-t0b"]
    upper, lower = link.upper.port_id, link.lower.port_id
    assert isinstance(upper, int) and isinstance(lower, int) and upper != lower
    assert topo.nodes[link.upper.node].kind == "t1"
    assert enforcement_points(link, "up") == [(upper, INGRESS)]
    assert enforcement_points(link, "down") == [(lower, INGRESS)]
    assert enforcement_points(link, "both") == [(upper, INGRESS), (lower, INGRESS)]


def test_enforcement_points_are_distinct_over_a_plane(topo):
    # two links never share a drop point, so faults on them never collide
    _, links = resolve_target(topo, ("plane", "1"))
    points = [pt for lk in links for pt in enforcement_points(lk, "both")]
    assert len(points) == 2 * len(links)
    assert len(set(points)) == len(points)
    assert INGRESS != EGRESS


# ---- durations -----------------------------------------------------------------
@pytest.mark.parametrize(
    "text, seconds",
    [
        ("2s", 2.0),
        ("500ms", 0.5),
        ("100us", 1e-4),
        ("1.5", 1.5),
        ("1m", 60.0),
        ("0.25s", 0.25),
        (" 200ms ", 0.2),
        ("2 s", 2.0),
        ("0", 0.0),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "s", "abc", "2h", "-1s", "1.2.3", "1e3", "2ss", "1 m s"])
def test_parse_duration_errors(bad):
    with pytest.raises(ValueError) as exc:
        parse_duration(bad)
    assert repr(bad) in str(exc.value)
    assert "500ms" in str(exc.value)


def test_duration_param_type():
    assert DURATION.convert("200ms", None, None) == pytest.approx(0.2)
    assert DURATION.convert(1.5, None, None) == 1.5
    with pytest.raises(click.BadParameter, match="cannot read duration"):
        DURATION.convert("soon", None, None)


# ---- click wiring ------------------------------------------------------------------
COMMANDS = [
    "up",
    "exec",
    "down",
    "status",
    "fail",
    "heal",
    "chaos",
    "port",
    "nic-port",
    "cc",
    "stats",
    "traffic",
    "ping",
    "capture",
    "write",
    "qp",
    "ev",
    "events",
    "scenario",
    "doctor",
]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_commands(flag):
    result = CliRunner().invoke(cli, [flag])
    assert result.exit_code == 0, result.output
    commands = result.output.split("Commands:", 1)[1]
    listed = {line.split()[0] for line in commands.splitlines() if line.startswith("  ")}
    assert set(COMMANDS) <= listed
    assert "Examples:" in result.output


def test_registered_commands():
    assert set(cli.list_commands(click.Context(cli))) == set(COMMANDS)


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert "mrc-nic" in result.output and "0.1.0" in result.output


def test_fail_help_shows_examples():
    result = CliRunner().invoke(cli, ["fail", "--help"])
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output
    assert "mrc-nic fail p1.t0a-h0 --mode blackhole --duration 2s" in result.output
    assert "mrc-nic fail plane 2 --mode down" in result.output
    assert "--mode [down|blackhole|loss|flap]" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage:")


def test_fail_choices_match_fault_module():
    params = {p.name: p for p in cli.get_command(click.Context(cli), "fail").params}
    assert tuple(params["mode"].type.choices) == faults.MODES
    assert tuple(params["direction"].type.choices) == faults.DIRECTIONS


# Usage errors are caught by click before the command runs: no lab is touched.
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["fail", "p1.t0a-h0", "--mode", "explode"], "'explode' is not one of"),
        (["fail", "p1.t0a-h0"], "Missing option '--mode'"),
        (["fail", "--mode", "down"], "Missing argument 'TARGET...'"),
        (["fail", "h0", "--mode", "down", "--direction", "left"], "'left' is not one of"),
        (["fail", "h0", "--mode", "flap", "--period", "soon"], "cannot read duration 'soon'"),
        (["fail", "h0", "--mode", "loss", "--rate", "lots"], "'lots' is not a valid float"),
        (["fail", "h0", "--mode", "down", "--format", "xml"], "'xml' is not one of"),
        (["nosuchcommand"], "no such command 'nosuchcommand'"),
        (["statuss"], "did you mean status?"),
        (["fail", "h0", "--mode", "lossy"], "did you mean loss?"),
        (["fail", "h0", "--mode", "down", "--direction", "upp"], "did you mean up?"),
        (["stats", "--by", "planes"], "did you mean plane?"),
        (["-l", "Bad", "status"], "bad lab name 'Bad'"),
        (["-l", "aa", "status", "-l", "bb"], "two labs named: aa before the command and bb"),
    ],
)
def test_usage_errors(args, fragment):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output


# ---- main(): the one-line error path, in a subprocess -------------------------------
def lab_namespaces(lab: str) -> list[str]:
    if not RUN_NETNS.is_dir():
        return []
    return sorted(n for n in os.listdir(RUN_NETNS) if n.startswith(f"mrc-{lab}-"))


def run_mrc(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    run_dir = tmp_path / "run"
    return subprocess.run(
        [PYTHON, "-m", "mrc_nic", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        # narrow terminal: the error must still be one line; state stays in tmp
        env={**os.environ, "COLUMNS": "40", "MRC_NIC_RUN_DIR": str(run_dir)},
    )


def assert_one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_main_missing_topology_file(tmp_path):
    missing = "/nonexistent.toml"
    assert not Path(missing).exists()
    proc = run_mrc(tmp_path, "up", "-t", missing)
    line = assert_one_error_line(proc)
    assert missing in line
    assert "no such topology file" in line
    assert lab_namespaces("nonexistent") == []
    assert not (tmp_path / "run" / "nonexistent").exists()


BAD_FOR_MAIN = [
    ("[fabric]\nhosts = 0\nplanes = 1\n", "fabric.hosts"),
    ("[fabric]\nhosts = 2\nplanes = 1\n[links]\nrate = 'fast'\n", "links.rate"),
    ("[fabric]\nhosts = 2\nplanes = 1\nbogus = 1\n", "fabric.bogus"),
    ("[fabric\nhosts = 2\n", "not valid TOML"),
]


@pytest.mark.parametrize("body, key", BAD_FOR_MAIN, ids=[k for _, k in BAD_FOR_MAIN])
def test_main_bad_topology_file(tmp_path, body, key):
    path = tmp_path / "zunit.toml"
    path.write_text('[lab]\nname = "zunit"\n' + body)
    # guard: this file must fail while loading, or `up` would build a lab
    with pytest.raises(topology.TopologyError):
        topology.load(path)
    proc = run_mrc(tmp_path, "up", "-t", str(path))
    line = assert_one_error_line(proc)
    assert str(path) in line
    assert key in line
    assert lab_namespaces("zunit") == []
    assert not (tmp_path / "run" / "zunit").exists()


def test_main_usage_error_exit_code(tmp_path):
    proc = run_mrc(tmp_path, "fail", "h0", "--mode", "explode")
    assert proc.returncode == 2
    assert "'explode' is not one of" in proc.stderr
    assert "Traceback" not in proc.stderr


# One scheme for every mistake (README, "Errors and exit codes"): one line on
# stderr starting "error: ", exit 2 when the command line is wrong, click's own
# usage errors included (not its Usage:/Try:/Error: block).
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["status", "--bogus"], "No such option '--bogus'"),  # a bad option
        (["fail", "h0", "--mode", "lossy"], "did you mean loss?"),  # a bad choice
        (["fail", "--mode", "down"], "Missing argument 'TARGET...'"),  # a missing argument
        (["heal"], "give fault ids or a target, or --all"),  # the command's own usage error
        (["events", "--since", "yesterday"], "--since"),
        (["nosuch"], "no such command 'nosuch'"),
        (["-l", "UPPER", "status"], "bad lab name 'UPPER'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, fragment):
    proc = run_mrc(tmp_path, *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: ") and fragment in line, line
    assert line.count("--help`") == 1, "where the help is, said once"
    assert proc.stdout == ""


def test_lab_option_before_and_after_the_command(monkeypatch):
    from mrc_nic.observe import stats

    asked = []

    def snapshot(lab, **_):
        asked.append(lab)
        raise state_errors.LabNotUp(f"lab {lab!r} is not up")

    monkeypatch.setattr(stats, "snapshot", snapshot)
    monkeypatch.delenv("MRC_NIC_LAB", raising=False)
    for args in (["-l", "zz", "status"], ["status", "-l", "zz"], ["--lab", "zz", "status"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, result.output
    # a shipped topology's file name names its lab (clos-8.toml makes the lab clos8)
    CliRunner().invoke(cli, ["-l", "clos-8", "status"])
    monkeypatch.setenv("MRC_NIC_LAB", "yy")
    CliRunner().invoke(cli, ["status"])
    CliRunner().invoke(cli, ["-l", "zz", "status"])  # -l wins over the environment
    assert asked == ["zz", "zz", "zz", "clos8", "yy", "zz"]


def test_shipped_topologies_by_name_and_their_labs():
    from mrc_nic.lab import names

    for stem in names.shipped_names():
        path = names.topology_file(stem)
        assert path == NETNS_DIR / f"{stem}.toml" or path.name == f"{stem}.toml"
        lab = topology.load(path).lab
        # one name for a topology and its lab: the file's name, dashes dropped
        assert lab == stem.replace("-", "")
        assert names.canonical_lab_name(stem) == lab
        assert names.topology_file(lab).name == f"{stem}.toml"
    with pytest.raises(topology.TopologyError, match="shipped, by name: .*clos-8"):
        names.topology_file("clos-9")
    for bad in ("../etc", "a/b", "UPPER", "", "a" * 13, "a.b"):
        with pytest.raises(topology.TopologyError, match="bad lab name"):
            names.canonical_lab_name(bad)


# The messages carry user text (paths, targets) and literal brackets ("allowed in
# [fabric]: ..."); they must reach the terminal verbatim.


@pytest.mark.parametrize(
    "message",
    [
        "x.toml: fabric.bogus: unknown key; allowed in [fabric]: hosts, planes",
        "/tmp/[red]x.toml: no such topology file",
        "unknown target '[/]'",
    ],
)
def test_error_prints_message_verbatim(capsys, message):
    from mrc_nic.cli import output

    output.error(message)
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_main_unknown_key_lists_its_section(tmp_path):
    path = tmp_path / "zunit.toml"
    path.write_text('[lab]\nname = "zunit"\n[fabric]\nhosts = 2\nplanes = 1\nbogus = 1\n')
    with pytest.raises(topology.TopologyError):
        topology.load(path)
    proc = run_mrc(tmp_path, "up", "-t", str(path))
    assert lab_namespaces("zunit") == []
    line = assert_one_error_line(proc)
    assert "allowed in [fabric]: hosts, planes" in line


def test_main_path_with_brackets_is_one_line(tmp_path):
    missing = tmp_path / "a[" / "]b.toml"  # str() contains "[/]"
    assert not missing.exists()
    proc = run_mrc(tmp_path, "up", "-t", str(missing))
    line = assert_one_error_line(proc)
    assert str(missing) in line


HELP_PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    sys.argv = ["mrc-nic", *json.loads(sys.argv[1])]
    from mrc_nic.cli import main
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit as e:
            code = e.code
    print(json.dumps({"bcc": "bcc" in sys.modules, "code": code, "help": out.getvalue()}))
    """
)


@pytest.mark.parametrize(
    "args", [["--help"], ["fail", "--help"], ["up", "--help"], ["status", "--help"]]
)
def test_help_does_not_import_bcc(tmp_path, args):
    proc = subprocess.run(
        [PYTHON, "-c", HELP_PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "MRC_NIC_RUN_DIR": str(tmp_path / "run")},
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None)
    assert result["help"].startswith("Usage:")
    assert result["bcc"] is False, "`mrc-nic --help` imported bcc"


# ---- scenario: argument checks (no lab needed) ------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["incast", "--rate", "10mbit"], "need --topology"),
        (["permutation", "--base-rtt", "5ms"], "need --topology"),
        (["incast", "--bystander", "h1"], "use SRC:DST"),
        (["incast", "--bystander", "h1:h2", "--no-bystander"], "exclude each other"),
        (["incast", "--no-cc", "--cc-profile", "1"], "--no-cc is CC profile 0"),
        (["incast", "--topology", "nosuch"], "no such topology file"),
    ],
)
def test_scenario_usage_errors(args, message):
    result = CliRunner().invoke(cli, ["scenario", *args, "-l", "nolab"])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_scenario_help_has_examples():
    result = CliRunner().invoke(cli, ["scenario", "--help"])
    assert result.exit_code == 0 and "Examples:" in result.output
    assert "mrc-nic scenario incast --senders 7 --topology clos-8" in result.output


def test_exec_names_a_host_of_the_lab_or_says_which_there_are(monkeypatch, tmp_path):
    from mrc_nic.lab import state, topology

    topo = topology.load(topology.Path(__file__).resolve().parents[2] / "netns" / "default.toml")
    monkeypatch.setattr(state, "open_lab", lambda name: (None, topo))
    result = CliRunner().invoke(cli, ["exec", "-l", "default", "h9", "--", "true"])
    assert result.exit_code == 2
    assert "'h9' is not a host of lab 'default' (hosts: h0, h1)" in result.output
    result = CliRunner().invoke(cli, ["exec", "-l", "default", "h0", "--", "no-such-program-x"])
    assert result.exit_code == 2 and "no such program" in result.output


def test_exec_runs_the_command_after_the_double_dash(monkeypatch):
    from mrc_nic.kernel import netns
    from mrc_nic.lab import state, topology

    topo = topology.load(topology.Path(__file__).resolve().parents[2] / "netns" / "default.toml")
    monkeypatch.setattr(state, "open_lab", lambda name: (None, topo))
    monkeypatch.setattr(netns, "enter_for_good", lambda ns: None)
    ran = []
    monkeypatch.setattr("os.execve", lambda prog, argv, env: ran.append((argv, env)))
    for argv in (["-l", "lab1", "h1", "--", "true", "x"], ["-l", "lab1", "h1", "true", "x"]):
        ran.clear()
        result = CliRunner().invoke(cli, ["exec", *argv])
        assert result.exit_code == 0, result.output
        ((got, env),) = ran
        assert got == ["true", "x"] and env["MRC_NIC_LAB"] == "lab1" and env["MRC_NIC_HOST"] == "h1"
    result = CliRunner().invoke(cli, ["exec", "-l", "lab1", "h1", "--"])
    assert result.exit_code == 2 and "no COMMAND" in result.output


def test_exec_takes_its_lab_option_after_the_host_too(monkeypatch):
    from mrc_nic.lab import state, topology

    topo = topology.load(topology.Path(__file__).resolve().parents[2] / "netns" / "default.toml")
    seen = []

    def open_lab(name):
        seen.append(name)
        return None, topo

    monkeypatch.setattr(state, "open_lab", open_lab)
    result = CliRunner().invoke(cli, ["exec", "h9", "-l", "other", "--", "true"])
    assert seen == ["other"] and "'h9' is not a host of lab 'other'" in result.output


def test_command_modules_name_every_command_of_every_module():
    # The lazy group imports a command's module from COMMAND_MODULES: a
    # command missing there would vanish from the CLI.
    import importlib
    import pkgutil

    import mrc_nic.cli as cli_pkg
    from mrc_nic.cli import COMMAND_MODULES

    found = {}
    for info in pkgutil.iter_modules(cli_pkg.__path__):
        if info.name.endswith("_cmds"):
            module = importlib.import_module(f"mrc_nic.cli.{info.name}")
            found.update({command.name: info.name for command in module.COMMANDS})
    assert found == COMMAND_MODULES


SHORT_COMMAND_PROBE = textwrap.dedent(
    """
    import json, sys
    import mrc_nic.cli, mrc_nic.cli.fault_cmds, mrc_nic.cli.lab_cmds
    import mrc_nic.fabric.faults, mrc_nic.observe.stats
    heavy = ("scapy", "pyroute2", "bcc", "rich")
    print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
    """
)


def test_short_commands_import_nothing_heavy():
    # fail, heal and status must stay fast (README, "Who may run it"): scapy, pyroute2, bcc
    # and rich cost 30-300 ms each to import, and none of these commands needs them
    # for a BPF fault or the status tables.
    proc = subprocess.run(
        [PYTHON, "-c", SHORT_COMMAND_PROBE], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def _run_main(monkeypatch, capsys, argv: list[str], euid: int):
    from mrc_nic.cli import main

    monkeypatch.setattr(sys, "argv", ["mrc-nic", *argv])
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code, capsys.readouterr()


def test_permission_refused_to_a_user_is_one_line_saying_root(monkeypatch, capsys):
    from mrc_nic.observe import stats

    def refused(lab, **_):
        raise PermissionError(13, "Permission denied", "/run/mrc-nic/zz.lock")

    monkeypatch.setattr(stats, "snapshot", refused)
    code, out = _run_main(monkeypatch, capsys, ["status", "-l", "zz"], euid=1000)
    assert code == 1
    (line,) = out.err.splitlines()
    assert line == (
        "error: mrc-nic needs root: Permission denied: /run/mrc-nic/zz.lock; run it with sudo"
    )


def test_permission_refused_to_root_keeps_its_traceback(monkeypatch):
    from mrc_nic.cli import main
    from mrc_nic.observe import stats

    def refused(lab, **_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(stats, "snapshot", refused)
    monkeypatch.setattr(sys, "argv", ["mrc-nic", "status", "-l", "zz"])
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(PermissionError):
        main()


def test_dead_daemon_hint_is_up_reuse_with_the_labs_file_and_name(monkeypatch, tmp_path):
    """The hint comes from the lab's device registry, which `up` writes; a lab
    that has none is not up."""
    from mrc_nic.contract import devices
    from mrc_nic.lab import client

    monkeypatch.setattr(devices, "RUN_DIR", tmp_path)
    assert client.restart_hint("lab2") == "the lab is not up; start it with: mrc-nic up --name lab2"
    (tmp_path / "lab2").mkdir()
    restart = "mrc-nic up --reuse -t /x/netns/clos-8.toml --name lab2"
    devices.publish(devices.Devices(lab="lab2", hosts=("h0", "h1"), restart=restart))
    assert client.restart_hint("lab2") == f"restart it with: {restart}"
    assert devices.labs() == ["lab2"] and devices.load("lab2").hosts == ("h0", "h1")
    devices.withdraw("lab2")
    assert devices.labs() == [] and devices.load("lab2") is None


def test_an_os_error_of_ours_reads_as_words_not_errno(monkeypatch, capsys):
    import errno

    from mrc_nic.kernel import pins
    from mrc_nic.observe import stats

    def missing(lab, **_):
        raise pins.MapsMissing(errno.ENOENT, "NIC maps of lab 'zz' are missing", "/sys/x")

    monkeypatch.setattr(stats, "snapshot", missing)
    code, out = _run_main(monkeypatch, capsys, ["status", "-l", "zz"], euid=0)
    assert code == 1
    assert out.err.splitlines() == ["error: NIC maps of lab 'zz' are missing: /sys/x"]
