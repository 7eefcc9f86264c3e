"""A reader of the restricted C that bpf/*.h is written in: constants, enums, structs.

Why a reader of our own and not clang or BTF: the drift test must run without
root, bcc or a compiler, and the headers keep to a small, checked subset:
object-like `#define NAME <integer expression>`, tunables as
`#ifndef NAME / #define NAME default / #endif`, `enum name { A = 1, B, };`,
and `struct name { <fixed-width type> field[dims]; ... } <attributes>;` with
no bitfields. Anything outside that subset inside a struct or enum is an
error (HeaderError), not a guess. Function bodies and other code in headers
are skipped. The root-tier tests compare the result with what bcc compiled.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

# Field types: C name -> (ctypes name, size, big-endian on the wire)
SCALARS = {
    "__u8": ("c_uint8", 1, False),
    "__s8": ("c_int8", 1, False),
    "__u16": ("c_uint16", 2, False),
    "__s16": ("c_int16", 2, False),
    "__be16": ("c_uint16", 2, True),
    "__u32": ("c_uint32", 4, False),
    "__s32": ("c_int32", 4, False),
    "__be32": ("c_uint32", 4, True),
    "__u64": ("c_uint64", 8, False),
    "__s64": ("c_int64", 8, False),
    "__be64": ("c_uint64", 8, True),
}
# Kernel structs our structs embed: their user-space view.
KERNEL_STRUCTS = {"bpf_spin_lock": [("val", "__u32", ())]}


class HeaderError(ValueError):
    """The header leaves the subset this reader understands."""


@dataclasses.dataclass
class Field:
    name: str
    ctype: str  # a SCALARS key, or "struct NAME"
    dims: tuple[int, ...]


@dataclasses.dataclass
class Struct:
    name: str
    header: str
    fields: list[Field]
    packed: bool
    align: int | None  # from aligned(N), after packed


@dataclasses.dataclass
class Enum:
    name: str
    header: str
    members: list[tuple[str, int]]


@dataclasses.dataclass
class Constant:
    name: str
    header: str
    value: int
    tunable: bool


@dataclasses.dataclass
class Header:
    name: str
    includes: list[str]
    constants: list[Constant]
    enums: list[Enum]
    structs: list[Struct]


# ---- integer expressions ---------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<num>0[xX][0-9a-fA-F]+|\d+)[uUlL]*|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<op><<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^~!<>?:(),]))"
)
_BINARY = {  # operator: (precedence, function)
    "||": (1, lambda a, b: int(bool(a) or bool(b))),
    "&&": (2, lambda a, b: int(bool(a) and bool(b))),
    "|": (3, lambda a, b: a | b),
    "^": (4, lambda a, b: a ^ b),
    "&": (5, lambda a, b: a & b),
    "==": (6, lambda a, b: int(a == b)),
    "!=": (6, lambda a, b: int(a != b)),
    "<": (7, lambda a, b: int(a < b)),
    ">": (7, lambda a, b: int(a > b)),
    "<=": (7, lambda a, b: int(a <= b)),
    ">=": (7, lambda a, b: int(a >= b)),
    "<<": (8, lambda a, b: a << b),
    ">>": (8, lambda a, b: a >> b),
    "+": (9, lambda a, b: a + b),
    "-": (9, lambda a, b: a - b),
    "*": (10, lambda a, b: a * b),
    "/": (10, lambda a, b: int(a / b)),  # C truncates toward zero
    "%": (10, lambda a, b: a - b * int(a / b)),
}


class _Unevaluable(Exception):
    """An expression that is not an integer constant (a cast, sizeof, an attribute)."""


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise _Unevaluable(text)
        out.append(m.group("num") or m.group("id") or m.group("op"))
        pos = m.end()
    return out


class _Macros:
    """Object-like and function-like macros, expanded into integer values."""

    def __init__(self) -> None:
        self.objects: dict[str, str] = {}
        self.functions: dict[str, tuple[list[str], str]] = {}

    def value(self, text: str) -> int:
        tokens = self._expand(_tokens(text), depth=0)
        parser = _Parser(tokens)
        result = parser.expression(0)
        if parser.pos != len(tokens):
            raise _Unevaluable(text)
        return result

    def _expand(self, tokens: list[str], depth: int) -> list[str]:
        if depth > 32:
            raise _Unevaluable("macro recursion")
        out: list[str] = []
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok in self.objects:
                out += self._expand(_tokens(self.objects[tok]), depth + 1)
            elif tok in self.functions and i + 1 < len(tokens) and tokens[i + 1] == "(":
                params, body = self.functions[tok]
                args, i = _call_args(tokens, i + 2)
                if len(args) != len(params):
                    raise _Unevaluable(tok)
                bound = dict(zip(params, args, strict=True))
                body_tokens = [
                    t for b in _tokens(body) for t in (["(", *bound[b], ")"] if b in bound else [b])
                ]
                out += self._expand(body_tokens, depth + 1)
                continue
            else:
                out.append(tok)
            i += 1
        return out


def _call_args(tokens: list[str], i: int) -> tuple[list[list[str]], int]:
    args: list[list[str]] = [[]]
    depth = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == ")" and depth == 0:
            return args, i + 1
        if tok == "," and depth == 0:
            args.append([])
        else:
            depth += tok == "("
            depth -= tok == ")"
            args[-1].append(tok)
        i += 1
    raise _Unevaluable("unclosed macro call")


class _Parser:
    """Precedence climbing over expanded tokens: C's integer operators and ?:."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.pos = tokens, 0

    def _next(self) -> str:
        if self.pos >= len(self.tokens):
            raise _Unevaluable("unexpected end")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expression(self, min_prec: int) -> int:
        left = self._unary()
        while True:
            op = self._peek()
            if op == "?" and min_prec == 0:
                self.pos += 1
                yes = self.expression(0)
                if self._next() != ":":
                    raise _Unevaluable("?: without :")
                no = self.expression(0)
                left = yes if left else no
                continue
            if op not in _BINARY or _BINARY[op][0] < min_prec:
                return left
            prec, fn = _BINARY[op]
            self.pos += 1
            left = fn(left, self.expression(prec + 1))

    def _unary(self) -> int:
        tok = self._next()
        if tok == "(":
            value = self.expression(0)
            if self._next() != ")":
                raise _Unevaluable("unbalanced (")
            return value
        if tok == "-":
            return -self._unary()
        if tok == "+":
            return self._unary()
        if tok == "~":
            return ~self._unary()
        if tok == "!":
            return int(not self._unary())
        if tok[0].isdigit():
            return int(tok, 0)
        raise _Unevaluable(tok)  # an identifier no macro defines: a type, sizeof, ...


# ---- the header -------------------------------------------------------------------

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(.*)$")
_DEFINE = re.compile(r"(\w+)(\(([^)]*)\))?\s*(.*)$")
_AGGREGATE = re.compile(r"\b(struct|enum)\s+(\w+)\s*\{")
_FIELD = re.compile(r"^(struct\s+\w+|\w+)\s+(\w+)((?:\s*\[[^\]]+\])*)$")


def _strip_comments(text: str) -> str:
    return _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n") or " ", text)


def _join_continuations(text: str) -> str:
    return text.replace("\\\n", " ")


def read(path: Path, macros: _Macros | None = None) -> tuple[Header, _Macros]:
    """Read one header; `macros` carries the macros of the headers it includes."""
    macros = macros or _Macros()
    text = _join_continuations(_strip_comments(path.read_text()))
    header = Header(path.name, [], [], [], [])
    code_lines: list[str] = []
    pending_ifndef: str | None = None
    for line in text.split("\n"):
        m = _DIRECTIVE.match(line)
        if not m:
            code_lines.append(line)
            if line.strip():
                pending_ifndef = None
            continue
        code_lines.append("")
        word, rest = m.group(1), m.group(2).strip()
        if word == "include":
            inc = re.match(r'"([^"]+)"', rest)
            if inc:
                header.includes.append(inc.group(1))
        elif word == "ifndef":
            pending_ifndef = rest
            continue
        elif word == "define":
            _define(header, macros, rest, tunable=_DEFINE.match(rest).group(1) == pending_ifndef)
        pending_ifndef = None
    _aggregates(header, macros, "\n".join(code_lines))
    return header, macros


def _define(header: Header, macros: _Macros, rest: str, tunable: bool) -> None:
    m = _DEFINE.match(rest)
    name, params, body = m.group(1), m.group(3), m.group(4).strip()
    if m.group(2) and not rest[len(name)].isspace():
        macros.functions[name] = ([p.strip() for p in params.split(",") if p.strip()], body)
        return
    if m.group(2):  # "NAME (expr)": an object-like macro whose body starts with "("
        body = rest[len(name) :].strip()
    macros.objects[name] = body
    if not body:
        return  # an include guard
    try:
        value = macros.value(body)
    except (_Unevaluable, ZeroDivisionError):
        return  # an attribute list, a cast: not an integer constant
    header.constants.append(Constant(name, header.name, value, tunable))


def _aggregates(header: Header, macros: _Macros, code: str) -> None:
    depth, pos = 0, 0
    while pos < len(code):
        m = _AGGREGATE.search(code, pos)
        if not m:
            return
        depth += code.count("{", pos, m.start()) - code.count("}", pos, m.start())
        close = _matching_brace(code, m.end() - 1)
        if depth == 0:
            body = code[m.end() : close]
            end = code.index(";", close)
            attrs = code[close + 1 : end]
            if m.group(1) == "enum":
                header.enums.append(_enum(header.name, m.group(2), body, macros))
            else:
                header.structs.append(_struct(header.name, m.group(2), body, attrs, macros))
            pos = end + 1
        else:
            pos = close + 1
        if depth < 0:
            raise HeaderError(f"{header.name}: unbalanced braces")


def _matching_brace(code: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        depth += code[i] == "{"
        depth -= code[i] == "}"
        if depth == 0:
            return i
    raise HeaderError("unclosed {")


def _enum(header: str, name: str, body: str, macros: _Macros) -> Enum:
    members, nxt = [], 0
    for item in (s.strip() for s in body.split(",")):
        if not item:
            continue
        member, _, expr = (p.strip() for p in item.partition("="))
        try:
            nxt = macros.value(expr) if expr else nxt
        except _Unevaluable:
            raise HeaderError(
                f"{header}: enum {name}: {member} = {expr} is not a constant"
            ) from None
        members.append((member, nxt))
        macros.objects[member] = str(nxt)
        nxt += 1
    return Enum(name, header, members)


def _struct(header: str, name: str, body: str, attrs: str, macros: _Macros) -> Struct:
    fields = []
    for decl in (" ".join(s.split()) for s in body.split(";")):
        if not decl:
            continue
        m = _FIELD.match(decl)
        if not m or ":" in decl:
            raise HeaderError(f"{header}: struct {name}: cannot read field {decl!r}")
        ctype, fname, dims_text = m.group(1), m.group(2), m.group(3)
        if not ctype.startswith("struct ") and ctype not in SCALARS:
            raise HeaderError(f"{header}: struct {name}.{fname}: unknown type {ctype}")
        try:
            dims = tuple(macros.value(d) for d in re.findall(r"\[([^\]]+)\]", dims_text))
        except _Unevaluable:
            raise HeaderError(f"{header}: struct {name}.{fname}: array size not constant") from None
        fields.append(Field(fname, " ".join(ctype.split()), dims))
    attrs = " ".join(attrs.split())
    if "__mrc_wire" in attrs:  # mrc_wire.h's packed, aligned(MRC_WIRE_ALIGN)
        attrs = f"__attribute__((packed, aligned({macros.value('MRC_WIRE_ALIGN')})))"
    packed = "packed" in attrs
    aligned = re.search(r"aligned\((\w+)\)", attrs)
    align = macros.value(aligned.group(1)) if aligned else None
    if attrs and not re.fullmatch(r"__attribute__\(\((packed|aligned\(\w+\)|, | )+\)\)", attrs):
        raise HeaderError(f"{header}: struct {name}: unknown attributes {attrs!r}")
    return Struct(name, header, fields, packed, align)


def read_all(bpf_dir: Path, names: tuple[str, ...]) -> list[Header]:
    """The headers `names` of bpf/ (and what they include), each after the
    headers it includes."""
    paths = {p.name: p for p in sorted(bpf_dir.glob("*.h"))}
    missing = [n for n in names if n not in paths]
    if missing:
        raise HeaderError(f"no {', '.join(missing)} in {bpf_dir}")
    done: dict[str, Header] = {}
    order: list[Header] = []
    macros = _Macros()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in done or name not in paths:
            return
        if name in stack:
            raise HeaderError(f"include cycle: {' -> '.join((*stack, name))}")
        for inc in re.findall(r'#include\s+"([^"]+)"', paths[name].read_text()):
            visit(inc, (*stack, name))
        header, _ = read(paths[name], macros)
        done[name] = header
        order.append(header)

    for name in names:
        visit(name, ())
    return order
