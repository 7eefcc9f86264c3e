"""The native verbs library (mrc_nic/native) builds and exports what an
unmodified verbs program binds to: libibverbs' calls under libibverbs.so.1's
symbol versions, and the OCP mrc.h API."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mrc_nic import native

# What perftest and OCP's mrc_example call, with libibverbs.so.1's versions.
NEEDED = {
    "ibv_get_device_list": "IBVERBS_1.1",
    "ibv_open_device": "IBVERBS_1.1",
    "ibv_query_port": "IBVERBS_1.1",
    "ibv_reg_mr": "IBVERBS_1.1",
    "ibv_reg_mr_iova2": "IBVERBS_1.8",
    "_ibv_query_gid_ex": "IBVERBS_1.11",
    "ibv_create_comp_channel": "IBVERBS_1.0",
    "ibv_wc_status_str": "IBVERBS_1.1",
    "mrc_create_qp": "MRC_1.0",
    "mrc_post_send": "MRC_1.0",
}


@pytest.fixture(scope="module")
def exported() -> dict[str, str]:
    if shutil.which("cc") is None or not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("needs cc and libibverbs-dev (scripts/setup installs them)")
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf (binutils)")
    lib = native.library()
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    symbols = {}
    for match in re.finditer(r"\sFUNC\s+GLOBAL\s+DEFAULT\s+\d+\s+(\w+)@@?(\S+)", out):
        symbols[match.group(1)] = match.group(2)
    return symbols


def test_the_library_exports_the_calls_under_libibverbs_versions(exported):
    assert {name: exported.get(name) for name in NEEDED} == NEEDED


def test_nothing_else_is_exported(exported):
    """Internals stay local: a program's own symbols are never shadowed."""
    assert all(name.startswith(("ibv_", "_ibv_", "mrc_")) for name in exported), exported


def test_lib_mrc_so_is_the_same_library_beside_it():
    if shutil.which("cc") is None or not Path("/usr/include/infiniband/verbs.h").exists():
        pytest.skip("needs cc and libibverbs-dev (scripts/setup installs them)")
    lib = native.library()
    assert (lib.parent / "lib_mrc.so").resolve() == lib.resolve()
    assert (native.include_dir() / "mrc.h").exists()
