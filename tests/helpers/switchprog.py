"""The switch port program loaded for a test module (tests/bpf), and what its
tests share: tc verdicts, key 0 (port 0 ingress: BPF_PROG_TEST_RUN runs every
packet as key 0) made clean for a test."""

from __future__ import annotations

import contextlib

from mrc_nic.fabric import switchport as sp
from tests.helpers.env import require_root_and_bcc

# tc verdicts (linux/pkt_cls.h).
TC_ACT_OK, TC_ACT_SHOT, TC_ACT_REDIRECT = 0, 2, 7
MAX_PORTS = 4  # keys 0..7: the test modules' size


@contextlib.contextmanager
def loaded_switch_program(lab: str, max_ports: int = MAX_PORTS):
    """bpf/switch_port.c compiled for a test lab name (maps pinned), removed after."""
    require_root_and_bcc()
    prog = sp.SwitchPortProgram.load(lab, max_ports)
    try:
        yield prog
    finally:
        prog.close()
        sp.unpin(lab)


def clear_key0(maps: sp.SwitchPortMaps) -> None:
    """No fault and no queue on key 0, where every test run lands."""
    maps.clear_fault(0, sp.INGRESS)
    maps.clear_queue(0, sp.INGRESS)
