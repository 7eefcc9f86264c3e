"""The skeleton every lab-wide BPF program shares: compile once, pin, open the pins.

A lab compiles each program once (bcc, 1-2 s of clang), pins its maps (and
programs that short-lived processes run) under pins.pin_dir(lab), and
attaches the same fd to every port. Later processes open the pins with raw
bpf(2) and never need bcc. The NIC program (mrc_nic.nic) and the switch port
program (mrc_nic.fabric.switchport) differ only in what they compile and pin.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from mrc_nic.kernel import bpfsys, pins


def compile_and_pin(
    lab: str,
    source: Path,
    cflags: list[str],
    functions: dict[str, str],
    map_pins: tuple[str, ...],
    prog_pins: dict[str, str] | None = None,
    *,
    what: str,
) -> tuple[Any, dict[str, Any]]:
    """Compile `source` with bcc, load `functions` ({name: "XDP" | "SCHED_CLS"}),
    pin `map_pins` and `prog_pins` ({pin name: function}) under the lab's pin
    directory. All or nothing: on failure nothing stays pinned or loaded.
    Refuses (FileExistsError) when one of the pins is already there (the lab
    is up). Returns the bcc.BPF object, which keeps everything alive, and the
    loaded functions by name."""
    prog_pins = prog_pins or {}
    directory = pins.pin_dir(lab)
    for name in (*map_pins, *prog_pins):
        if (directory / name).exists():
            raise FileExistsError(
                errno.EEXIST,
                f"{what} of lab {lab!r} are already pinned (is the lab already up?)",
                str(directory / name),
            )

    from bcc import BPF  # imported here: map clients must not need bcc

    bpf = BPF(src_file=str(source).encode(), cflags=cflags)
    try:
        loaded = {
            name: bpf.load_func(name.encode(), getattr(BPF, kind))
            for name, kind in functions.items()
        }
        directory.mkdir(parents=True, exist_ok=True)
        try:
            for name in map_pins:
                bpfsys.obj_pin(bpf[name.encode()].map_fd, directory / name)
            for name, function in prog_pins.items():
                bpfsys.obj_pin(loaded[function].fd, directory / name)
        except BaseException:
            pins.unpin(lab, (*map_pins, *prog_pins))
            raise
    except BaseException:
        bpf.cleanup()
        raise
    return bpf, loaded


def function_name(func: Any) -> str:
    """A bcc function's name as str (bcc gives bytes)."""
    return func.name.decode() if isinstance(func.name, bytes) else func.name


def open_pinned_maps(lab: str, value_sizes: dict[str, int | None], what: str) -> dict[str, int]:
    """fds of a lab's pinned maps by name, each checked for its value size
    (None: not checked); all or nothing (pins.MapsMissing, pins.MapsMismatch)."""
    directory = pins.pin_dir(lab)
    fds: dict[str, int] = {}
    try:
        for name, size in value_sizes.items():
            fds[name] = pins.open_pinned(lab, directory / name, what, size)
    except BaseException:
        close_fds(fds)
        raise
    return fds


def close_fds(fds: dict[str, int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()
