"""Shared fixtures: root/BPF guards and labs that always clean up."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NETNS_DIR = ROOT / "netns"
MRC = [sys.executable, "-m", "mrc_nic"]


def _why_no_lab() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, BPF)"
    try:
        from mrc_nic.fabric import preflight

        preflight.require_bpffs()
        preflight.require_bcc()
    except Exception as e:  # the reason is the skip message
        return str(e)
    if shutil.which("ping") is None:
        return "needs ping (iputils-ping; scripts/setup installs it)"
    return None


def require_root_and_bcc() -> None:
    """Skip unless BPF programs can be compiled and loaded here."""
    if os.geteuid() != 0:
        pytest.skip("needs root to load BPF programs")
    try:
        from bcc import BPF
    except ImportError as e:
        pytest.skip(f"bcc (python3-bpfcc) is not importable: {e}")
    # A trivial program: if this fails the environment (kernel headers, bcc)
    # is broken, not the project's C, whose compile errors must fail the tests.
    try:
        BPF(text=b"int f(struct __sk_buff *skb) { return 0; }").cleanup()
    except Exception as e:
        pytest.skip(f"bcc cannot compile a trivial program (kernel headers?): {e}")


def compile_header_probe(header: str, include_dir, structs, constants):
    """Compile `header` with bcc into a probe that exposes, for the layout and
    constant tests: one array map `l_<struct>` per struct (its Leaf type is
    the compiled layout) and an array `consts` holding the value of every
    (expression, expected) pair in `constants`, filled by one test run.
    Returns the bcc.BPF object; the caller cleans it up."""
    require_root_and_bcc()
    from bcc import BPF

    from mrc_nic.kernel import bpfsys

    maps = "\n".join(f"BPF_ARRAY(l_{s}, struct {s}, 1);" for s in structs)
    stores = "\n".join(
        f"    i = {i}; v = (s64)({expr}); consts.update(&i, &v);"
        for i, (expr, _) in enumerate(constants)
    )
    touch = "\n".join(f"    if (l_{s}.lookup(&i)) n++;" for s in structs)
    source = f"""
#include "{header}"
{maps}
BPF_ARRAY(consts, s64, {len(constants)});
int probe(struct __sk_buff *skb) {{
    u32 i; s64 v; int n = 0;
{stores}
    i = 0;
{touch}
    return n;
}}
"""
    bpf = BPF(text=source.encode(), cflags=[f"-I{include_dir}"])
    try:
        fn = bpf.load_func(b"probe", BPF.SCHED_CLS)
        assert bpfsys.prog_test_run(fn.fd, bytes(14)).retval == len(structs)
    except BaseException:
        bpf.cleanup()
        raise
    return bpf


def compiled_constants(probe, constants) -> dict:
    """{expression: value} as the compiler saw them, from a compile_header_probe."""
    import ctypes

    table = probe[b"consts"]
    return {expr: table[ctypes.c_uint32(i)].value for i, (expr, _) in enumerate(constants)}


@contextlib.contextmanager
def nic_header_probe(views, constants):
    """bpf/nic_structs.h compiled by bcc with its defaults (compile_header_probe):
    one array map per struct (for its Leaf type) and an array of every
    constant, filled by one run; cleaned up after."""
    from mrc_nic import nic

    bpf = compile_header_probe("nic_structs.h", nic.BPF_DIR, views, constants)
    try:
        yield bpf
    finally:
        bpf.cleanup()


def check_compiled_constants(probe, constants) -> None:
    """Every (expression, expected) pair has its expected value in the compiled header."""
    got = compiled_constants(probe, constants)
    assert got == {expr: int(value) for expr, value in constants}


def check_compiled_struct(probe, struct: str, view) -> None:
    """The Python view of `struct` has the compiled struct's size and layout."""
    import ctypes

    leaf = probe[f"l_{struct}".encode()].Leaf
    assert ctypes.sizeof(leaf) == ctypes.sizeof(view)
    assert struct_layout(leaf) == struct_layout(view)


def struct_layout(struct) -> list:
    """(name, offset, size) of every field of a ctypes struct (a Python view or
    bcc's compiled Leaf), nested structs and arrays of structs expanded."""
    import ctypes

    out = []
    for name, ftype, *_ in struct._fields_:
        desc = getattr(struct, name)
        entry = [name, desc.offset, desc.size]
        if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
            entry.append(struct_layout(ftype))
        elif isinstance(ftype, type) and issubclass(ftype, ctypes.Array):
            elem = ftype._type_
            if issubclass(elem, ctypes.Structure):
                entry.append((ftype._length_, struct_layout(elem)))
            else:
                entry.append((ftype._length_, ctypes.sizeof(elem)))
        out.append(tuple(tuple(v) if isinstance(v, list) else v for v in entry))
    return out


@contextlib.contextmanager
def loaded_nic_program(lab: str, **sizes):
    """The NIC XDP program compiled for a test lab name (maps pinned), removed after."""
    from mrc_nic import nic

    require_root_and_bcc()
    prog = nic.NicProgram.load(lab, **sizes)
    try:
        yield prog
    finally:
        prog.close()
        nic.unpin(lab)


@pytest.fixture(scope="module")
def maps(program):
    """The map client of the module's `program` fixture (a NicProgram)."""
    from mrc_nic import nic

    with nic.NicMaps.open(program.lab) as m:
        yield m


@pytest.fixture(scope="module")
def event_reader(maps):
    with maps.events() as reader:
        yield reader


NO_LAB_REASON = _why_no_lab()
needs_lab = pytest.mark.skipif(NO_LAB_REASON is not None, reason=NO_LAB_REASON or "")


def unique_lab(tag: str) -> str:
    """A lab name no other test run uses: [a-z0-9]{1,12}."""
    return f"{tag}{os.getpid() % 100000}"[:12]


def run_cli(*args: str, check: bool = True, timeout: float = 120, env: dict | None = None):
    proc = subprocess.run(
        [*MRC, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"mrc-nic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


@pytest.fixture
def make_lab():
    """make_lab(tag, topology_file) brings a lab up; every lab is taken down
    at teardown, whatever the test did."""
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import topology

    made: list[str] = []

    def _make(tag: str, topo_file: str = "default.toml"):
        name = unique_lab(tag)
        made.append(name)
        topo = topology.load(NETNS_DIR / topo_file, lab=name)  # absolute paths pass through
        testbed.up(topo)
        return topo

    yield _make
    for name in made:
        testbed.down(name)


@pytest.fixture(scope="module")
def default_lab():
    """One default-topology lab shared by a module's read-mostly tests."""
    from mrc_nic.fabric import testbed
    from mrc_nic.lab import topology

    name = unique_lab("m")
    topo = topology.load(NETNS_DIR / "default.toml", lab=name)
    testbed.up(topo)
    try:
        yield topo
    finally:
        testbed.down(name)
