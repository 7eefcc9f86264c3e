"""Where the files mrc-nic ships beside its code are: BPF C sources, topologies.

An installed package carries them as package data (mrc_nic/_data/bpf and
mrc_nic/_data/netns, see pyproject.toml); a source checkout has them at the
top of the tree (bpf/, netns/). The package data wins when both exist.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _shipped(name: str) -> Path:
    for candidate in (PACKAGE_DIR / "_data" / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"mrc-nic's {name}/ folder is missing from {PACKAGE_DIR}; reinstall the package"
    )


BPF_DIR = _shipped("bpf")
TOPOLOGY_DIR = _shipped("netns")
DEFAULT_TOPOLOGY = TOPOLOGY_DIR / "default.toml"


def python_path_env() -> dict[str, str]:
    """The environment for a child `python -m mrc_nic....` that must import
    this same copy of the package (ip netns exec keeps the interpreter, not
    the working directory's view of the source tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR.parent) + os.pathsep + env.get("PYTHONPATH", "")
    return env
