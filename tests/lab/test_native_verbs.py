"""Unmodified C verbs programs on real labs, run as a user runs them: through
`mrc-nic exec HOST -- PROGRAM`, which preloads the native verbs library
(mrc_nic/native). Debian's ibverbs-utils and perftest are the programs;
scripts/setup installs them."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers.env import MRC

TIMEOUT = 120  # seconds for any one program


def in_host(lab: str, host: str, *program: str) -> list[str]:
    return [*MRC, "exec", "-l", lab, host, "--", *program]


def _need(program: str) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed (scripts/setup installs it)")


def test_ibv_devices_lists_one_device_per_host_its_own_first(default_lab):
    _need("ibv_devices")
    for host, first, other in (("h0", "mrc_h0", "mrc_h1"), ("h1", "mrc_h1", "mrc_h0")):
        done = subprocess.run(
            in_host(default_lab.lab, host, "ibv_devices"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        names = [line.split()[0] for line in done.stdout.splitlines()[2:] if line.strip()]
        assert names == [first, other], done.stdout


def test_ibv_devinfo_opens_the_device_through_its_daemon(default_lab):
    """ibv_open_device + query_device + query_port: the host's daemon answers."""
    _need("ibv_devinfo")
    done = subprocess.run(
        in_host(default_lab.lab, "h0", "ibv_devinfo", "-d", "mrc_h0"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert "PORT_ACTIVE" in done.stdout and "Ethernet" in done.stdout, done.stdout


def test_without_the_preload_there_is_no_device(default_lab):
    _need("ibv_devices")
    done = subprocess.run(
        [*MRC, "exec", "--no-preload", "-l", default_lab.lab, "h0", "--", "ibv_devices"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "mrc_h0" not in done.stdout
