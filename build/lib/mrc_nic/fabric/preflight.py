"""Checks that the machine can run a lab, each failing with one clear line."""

from __future__ import annotations

import os

from mrc_nic.errors import MrcNicError

BPFFS = "/sys/fs/bpf"
BPFFS_MAGIC = 0xCAFE4A11


class PreflightError(MrcNicError, RuntimeError):
    """The machine lacks something a lab needs; the message says how to fix it."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise PreflightError(
            "mrc-nic needs root (it creates network namespaces and loads BPF); run it with sudo"
        )


def require_bpffs() -> None:
    import ctypes

    class Statfs(ctypes.Structure):
        _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 120)]

    libc = ctypes.CDLL(None, use_errno=True)
    buf = Statfs()
    if (
        libc.statfs(BPFFS.encode(), ctypes.byref(buf)) != 0
        or buf.f_type & 0xFFFFFFFF != BPFFS_MAGIC
    ):
        raise PreflightError(
            f"bpffs is not mounted on {BPFFS}; mount it with: mount -t bpf bpf {BPFFS} "
            "(scripts/setup does this)"
        )


def require_bcc() -> None:
    try:
        import bcc  # noqa: F401
    except ImportError:
        raise PreflightError(
            "the bcc Python module is missing; run scripts/setup (Debian package python3-bpfcc)"
        ) from None
    release = os.uname().release
    if not any(
        os.path.exists(f"/lib/modules/{release}/{d}/include/linux/kconfig.h")
        for d in ("build", "source")
    ) and not os.path.exists("/sys/kernel/kheaders.tar.xz"):
        raise PreflightError(
            f"no kernel headers for {release} (bcc compiles BPF against them); "
            "run scripts/setup, which links Debian's linux-headers-amd64"
        )


def require_all() -> None:
    require_root()
    require_bpffs()
    require_bcc()
