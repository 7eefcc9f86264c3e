"""The generated ABI (mrc_nic.abi.defs) against what bcc compiles from the same headers.

The unit tier proves defs.py is what the headers say by reading them
(tests/unit/test_abi.py); this tier proves the reading is right: every
struct's size and field offsets, and every constant's value, as the
compiler sees them.
"""

from __future__ import annotations

import ctypes

import pytest

from mrc_nic import resources
from mrc_nic.abi import cheader, defs, generate
from tests.helpers.header_probe import compile_header_probe, struct_layout

HEADERS = cheader.read_all(resources.BPF_DIR, generate.ABI_HEADERS)
STRUCTS = [s for h in HEADERS for s in h.structs]
CONSTANTS = [c for h in HEADERS for c in h.constants]


@pytest.fixture(scope="module")
def compiled():
    """Every ABI header compiled in one program: an array map per struct (its
    Leaf is the compiled layout) and an array of every constant, filled by one
    test run."""
    constants = [(c.name, None) for c in CONSTANTS]
    bpf = compile_header_probe(
        generate.ABI_HEADERS, resources.BPF_DIR, [s.name for s in STRUCTS], constants
    )
    try:
        yield bpf
    finally:
        bpf.cleanup()


@pytest.mark.parametrize("struct", STRUCTS, ids=[s.name for s in STRUCTS])
def test_generated_layout_is_the_compiled_one(compiled, struct):
    leaf = compiled[f"l_{struct.name}".encode()].Leaf
    view = getattr(defs, generate.camel(struct.name))
    assert ctypes.sizeof(view) == ctypes.sizeof(leaf)
    assert struct_layout(view) == struct_layout(leaf)


@pytest.mark.parametrize("header", sorted({c.header for c in CONSTANTS}))
def test_generated_constants_are_the_compiled_ones(compiled, header):
    table = compiled[b"consts"]
    mine = [(i, c) for i, c in enumerate(CONSTANTS) if c.header == header]
    got = {c.name: table[ctypes.c_uint32(i)].value for i, c in mine}
    assert got == {c.name: getattr(defs, c.name) for _, c in mine}
