"""The packages of mrc_nic import one way: down the layers, never up or sideways.

README.md's architecture lists them top to bottom; a package may import only
packages of a lower layer (its own modules aside). The contract between
clients and services (mrc_nic.contract) sits at the bottom with the kernel
interfaces, so both sides stand on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mrc_nic"
LAYERS = [
    {"errors", "resources", "units", "__version__"},
    {"kernel", "contract", "abi", "native"},
    {"nic", "lab"},
    {"fabric", "transport", "verbs"},
    {"testkit", "observe"},
    {"workloads", "cluster"},
    {"cli"},
    {"__main__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _imports(path: Path) -> set[str]:
    """The mrc_nic packages (or top-level modules) a file imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "mrc_nic":
                out |= {a.name for a in node.names}
            elif node.module.startswith("mrc_nic."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("mrc_nic.")}
    return out


def test_every_package_has_a_layer():
    names = {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    names |= {p.stem for p in PACKAGE.glob("*.py")}
    names = {n for n in names if not n.startswith("_")}
    assert names - set(RANK) == set(), "a new package: give it a layer in LAYERS"


def test_no_import_runs_up_or_sideways():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] == "_data":
            continue
        home = parts[0] if len(parts) > 1 else path.stem
        if home == "__init__":
            continue
        for target in _imports(path) - {home}:
            if RANK[target] >= RANK[home]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports mrc_nic.{target}")
    assert wrong == []


def test_verbs_needs_only_the_contract_the_nic_and_the_kernel():
    """An application finds and opens its NIC through the contract (the device
    registry, the session) and reaches it through the NIC's driver: nothing of
    how a lab is made or run (mrc_nic.lab, transport, fabric)."""
    allowed = {"verbs", "contract", "nic", "kernel", "errors", "units"}
    wrong = {
        f"{path.name} imports mrc_nic.{target}"
        for path in sorted((PACKAGE / "verbs").glob("*.py"))
        for target in _imports(path) - allowed
    }
    assert wrong == set()
