"""The MRC wire format's header compiled by bcc (root + bcc): its struct layouts
equal the scapy layers field by field, every constant equals its Python copy,
and other alignments change no layout. The Python side alone is checked by
tests/unit/test_wire.py."""

from __future__ import annotations

import ctypes

import pytest

from mrc_nic import resources
from tests.helpers.env import require_root_and_bcc
from tests.helpers.header_probe import compile_header_probe, compiled_constants
from tests.helpers.wire_tables import C_VIEWS, HEADER_CONSTANTS
from tests.helpers.wire_tables import scapy_layout as _scapy_layout

BPF_DIR = resources.BPF_DIR


def _ctypes_layout(struct) -> list[tuple[str, int, int]]:
    fields = [getattr(struct, name) for name, _ in struct._fields_]
    return [(name, f.offset, f.size) for (name, _), f in zip(struct._fields_, fields, strict=True)]


@pytest.fixture(scope="module")
def compiled():
    """The header compiled by bcc: one array map per struct (for its Leaf
    type) and an array of every constant, filled by one test run."""
    bpf = compile_header_probe("mrc_wire.h", BPF_DIR, C_VIEWS, HEADER_CONSTANTS)
    try:
        yield bpf
    finally:
        bpf.cleanup()


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.parametrize("struct", list(C_VIEWS))
def test_python_layout_matches_compiled_struct(compiled, struct):
    leaf = compiled[f"l_{struct}".encode()].Leaf
    layer, groups = C_VIEWS[struct]
    assert ctypes.sizeof(leaf) == sum(size for _, _, size in _scapy_layout(layer, groups))
    assert _ctypes_layout(leaf) == _scapy_layout(layer, groups)


@pytest.mark.root
@pytest.mark.bpf
def test_constants_match_header(compiled):
    got = compiled_constants(compiled, HEADER_CONSTANTS)
    assert got == {expr: int(value) for expr, value in HEADER_CONSTANTS}


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.parametrize("align", [1, 4])
def test_header_compiles_with_other_alignments(align):
    # MRC_WIRE_ALIGN changes code generation, never the layout.
    require_root_and_bcc()
    from bcc import BPF

    sizes = {s: sum(size for _, _, size in _scapy_layout(*view)) for s, view in C_VIEWS.items()}
    asserts = "\n".join(
        f'_Static_assert(sizeof(struct {s}) == {n}, "{s}");' for s, n in sizes.items()
    )
    source = f'#include "mrc_wire.h"\n{asserts}\nint f(struct __sk_buff *skb) {{ return 0; }}\n'
    BPF(text=source.encode(), cflags=[f"-I{BPF_DIR}", f"-DMRC_WIRE_ALIGN={align}"]).cleanup()
