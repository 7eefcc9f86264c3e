"""Write mrc_nic/abi/*_defs.py and defs.py from the ABI headers of bpf/ (make abi).

Run as `python -m mrc_nic.abi.generate`.

One module per header, by role (MODULES): the switch port's (switch_defs, so
that the fault commands, which touch only switches, do not build the NIC's
40-odd ctypes layouts at start-up), the NIC's constants and enums
(nic_const_defs), the NIC's map values and records (nic_struct_defs), and the
wire format, which defs.py holds itself. defs.py re-exports the others, so
defs stays the whole ABI.

`--check` exits 1 when a committed file differs from what the headers give
today (the unit tier runs the same comparison). Names: constants keep their C
names; a struct becomes a ctypes.Structure in CamelCase (struct nic_rq ->
NicRq); a C enum becomes an IntEnum without its first word and with the
members' common prefix dropped (enum nic_qp_state -> QpState.RTS); groups
of #defines that Python uses as one enum are listed in DEFINE_ENUMS below.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from mrc_nic import resources
from mrc_nic.abi import cheader

ABI_DIR = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Module:
    name: str  # mrc_nic/abi/<name>.py
    header: str  # the bpf/ header it renders
    title: str
    kernel_structs: bool = False  # the kernel's structs its own embed (bpf_spin_lock)


# What user space shares with the programs, a module per header (the other
# headers hold code: parse helpers, the receiver, the engine, ...). defs is
# last: it star-imports every other one.
MODULES = (
    Module("switch_defs", "switch_port.h", "The C ABI of the switch port program"),
    Module("nic_const_defs", "nic_consts.h", "The NIC program's constants and enums"),
    Module("nic_struct_defs", "nic_structs.h", "The NIC program's map values and records", True),
    Module("defs", "mrc_wire.h", "The C ABI of the BPF programs (the wire format here)"),
)
ABI_HEADERS = tuple(m.header for m in MODULES)
OUTPUTS = tuple(ABI_DIR / f"{m.name}.py" for m in MODULES)

# Python enums made of #define groups: (class, base, prefix, only these names or None for all,
# names to leave out)
DEFINE_ENUMS = [
    ("Opcode", "IntEnum", "MRC_OP_", None, {"VENDOR_FIRST"}),
    (
        "Syndrome",
        "IntEnum",
        "MRC_AETH_",
        {"ACK", "NAK_PSN_SEQ", "NAK_INV_REQ", "NAK_REM_ACCESS", "NAK_REM_OP"},
        set(),
    ),
    ("NackReason", "IntEnum", "MRC_NACK_", None, set()),
    ("AckFlag", "IntFlag", "MRC_ACK_F_", None, set()),
    ("Dscp", "IntEnum", "MRC_DSCP_", None, {"SHIFT"}),
    ("Ecn", "IntEnum", "MRC_ECN_", None, {"MASK"}),
    ("EvState", "IntEnum", "NIC_EVS_", None, set()),
    ("QueueFlag", "IntFlag", "SP_Q_", {"ENABLED", "ECN", "TRIM", "LASTHOP"}, set()),
]


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _common_prefix(names: list[str]) -> str:
    if len(names) < 2:
        return names[0].rsplit("_", 1)[0] + "_" if names and "_" in names[0] else ""
    first = names[0].split("_")
    n = 0
    while n < len(first) - 1 and all(m.split("_")[: n + 1] == first[: n + 1] for m in names):
        n += 1
    return "_".join(first[:n]) + "_" if n else ""


def _ctype(field: cheader.Field) -> str:
    if field.ctype.startswith("struct "):
        base = camel(field.ctype.removeprefix("struct "))
    else:
        base = "ctypes." + cheader.SCALARS[field.ctype][0]
    for dim in reversed(field.dims):
        base = f"({base} * {dim})"
    return base.removeprefix("(").removesuffix(")") if field.dims else base


def render(
    headers: list[cheader.Header],
    title: str,
    imports: list[str],
    tunables: list[str],
    prelude: tuple[str, ...] | list[str] = (),
    tunables_of: tuple[str, ...] | list[str] = (),
) -> str:
    """tunables_of: modules whose TUNABLES this one's include (imported by name)."""
    out = list(prelude)
    constants = {c.name: c for h in headers for c in h.constants}
    for h in headers:
        out += ["", f"# ---- bpf/{h.name} " + "-" * max(4, 70 - len(h.name)), ""]
        for c in h.constants:
            note = "  # tunable: the loader may override it" if c.tunable else ""
            out.append(f"{c.name} = {_literal(c.name, c.value)}{note}")
        for e in h.enums:
            out += _render_enum(e)
        for s in h.structs:
            out += _render_struct(s)
    out += ["", "# ---- enums of #define groups " + "-" * 50]
    for cls, base, prefix, only, leave_out in DEFINE_ENUMS:
        if not any(name.startswith(prefix) for name in constants):
            continue  # a group of the other module's headers
        members = [
            (name.removeprefix(prefix), c.value)
            for name, c in constants.items()
            if name.startswith(prefix)
            and (only is None or name.removeprefix(prefix) in only)
            and name.removeprefix(prefix) not in leave_out
            and not name.endswith(("_MASK", "_SHIFT", "_ALL"))
        ]
        out += ["", "", f"class {cls}(enum.{base}):", f'    """{prefix}* (#define group)."""', ""]
        out += [f"    {m} = {_literal(m, v)}" for m, v in members]
    out += ["", "", "TUNABLES = frozenset(", "    {"]
    out += [f'        "{t}",' for t in tunables]
    out += ["    }", ")" + "".join(f" | {m}.TUNABLES" for m in tunables_of), ""]
    body = "\n".join(out)
    head = [
        f'"""{title}, generated from bpf/*.h: do not edit.',
        "",
        "Regenerate with `make abi` (python -m mrc_nic.abi.generate); a unit test fails",
        "when a header changed and this file was not regenerated.",
        '"""',
        "",
        *(f"import {m}" for m in ("ctypes", "enum") if f"{m}." in body),
        *imports,
    ]
    return "\n".join(head) + "\n" + body


def _literal(name: str, value: int) -> str:
    masky = any(w in name for w in ("MASK", "NET", "_F_", "FLAG")) or value >= 1 << 16
    return hex(value) if masky and value >= 0 else str(value)


def _where(header: str) -> str:
    """Where a type is declared: a header of bpf/, or the kernel's uapi."""
    return "the kernel's uapi" if header == "kernel" else f"bpf/{header}"


def _render_enum(e: cheader.Enum) -> list[str]:
    names = [m for m, _ in e.members]
    prefix = _common_prefix(names)
    members, extra = e.members, []
    if len(members) > 1 and members[-1][0].endswith("_MAX"):  # a count, not a member
        extra = [f"{members[-1][0]} = {members[-1][1]}"]
        members = members[:-1]
    cls = camel(e.name.split("_", 1)[1] if "_" in e.name else e.name)
    lines = [
        "",
        "",
        f"class {cls}(enum.IntEnum):",
        f'    """enum {e.name} ({_where(e.header)})."""',
        "",
    ]
    lines += [f"    {m.removeprefix(prefix)} = {v}" for m, v in members]
    if extra:
        lines += ["", "", *extra]
    return lines


def _render_struct(s: cheader.Struct) -> list[str]:
    lines = ["", "", f"class {camel(s.name)}(ctypes.Structure):"]
    lines += [f'    """struct {s.name} ({_where(s.header)})."""', ""]
    if s.packed:
        lines.append("    _pack_ = 1")
    if s.align:
        lines.append(f"    _align_ = {s.align}  # aligned({s.align}): ctypes honours it from 3.13")
    be = [
        f.name
        for f in s.fields
        if not f.ctype.startswith("struct ") and cheader.SCALARS[f.ctype][2]
    ]
    if be:
        lines.append(f"    big_endian = ({', '.join(repr(n) for n in be)},)")
    lines.append("    _fields_ = [")
    lines += [f'        ("{f.name}", {_ctype(f)}),' for f in s.fields]
    lines.append("    ]")
    return lines


def _kernel_structs() -> list[str]:
    lines = []
    for name, fields in cheader.KERNEL_STRUCTS.items():
        s = cheader.Struct(
            name, "kernel", [cheader.Field(n, t, d) for n, t, d in fields], False, None
        )
        lines += _render_struct(s)
    return lines


def generate(bpf_dir: Path = resources.BPF_DIR) -> dict[Path, str]:
    """Each output file -> its text."""
    headers = {h.name: h for h in cheader.read_all(bpf_dir, ABI_HEADERS)}

    def tunables(hs: list[cheader.Header]) -> list[str]:
        return sorted(c.name for h in hs for c in h.constants if c.tunable)

    files = {}
    for module, path in zip(MODULES, OUTPUTS, strict=True):
        own = [headers[module.header]]
        others = [m.name for m in MODULES if m.name != module.name]
        if module.name == "defs":  # the whole ABI: the others re-exported, every tunable
            imports = [
                f"from mrc_nic.abi.{m} import *  # noqa: F403 (defs is the whole ABI)"
                for m in others
            ]
            imports.append(f"from mrc_nic.abi import {', '.join(others)}  # their TUNABLES")
        else:
            imports, others = [], []
        # Kernel structs go first: the module's structs embed them.
        prelude = _kernel_structs() if module.kernel_structs else []
        files[path] = render(own, module.title, imports, tunables(own), prelude, others)
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = p.parse_args(argv)
    files = generate()
    if args.check:
        stale = [path for path, text in files.items() if path.read_text() != text]
        for path in stale:
            print(f"{path} is stale: run `make abi`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
