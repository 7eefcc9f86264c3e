"""What a user may call a topology and a lab, resolved to one file and one name.

A shipped topology is named by its file (`clos-8`, `clos-8.toml`,
`netns/clos-8.toml`), and its lab by the file's name without dashes (`clos8`):
a lab name becomes part of namespace names (`mrc-clos8-h0`, split at the first
dash) and of paths (/run/mrc-nic/clos8), so it is kept to [a-z0-9]{1,12}.
Where a lab is named, the dashed form is taken too and means the same lab.
"""

from __future__ import annotations

from pathlib import Path

from mrc_nic import resources
from mrc_nic.contract import devices
from mrc_nic.lab.topology import TopologyError


def shipped_names() -> list[str]:
    return sorted(p.stem for p in resources.TOPOLOGY_DIR.glob("*.toml"))


def topology_file(name: str) -> Path:
    """A topology by path, or by name in the shipped netns/ (clos-8,
    clos-8.toml, or its lab's name clos8)."""
    path = Path(name)
    if path.exists():
        return path
    stem = name.removesuffix(".toml")
    for shipped in sorted(resources.TOPOLOGY_DIR.glob("*.toml")):
        if stem in (shipped.stem, shipped.stem.replace("-", "")):
            return shipped
    raise TopologyError(
        f"{name}: no such topology file (shipped, by name: {', '.join(shipped_names())})"
    )


def canonical_lab_name(name: str) -> str:
    """The lab's name in its stored form (contract.devices.canonical_lab_name:
    `clos-8` is clos8), or TopologyError saying why it cannot be one."""
    try:
        return devices.canonical_lab_name(name)
    except devices.BadLabName as e:
        raise TopologyError(str(e)) from None
