"""The MRC wire format's header compiled by bcc (root + bcc): its function-like
macros equal their Python versions, and other alignments change no layout.
Layouts and constants: tests/bpf/test_abi.py; the scapy layers against the
generated layouts: tests/unit/test_wire.py."""

from __future__ import annotations

import pytest

from mrc_nic import resources
from tests.helpers.env import require_root_and_bcc
from tests.helpers.header_probe import compile_header_probe, compiled_constants
from tests.helpers.wire_tables import C_VIEWS, FUNCTION_MACROS
from tests.helpers.wire_tables import scapy_layout as _scapy_layout

BPF_DIR = resources.BPF_DIR


def _ctypes_layout(struct) -> list[tuple[str, int, int]]:
    fields = [getattr(struct, name) for name, _ in struct._fields_]
    return [(name, f.offset, f.size) for (name, _), f in zip(struct._fields_, fields, strict=True)]


@pytest.fixture(scope="module")
def compiled():
    """The header compiled by bcc with an array of the function-like macros'
    values, filled by one test run (structs and constants: tests/bpf/test_abi.py)."""
    bpf = compile_header_probe("mrc_wire.h", BPF_DIR, (), FUNCTION_MACROS)
    try:
        yield bpf
    finally:
        bpf.cleanup()


@pytest.mark.root
@pytest.mark.bpf
def test_function_macros_match_their_python_versions(compiled):
    got = compiled_constants(compiled, FUNCTION_MACROS)
    assert got == {expr: int(value) for expr, value in FUNCTION_MACROS}


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
