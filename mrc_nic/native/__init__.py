"""The native verbs library: unmodified RDMA programs (perftest, the OCP
mrc_example, your own C) on the emulated NIC (docs/api.md, "C programs").

`libmrc_nic_verbs.so` (C, src/) exports the libibverbs calls such programs
make, with libibverbs' symbol versions, and the OCP mrc.h API (include/mrc.h;
`lib_mrc.so` beside it is the same library under the name OCP's example
links); `mrc-nic exec` preloads it (LD_PRELOAD), so the program's verbs
calls reach the host's NIC.
It is built by scripts/setup, and otherwise on first use (`library()`),
next to its sources when that folder is writable (a checkout), else in
/var/cache/mrc-nic/native.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from mrc_nic import resources

SOURCE_DIR = Path(__file__).resolve().parent
LIB_NAME = "libmrc_nic_verbs.so"
CACHE_DIR = Path("/var/cache/mrc-nic/native")


class BuildError(RuntimeError):
    """The library could not be built (no C compiler, no libibverbs-dev)."""


def _inputs() -> list[Path]:
    bpf = resources.BPF_DIR
    sources = [*SOURCE_DIR.glob("src/*"), *SOURCE_DIR.glob("include/*"), SOURCE_DIR / "Makefile"]
    return sorted([*sources, *bpf.glob("nic_*.h"), bpf / "mrc_wire.h"])


def _out_dir() -> Path:
    if os.access(SOURCE_DIR, os.W_OK):
        return SOURCE_DIR / "build"
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _inputs())).hexdigest()[:16]
    return CACHE_DIR / digest


def library(*, build: bool = True) -> Path:
    """The built library, rebuilt first when a source is newer (build=False:
    as it is, BuildError if missing)."""
    out = _out_dir()
    lib = out / LIB_NAME
    newest = max(p.stat().st_mtime for p in _inputs())
    if lib.exists() and lib.stat().st_mtime >= newest:
        return lib
    if not build:
        raise BuildError(f"{lib} is not built: run scripts/setup (or python -m mrc_nic.native)")
    make = shutil.which("make")
    if make is None or shutil.which("cc") is None:
        raise BuildError("building the native verbs library needs make and a C compiler (gcc)")
    if not Path("/usr/include/infiniband/verbs.h").exists():
        raise BuildError(
            "building the native verbs library needs libibverbs' headers: "
            "apt-get install libibverbs-dev (scripts/setup does)"
        )
    out.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [make, "-s", "-C", str(SOURCE_DIR), f"OUT={out}", f"BPF_DIR={resources.BPF_DIR}"],
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise BuildError(f"building {lib} failed:\n{result.stderr.strip()}")
    return lib


def include_dir() -> Path:
    """The folder of mrc.h and mrc_api_ver.h, for -I (MRC_H_PATH)."""
    return SOURCE_DIR / "include"


def main() -> int:
    """python -m mrc_nic.native: build the library (if needed) and print its path."""
    try:
        print(library())
    except BuildError as e:
        print(f"error: {e}")
        return 1
    return 0
