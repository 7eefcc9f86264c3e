"""Preflight checks fail with one clear line that says how to fix it."""

from __future__ import annotations

import pytest

from mrc_nic.fabric import preflight, testbed
from mrc_nic.lab import topology
from tests.helpers.env import NETNS_DIR


def test_not_root_is_refused_before_anything_is_made(monkeypatch):
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 1000)
    with pytest.raises(preflight.PreflightError, match="needs root.*sudo"):
        testbed.up(topology.load(NETNS_DIR / "default.toml", lab="znoroot"))


def test_bpffs_missing_says_how_to_mount_it(monkeypatch, tmp_path):
    monkeypatch.setattr(preflight, "BPFFS", str(tmp_path))
    with pytest.raises(preflight.PreflightError, match="mount -t bpf bpf"):
        preflight.require_bpffs()


def test_missing_kernel_headers_point_to_setup(monkeypatch):
    monkeypatch.setattr(preflight.os.path, "exists", lambda p: False)
    with pytest.raises(preflight.PreflightError, match="no kernel headers.*scripts/setup"):
        preflight.require_bcc()
