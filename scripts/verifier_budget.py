#!/usr/bin/env python3
"""How much of the kernel's verifier budget (1M processed instructions) the
NIC program takes: docs/nic-program.md, "Verifier budget".

Loads bpf/nic_xdp.c for a throwaway lab name (pins removed after), with the
default tunables or an MTU given, and prints, per program of it, the
instructions the verifier processed and the program's own.

    python scripts/verifier_budget.py [--mtu 3500]
"""

from __future__ import annotations

import argparse
import os

from mrc_nic.kernel import bpfsys, pins
from mrc_nic.nic import wireconst
from mrc_nic.nic.layout import DOORBELL_PIN, PROG_PIN
from mrc_nic.nic.loader import NicProgram, unpin

LIMIT = 1_000_000  # BPF_COMPLEXITY_LIMIT_INSNS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mtu", type=int, default=wireconst.MTU)
    args = parser.parse_args()
    lab = f"vb{os.getpid() % 100000}"
    program = NicProgram.load(lab, mtu=args.mtu)
    try:
        for pin in (PROG_PIN, DOORBELL_PIN):
            fd = bpfsys.obj_get(pins.pin_dir(lab) / pin)
            try:
                processed, insns = bpfsys.prog_verified_insns(fd)
            finally:
                os.close(fd)
            share = processed / LIMIT
            print(f"{pin:20} MTU {args.mtu}: {processed:,} processed ({share:.0%} of 1M), "
                  f"{insns:,} instructions")  # fmt: skip
    finally:
        program.close()
        unpin(lab)


if __name__ == "__main__":
    main()
