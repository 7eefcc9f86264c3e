"""Whether a command line is for a cluster lab (cheap: no Ray, no click).

The CLI asks this first; a command on a lab whose cluster record is here
(record.py) goes to mrc_nic.cli.cluster_lab instead of the local code. An
agent running a command for the cluster sets AGENT_ENV: there the lab is the
machine's own shard, even on the machine that also holds the cluster record.
"""

from __future__ import annotations

import os

from mrc_nic.lab import state

AGENT_ENV = "MRC_NIC_CLUSTER_AGENT"
FILE = "cluster.json"  # record.FILE, without importing the record's dependencies


def cluster_command(argv: list[str]) -> tuple[str, list[str]] | None:
    """(lab, argv without its -l option) when argv runs on a cluster lab known here."""
    argv = _group_options_after(argv)
    if os.environ.get(AGENT_ENV) or not argv or argv[0].startswith("-") or argv[0] == "up":
        return None
    if "-h" in argv or "--help" in argv:
        return None
    if argv[0] == "scenario" and any(a.split("=")[0] == "--topology" for a in argv):
        return None  # a lab of its own, brought up here
    rest, lab = [argv[0]], None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i:]
            break
        if a in ("-l", "--lab") and i + 1 < len(argv):
            lab, i = argv[i + 1], i + 2
            continue
        if a.startswith("--lab="):
            lab, i = a.split("=", 1)[1], i + 1
            continue
        rest.append(a)
        i += 1
    lab = lab or os.environ.get("MRC_NIC_LAB")
    if lab is None:
        mine = _cluster_labs()
        if len(mine) != 1 or state.labs_on_disk():
            return None  # none, or several labs: the local command says which to choose
        lab = mine[0]
    try:
        if not (state.lab_dir(lab) / FILE).exists():
            return None
    except state.BadLabName:
        return None
    return lab, rest


def _group_options_after(argv: list[str]) -> list[str]:
    """`mrc-nic -l LAB --format json CMD ...` as `CMD ... -l LAB --format json`:
    the group's options (-l, --format; mrc_nic.cli.app) said after the command."""
    moved = []
    while argv:
        if len(argv) >= 2 and argv[0] in ("-l", "--lab", "--format"):
            moved, argv = [*moved, *argv[:2]], argv[2:]
        elif argv[0].startswith(("--lab=", "--format=")):
            moved, argv = [*moved, argv[0]], argv[1:]
        else:
            break
    return argv[:1] + moved + argv[1:] if argv else moved


def _cluster_labs() -> list[str]:
    if not state.RUN_DIR.is_dir():
        return []
    return sorted(p.name for p in state.RUN_DIR.iterdir() if (p / FILE).exists())
