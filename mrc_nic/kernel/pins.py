"""Pinned BPF maps of a lab: where they live, how to open and remove them.

Every program of a lab pins its maps under /sys/fs/bpf/mrc-nic/<lab>/, each
with its own names, so that short-lived CLI calls reach them through raw
bpf(2) syscalls (bpfsys) without compiling anything. Each loader removes the
pins it made; `down` then removes whatever else is pinned directly in the
lab's own directory (unpin_all), and the directory goes with the last pin.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from mrc_nic.errors import MrcNicError
from mrc_nic.kernel import bpfsys

# MRC_NIC_PIN_ROOT: another root for a machine of a cluster lab that shares
# its bpffs with other such machines (one box in tests; docs/cluster.md).
PIN_ROOT = Path(os.environ.get("MRC_NIC_PIN_ROOT", "/sys/fs/bpf/mrc-nic"))
U32_MAX = (1 << 32) - 1  # the widest map fields, for check_range
U64_MAX = (1 << 64) - 1
_LAB_NAME = re.compile(r"[a-z0-9]+")


class MapsMissing(MrcNicError, FileNotFoundError):
    """The lab's pinned maps are not there: the lab is not up (or was half removed)."""


class MapsMismatch(MrcNicError, OSError):
    """A pinned map's layout differs from this build's: pinned by another version."""


def pin_dir(lab: str) -> Path:
    """Directory on bpffs holding the pinned maps of a lab."""
    # The name becomes a path component: refuse anything that could escape PIN_ROOT.
    if not isinstance(lab, str) or not _LAB_NAME.fullmatch(lab):
        raise ValueError(f"lab name must match [a-z0-9]+, not {lab!r}")
    return PIN_ROOT / lab


def unpin(lab: str, names: tuple[str, ...] | list[str]) -> None:
    """Remove these pins of a lab, then its directory if nothing else is pinned there."""
    directory = pin_dir(lab)
    for name in names:
        (directory / name).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno != errno.ENOTEMPTY:  # another program's pins are still there
            raise


def unpin_all(lab: str) -> list[str]:
    """Remove every pin left directly in the lab's own directory, then the
    directory: pins this build does not name (another build's map, a renamed
    one) would otherwise block the next `up` of the lab. A subdirectory (no
    build of mrc-nic makes one) is left, and so is the directory then. Returns
    the names removed."""
    directory = pin_dir(lab)
    if not directory.is_dir():
        return []
    left = sorted(p.name for p in directory.iterdir() if p.is_file())
    unpin(lab, left)
    return left


def open_pinned(lab: str, path: Path, what: str, value_size: int | None = None) -> int:
    """fd of a pinned map; MapsMissing if absent, MapsMismatch if its value size
    is not `value_size` (a pin left by an older build would be misread)."""
    try:
        fd = bpfsys.obj_get(path)
    except FileNotFoundError:
        raise MapsMissing(
            errno.ENOENT, f"{what} of lab {lab!r} are missing (is the lab up?)", str(path)
        ) from None
    if value_size is not None:
        actual = bpfsys.map_info(fd).value_size
        if actual != value_size:
            os.close(fd)
            raise MapsMismatch(
                errno.EPROTO,
                f"{path}: value size {actual}, this mrc-nic expects {value_size} "
                "(maps pinned by another version? take the lab down and up again)",
            )
    return fd


def check_range(name: str, value: int, maximum: int) -> None:
    """A map field's value must be an integer in [0, maximum]."""
    if not (isinstance(value, int) and 0 <= value <= maximum):
        raise ValueError(f"{name} must be an integer in [0, {maximum}], not {value!r}")
