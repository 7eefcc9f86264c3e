"""A C header compiled by bcc: the compiled layouts and constants, for the tests
that compare them with their Python copies."""

from __future__ import annotations

from tests.helpers.env import require_root_and_bcc


def compile_header_probe(header: str | tuple[str, ...], include_dir, structs, constants):
    """Compile `header` (or several, in order) with bcc into a probe that exposes, for the
    layout and
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
    headers = (header,) if isinstance(header, str) else header
    includes = "\n".join(f'#include "{h}"' for h in headers)
    source = f"""
{includes}
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
