"""Where the repository is, how to run the CLI, and why a tier cannot run here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NETNS_DIR = ROOT / "netns"
MRC = [sys.executable, "-m", "mrc_nic"]


def why_no_lab() -> str | None:
    """Why a lab cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, BPF)"
    try:
        from mrc_nic.fabric import preflight

        preflight.require_bpffs()
        preflight.require_bcc()
    except Exception as e:  # the reason is the skip message
        return str(e)
    if shutil.which("ping") is None:
        return "needs ping (iputils-ping; scripts/setup installs it)"
    return None


def why_no_bpf() -> str | None:
    """Why BPF programs cannot be loaded here (cheap checks), or None."""
    if os.geteuid() != 0:
        return "needs root to load BPF programs"
    try:
        import bcc  # noqa: F401
    except ImportError as e:
        return f"bcc (python3-bpfcc) is not importable: {e}"
    return None


def mark_tier(items, folder: Path, marks: tuple[str, ...], why_not: str | None) -> None:
    """Give every test under `folder` the tier's markers, and skip it with the
    reason when this machine cannot run the tier."""
    for item in items:
        if folder in item.path.parents:
            for name in marks:
                item.add_marker(getattr(pytest.mark, name))
            if why_not is not None:
                item.add_marker(pytest.mark.skip(reason=why_not))


def require_root_and_bcc() -> None:
    """Skip unless BPF programs can be compiled and loaded here."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    try:
        from bcc import BPF
    except ImportError as e:
        pytest.skip(f"bcc (python3-bpfcc) is not importable: {e}")
    # A trivial program: if this fails the environment (kernel headers, bcc)
    # is broken, not the project's C, whose compile errors must fail the tests.
    try:
        BPF(text=b"int f(struct __sk_buff *skb) { return 0; }").cleanup()
    except Exception as e:
        pytest.skip(f"bcc cannot compile a trivial program (kernel headers?): {e}")


def unique_lab(tag: str) -> str:
    """A lab name no other test run uses: [a-z0-9]{1,12}."""
    return f"{tag}{os.getpid() % 100000}"[:12]


def run_cli(*args: str, check: bool = True, timeout: float = 120, env: dict | None = None):
    proc = subprocess.run(
        [*MRC, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"mrc-nic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc
