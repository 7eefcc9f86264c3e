"""What `pip install .` (not editable) ships: every package, the BPF sources, the topologies."""

from __future__ import annotations

import tomllib

from mrc_nic import resources
from tests.helpers.env import ROOT


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_for_the_wheel():
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "mrc_nic").rglob("__init__.py")
    }
    listed = set(_setuptools()["packages"])
    assert on_disk <= listed, f"add to pyproject.toml's packages: {sorted(on_disk - listed)}"


def test_the_bpf_sources_and_topologies_are_package_data():
    cfg = _setuptools()
    assert cfg["package-dir"] == {"mrc_nic._data.bpf": "bpf", "mrc_nic._data.netns": "netns"}
    data = cfg["package-data"]
    shipped_bpf = {p.name for p in (ROOT / "bpf").iterdir()}
    assert shipped_bpf and all(n.endswith((".c", ".h")) for n in shipped_bpf), (
        f"bpf/ holds files package-data {data['mrc_nic._data.bpf']} would leave out"
    )
    assert all(p.suffix == ".toml" for p in (ROOT / "netns").iterdir())


def test_a_checkout_finds_its_own_sources():
    assert resources.BPF_DIR == ROOT / "bpf"
    assert resources.DEFAULT_TOPOLOGY == ROOT / "netns" / "default.toml"
