"""The switch port program loaded for a test module (tests/bpf)."""

from __future__ import annotations

import contextlib

from mrc_nic.fabric import switchport as sp
from tests.helpers.env import require_root_and_bcc


@contextlib.contextmanager
def loaded_switch_program(lab: str, max_ports: int):
    """bpf/switch_port.c compiled for a test lab name (maps pinned), removed after."""
    require_root_and_bcc()
    prog = sp.SwitchPortProgram.load(lab, max_ports)
    try:
        yield prog
    finally:
        prog.close()
        sp.unpin(lab)
