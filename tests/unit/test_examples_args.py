"""examples/: a bad argument is one line on stderr and exit status 2, before
anything opens a NIC; --help shows how to run each program."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers.env import ROOT

EXAMPLES = ROOT / "examples"


def parse(script: str, args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """The script's parse_args(args), as its command line would run it:
    (exit status, stdout, stderr)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))  # its `from common import ...`
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_:
        module.parse_args(args)
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("write_bw.py", ["--size", "0"], "--size: '0': must be 1 or more bytes"),
        ("write_bw.py", ["--size", "4x"], "'4x' is not a size"),
        ("write_bw.py", ["--min-size", "4K", "--size", "1K"], "--min-size (4096) is larger"),
        ("write_bw.py", ["--step-factor", "1"], "--step-factor must be more than 1"),
        ("write_bw.py", ["--port", "0"], "--port: '0': must be 1 to 65535"),
        ("write_bw.py", ["no-such-host.invalid"], "is not an address"),
        ("write_lat.py", ["--iters", "0"], "--iters: '0': must be 1 or more"),
        ("write_lat.py", ["--size", "1G"], "must be 0 to 33554432 bytes"),
        ("allreduce.py", [], "one of the arguments --launch --rank is required"),
        ("allreduce.py", ["--launch", "--lab", "x", "--size", "6"], "multiple of 4 bytes"),
        ("allreduce.py", ["--rank", "2", "--world", "2", "--peer-addr", "a,b"], "not below"),
        ("allreduce.py", ["--rank", "0", "--world", "3", "--peer-addr", "a,b"], "names 2 ranks"),
    ],
)
def test_a_bad_argument_is_one_line(script, args, message, monkeypatch, capsys):
    code, out, err = parse(script, args, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert err.startswith(f"{script}: error: ")


@pytest.mark.parametrize("script", ["write_bw.py", "write_lat.py", "allreduce.py"])
def test_help_says_how_to_run_it(script, monkeypatch, capsys):
    code, out, _ = parse(script, ["--help"], monkeypatch, capsys)
    assert code == 0 and "mrc-nic exec h" in out


def test_a_client_with_no_server_fails_at_once_saying_so(monkeypatch):
    """As perftest's clients: no server listening is one line after a short
    grace, not --timeout seconds of silence."""
    import argparse
    import socket
    import time

    monkeypatch.syspath_prepend(str(EXAMPLES))
    import common

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = argparse.Namespace(server="127.0.0.1", port=port, timeout=60.0)
    started = time.monotonic()
    with pytest.raises(common.ExampleError) as error:
        common.open_link(args, "write_bw.py")
    assert time.monotonic() - started < args.timeout / 2
    message = str(error.value)
    assert f"no server at 127.0.0.1:{port} (connection refused" in message
    assert "start the server first" in message and f"write_bw.py --port {port}" in message
