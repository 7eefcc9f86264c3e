"""The generated ABI (mrc_nic/abi/defs.py) against bpf/*.h, and the header reader. No root."""

from __future__ import annotations

import ctypes
import textwrap

import pytest

from mrc_nic.abi import cheader, defs, generate


def test_the_generated_abi_is_what_the_headers_give_today():
    for path, text in generate.generate().items():
        assert path.read_text() == text, (
            f"a header in bpf/ changed and {path.name} was not regenerated: run `make abi`"
        )


def test_defs_is_the_whole_abi_with_the_switch_part_in_its_own_module():
    from mrc_nic.abi import switch_defs

    assert defs.SpFault is switch_defs.SpFault and defs.QueueFlag is switch_defs.QueueFlag
    assert switch_defs.TUNABLES < defs.TUNABLES and "MAX_PORT_KEYS" in defs.TUNABLES
    assert not hasattr(switch_defs, "NicSq")  # a fault command builds no NIC layouts


def test_a_changed_header_makes_a_different_abi(tmp_path):
    for src in generate.resources.BPF_DIR.glob("*.h"):
        (tmp_path / src.name).write_text(src.read_text())
    wire = tmp_path / "mrc_wire.h"
    wire.write_text(
        wire.read_text().replace("#define MRC_UDP_PORT 4791", "#define MRC_UDP_PORT 4792")
    )
    defs_py = generate.ABI_DIR / "defs.py"
    changed = generate.generate(tmp_path)[defs_py]
    assert "MRC_UDP_PORT = 4792" in changed and changed != defs_py.read_text()


def _read(tmp_path, text):
    path = tmp_path / "t.h"
    path.write_text(textwrap.dedent(text))
    return cheader.read(path)[0]


def test_reader_evaluates_constants_as_c_does(tmp_path):
    h = _read(
        tmp_path,
        """
        #ifndef T_H
        #define T_H
        #ifndef TUNE
        #define TUNE 3000
        #endif
        #define MAX(a, b) ((a) > (b) ? (a) : (b))
        #define PAY(mtu) ((mtu) - 80)
        #define FIT (PAY(TUNE) / 1024) /* 2 */
        #define PICK (FIT < 3 ? FIT : 3)
        #define MASK 0x00FFFFFFU
        #define NEG (-7 / 2)
        #define ATTR __attribute__((packed))
        #endif
        """,
    )
    values = {c.name: (c.value, c.tunable) for c in h.constants}
    assert values == {
        "TUNE": (3000, True),
        "FIT": (2, False),
        "PICK": (2, False),
        "MASK": (0xFFFFFF, False),
        "NEG": (-3, False),
    }


def test_reader_lays_out_structs_and_enums(tmp_path):
    h = _read(
        tmp_path,
        """
        #define N 4
        enum t_kind { T_A = 1, T_B, T_C = 7, T_MAX };
        struct t_in { __u16 a; __be16 b; } __attribute__((packed, aligned(8)));
        struct t_out {
            __u32 x;          /* comments go */
            struct t_in in[N];
            __u64 words[2][N];
        };
        static __always_inline int skipped(void) { struct t_in v = {}; return v.a; }
        """,
    )
    assert [(e.name, e.members) for e in h.enums] == [
        ("t_kind", [("T_A", 1), ("T_B", 2), ("T_C", 7), ("T_MAX", 8)])
    ]
    assert [s.name for s in h.structs] == ["t_in", "t_out"]
    out = h.structs[1]
    assert [(f.name, f.ctype, f.dims) for f in out.fields] == [
        ("x", "__u32", ()),
        ("in", "struct t_in", (4,)),
        ("words", "__u64", (2, 4)),
    ]
    assert h.structs[0].packed and h.structs[0].align == 8


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("struct bad { __u32 a : 3; };", "cannot read field"),
        ("struct bad { float f; };", "unknown type"),
        ("struct bad { __u32 a[UNDEFINED]; };", "array size not constant"),
        ("enum bad { A = sizeof(int) };", "is not a constant"),
    ],
)
def test_reader_refuses_what_it_cannot_read(tmp_path, body, what):
    with pytest.raises(cheader.HeaderError, match=what):
        _read(tmp_path, body)


def test_generated_layouts_keep_the_sizes_the_headers_pin():
    # The _Static_assert pins of the headers, as numbers a reader can check by eye.
    sizes = {
        defs.MrcBth: 12,
        defs.MrcReth: 16,
        defs.MrcImmdt: 4,
        defs.MrcAeth: 4,
        defs.MrcDataExt: 16,
        defs.MrcAckExt: 32,
        defs.NicEvKey: 8,
        defs.NicEvent: 40,
        defs.NicSendEvent: 40,
    }
    for layout, size in sizes.items():
        assert ctypes.sizeof(layout) == size, layout.__name__
    assert defs.NicSq.snd_una.offset == 36 and defs.NicSq.acked.offset == 64
    assert defs.NicRq.cum_psn.offset == 28 and defs.NicRq.bitmap.offset == 40


def _holes(layout: type[ctypes.Structure]) -> list[str]:
    """Padding the compiler would add silently: between fields and at the end."""
    holes, at = [], 0
    for name, _ in layout._fields_:
        field = getattr(layout, name)
        if field.offset != at:
            holes.append(f"{at}..{field.offset} before {name}")
        at = field.offset + field.size
    if at != ctypes.sizeof(layout):
        holes.append(f"{at}..{ctypes.sizeof(layout)} at the end")
    return holes


@pytest.mark.parametrize(
    "layout",
    [v for v in vars(defs).values() if isinstance(v, type) and issubclass(v, ctypes.Structure)],
    ids=lambda v: v.__name__,
)
def test_every_shared_struct_names_its_padding(layout):
    # The headers' rule: every hole is an explicit reserved field, so that C,
    # Python and bcc cannot disagree about where a field is.
    assert _holes(layout) == []
