"""A small layer over the raw bpf(2) system call, through ctypes (no bcc).

Short-lived processes (the CLI, tests) use it to open pinned maps, read and
write their values as raw bytes, and run programs with BPF_PROG_TEST_RUN,
without paying for a bcc import or a compile.

Every failure raises OSError with the errno and a message naming the command
and the object (path, fd) that failed.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import functools
import os
from pathlib import Path
from typing import NamedTuple

# enum bpf_cmd (include/uapi/linux/bpf.h)
BPF_MAP_CREATE = 0
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_PROG_TEST_RUN = 10
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_MAP_FREEZE = 22
BPF_MAP_LOOKUP_BATCH = 24

# Flags of BPF_MAP_UPDATE_ELEM.
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2

# Flags of BPF_MAP_CREATE (map_flags).
BPF_F_MMAPABLE = 1 << 10
BPF_F_INNER_MAP = 1 << 12  # an inner map of a map-in-map, of any max_entries

# Flags of BPF_PROG_TEST_RUN for XDP programs: run on live frames (each run's
# XDP_TX / XDP_REDIRECT really transmits; data_out and ctx_out must be unset).
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1

# enum bpf_map_type values callers may want to check against MapInfo.type.
BPF_MAP_TYPE_HASH = 1
BPF_MAP_TYPE_ARRAY = 2
BPF_MAP_TYPE_PERCPU_HASH = 5
BPF_MAP_TYPE_PERCPU_ARRAY = 6
BPF_MAP_TYPE_LRU_PERCPU_HASH = 10
BPF_MAP_TYPE_DEVMAP = 14
BPF_MAP_TYPE_RINGBUF = 27

BPF_OBJ_NAME_LEN = 16

_SYSCALL_NR_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}

_PERCPU_MAP_TYPES = frozenset(
    {BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH}
)


# ---- union bpf_attr, one ctypes structure per command we use -------------
# Field order and widths follow include/uapi/linux/bpf.h; __aligned_u64
# pointers are c_uint64 holding an address.


class _MapCreateAttr(ctypes.Structure):
    """BPF_MAP_CREATE, up to map_name (the kernel reads the rest as zero)."""

    _fields_ = [
        ("map_type", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("inner_map_fd", ctypes.c_uint32),
        ("numa_node", ctypes.c_uint32),
        ("map_name", ctypes.c_char * BPF_OBJ_NAME_LEN),
    ]


class _MapElemAttr(ctypes.Structure):
    """BPF_MAP_{LOOKUP,UPDATE,DELETE}_ELEM."""

    _fields_ = [
        ("map_fd", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


class _NextKeyAttr(ctypes.Structure):
    """BPF_MAP_GET_NEXT_KEY."""

    _fields_ = [
        ("map_fd", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("next_key", ctypes.c_uint64),
    ]


class _BatchAttr(ctypes.Structure):
    """BPF_MAP_LOOKUP_BATCH."""

    _fields_ = [
        ("in_batch", ctypes.c_uint64),
        ("out_batch", ctypes.c_uint64),
        ("keys", ctypes.c_uint64),
        ("values", ctypes.c_uint64),
        ("count", ctypes.c_uint32),
        ("map_fd", ctypes.c_uint32),
        ("elem_flags", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


class _ObjAttr(ctypes.Structure):
    """BPF_OBJ_PIN, BPF_OBJ_GET."""

    _fields_ = [
        ("pathname", ctypes.c_uint64),
        ("bpf_fd", ctypes.c_uint32),
        ("file_flags", ctypes.c_uint32),
    ]


class _GetFdByIdAttr(ctypes.Structure):
    """BPF_MAP_GET_FD_BY_ID."""

    _fields_ = [
        ("map_id", ctypes.c_uint32),
        ("next_id", ctypes.c_uint32),
        ("open_flags", ctypes.c_uint32),
    ]


class _InfoAttr(ctypes.Structure):
    """BPF_OBJ_GET_INFO_BY_FD."""

    _fields_ = [
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
    ]


class _TestRunAttr(ctypes.Structure):
    """BPF_PROG_TEST_RUN (a.k.a. BPF_PROG_RUN)."""

    _fields_ = [
        ("prog_fd", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("data_in", ctypes.c_uint64),
        ("data_out", ctypes.c_uint64),
        ("repeat", ctypes.c_uint32),
        ("duration", ctypes.c_uint32),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_uint64),
        ("ctx_out", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


class _MapInfo(ctypes.Structure):
    """The head of struct bpf_map_info (the kernel fills min(info_len, its size))."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
    ]


class _ProgInfo(ctypes.Structure):
    """struct bpf_prog_info up to verified_insns (include/uapi/linux/bpf.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", ctypes.c_uint32),
        ("gpl_compatible", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("nr_jited_ksyms", ctypes.c_uint32),
        ("nr_jited_func_lens", ctypes.c_uint32),
        ("jited_ksyms", ctypes.c_uint64),
        ("jited_func_lens", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("func_info", ctypes.c_uint64),
        ("nr_func_info", ctypes.c_uint32),
        ("nr_line_info", ctypes.c_uint32),
        ("line_info", ctypes.c_uint64),
        ("jited_line_info", ctypes.c_uint64),
        ("nr_jited_line_info", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("jited_line_info_rec_size", ctypes.c_uint32),
        ("nr_prog_tags", ctypes.c_uint32),
        ("prog_tags", ctypes.c_uint64),
        ("run_time_ns", ctypes.c_uint64),
        ("run_cnt", ctypes.c_uint64),
        ("recursion_misses", ctypes.c_uint64),
        ("verified_insns", ctypes.c_uint32),
    ]


class XdpMd(ctypes.Structure):
    """struct xdp_md as BPF_PROG_TEST_RUN's ctx_in/ctx_out: data and data_end are offsets
    into data_in (data > 0: that many bytes of XDP metadata come first); ingress_ifindex 0
    means the loopback of the caller's namespace."""

    _fields_ = [
        ("data", ctypes.c_uint32),
        ("data_end", ctypes.c_uint32),
        ("data_meta", ctypes.c_uint32),
        ("ingress_ifindex", ctypes.c_uint32),
        ("rx_queue_index", ctypes.c_uint32),
        ("egress_ifindex", ctypes.c_uint32),
    ]


class MapInfo(NamedTuple):
    type: int
    id: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int
    name: str


class TestRunResult(NamedTuple):
    retval: int  # the program's return value (of the last run when repeat > 1)
    data_out: bytes  # the packet after the program
    duration: int  # average run time in ns, as reported by the kernel
    ctx_out: bytes  # the context after the program (empty unless ctx_size_out > 0)


# ---- the system call -------------------------------------------------------


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


@functools.cache
def _syscall_nr() -> int:
    machine = os.uname().machine
    try:
        return _SYSCALL_NR_BPF[machine]
    except KeyError:
        raise OSError(errno_mod.ENOSYS, f"bpf(2): unknown syscall number on {machine}") from None


def _bpf(cmd: int, attr: ctypes.Structure, what: str) -> int:
    """Run bpf(cmd, &attr, sizeof(attr)); raise OSError naming `what` on failure."""
    ret = _libc().syscall(
        ctypes.c_long(_syscall_nr()),
        ctypes.c_int(cmd),
        ctypes.byref(attr),
        ctypes.c_uint(ctypes.sizeof(attr)),
    )
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _addr(buf: ctypes.Array | None) -> int:
    return ctypes.addressof(buf) if buf is not None else 0


# ---- pinned objects ---------------------------------------------------------


def obj_get(path: str | os.PathLike, *, flags: int = 0) -> int:
    """Open the BPF object (map or program) pinned at path; return a new fd."""
    path_buf = ctypes.create_string_buffer(os.fsencode(path))
    attr = _ObjAttr(pathname=_addr(path_buf), file_flags=flags)
    return _bpf(BPF_OBJ_GET, attr, f"BPF_OBJ_GET {path}")


def map_freeze(map_fd: int) -> None:
    """Freeze a map: no syscall may write it from now on (updates, writable
    mmaps); BPF programs still do."""
    _bpf(BPF_MAP_FREEZE, _MapElemAttr(map_fd=map_fd), "BPF_MAP_FREEZE")


def map_fd_by_id(map_id: int, *, flags: int = 0) -> int:
    """A new fd of the map with id map_id (an inner map's, read from its outer
    map); needs CAP_SYS_ADMIN. flags: open_flags (BPF_F_RDONLY, 1 << 3, reads only)."""
    attr = _GetFdByIdAttr(map_id=map_id, open_flags=flags)
    return _bpf(BPF_MAP_GET_FD_BY_ID, attr, f"BPF_MAP_GET_FD_BY_ID {map_id}")


def obj_pin(fd: int, path: str | os.PathLike) -> None:
    """Pin the BPF object behind fd at path (on a bpffs)."""
    path_buf = ctypes.create_string_buffer(os.fsencode(path))
    attr = _ObjAttr(pathname=_addr(path_buf), bpf_fd=fd)
    _bpf(BPF_OBJ_PIN, attr, f"BPF_OBJ_PIN fd {fd} at {path}")


def map_info(map_fd: int) -> MapInfo:
    """Type, sizes, max_entries, flags and name of the map behind map_fd."""
    info = _MapInfo()
    attr = _InfoAttr(bpf_fd=map_fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, f"BPF_OBJ_GET_INFO_BY_FD map fd {map_fd}")
    return MapInfo(
        type=info.type,
        id=info.id,
        key_size=info.key_size,
        value_size=info.value_size,
        max_entries=info.max_entries,
        map_flags=info.map_flags,
        name=info.name.decode(errors="replace"),
    )


def prog_verified_insns(prog_fd: int) -> tuple[int, int]:
    """(instructions the verifier processed, instructions of the program) of
    the program behind prog_fd: the first is what its 1M limit bounds."""
    info = _ProgInfo()
    attr = _InfoAttr(bpf_fd=prog_fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, f"BPF_OBJ_GET_INFO_BY_FD prog fd {prog_fd}")
    return info.verified_insns, info.xlated_prog_len // 8


def map_create(
    map_type: int,
    key_size: int,
    value_size: int,
    max_entries: int,
    *,
    flags: int = 0,
    name: str = "",
) -> int:
    """Create a map; return its fd (close-on-exec; the caller owns it). name: at
    most 15 characters of [A-Za-z0-9_.], shown by bpftool."""
    raw = name.encode()
    if len(raw) >= BPF_OBJ_NAME_LEN:
        raise ValueError(f"a map name has at most {BPF_OBJ_NAME_LEN - 1} bytes, not {name!r}")
    attr = _MapCreateAttr(
        map_type=map_type,
        key_size=key_size,
        value_size=value_size,
        max_entries=max_entries,
        map_flags=flags,
        map_name=raw,
    )
    return _bpf(BPF_MAP_CREATE, attr, f"BPF_MAP_CREATE type {map_type} {name!r}")


def ringbuf_create(size: int, *, name: str = "") -> int:
    """Create a BPF ring buffer of size bytes (a power of two, whole pages); its fd."""
    if not (
        isinstance(size, int) and size >= os.sysconf("SC_PAGE_SIZE") and size & (size - 1) == 0
    ):
        raise ValueError(
            f"a ring buffer's size must be a power of two of whole pages, not {size!r}"
        )
    return map_create(BPF_MAP_TYPE_RINGBUF, 0, 0, size, name=name)


# ---- map elements -------------------------------------------------------------


def map_lookup(map_fd: int, key: bytes, value_size: int, *, flags: int = 0) -> bytes:
    """The value_size bytes stored under key. Missing key: OSError(ENOENT).

    flags: BPF_F_LOCK copies a value that holds a bpf_spin_lock under that lock.
    For a per-CPU map use map_lookup_percpu (the kernel writes one value per CPU).
    """
    key_buf = ctypes.create_string_buffer(bytes(key), len(key))
    value_buf = ctypes.create_string_buffer(value_size)
    attr = _MapElemAttr(map_fd=map_fd, key=_addr(key_buf), value=_addr(value_buf), flags=flags)
    what = f"BPF_MAP_LOOKUP_ELEM map fd {map_fd} key {key.hex()}" + (
        f" flags {flags}" if flags else ""
    )
    _bpf(BPF_MAP_LOOKUP_ELEM, attr, what)
    return value_buf.raw


def map_update(map_fd: int, key: bytes, value: bytes, *, flags: int = BPF_ANY) -> None:
    """Store value under key (flags: BPF_ANY, BPF_NOEXIST, BPF_EXIST).

    For a per-CPU map, value must hold percpu_value_size(size) bytes: one
    8-byte-aligned slot per possible CPU.
    """
    key_buf = ctypes.create_string_buffer(bytes(key), len(key))
    value_buf = ctypes.create_string_buffer(bytes(value), len(value))
    attr = _MapElemAttr(map_fd=map_fd, key=_addr(key_buf), value=_addr(value_buf), flags=flags)
    _bpf(BPF_MAP_UPDATE_ELEM, attr, f"BPF_MAP_UPDATE_ELEM map fd {map_fd} key {key.hex()}")


def map_delete(map_fd: int, key: bytes) -> None:
    """Delete key (array maps refuse with EINVAL: overwrite with zeros instead)."""
    key_buf = ctypes.create_string_buffer(bytes(key), len(key))
    attr = _MapElemAttr(map_fd=map_fd, key=_addr(key_buf))
    _bpf(BPF_MAP_DELETE_ELEM, attr, f"BPF_MAP_DELETE_ELEM map fd {map_fd} key {key.hex()}")


def map_keys(map_fd: int, key_size: int) -> list[bytes]:
    """Every key of a map, in the kernel's iteration order (BPF_MAP_GET_NEXT_KEY).

    Keys added or deleted meanwhile may be missed or seen twice; callers that
    need a consistent view read each value under its lock afterwards.
    """
    keys: list[bytes] = []
    key_buf = None  # NULL: start from the first key
    while True:
        next_buf = ctypes.create_string_buffer(key_size)
        attr = _NextKeyAttr(map_fd=map_fd, key=_addr(key_buf), next_key=_addr(next_buf))
        try:
            _bpf(BPF_MAP_GET_NEXT_KEY, attr, f"BPF_MAP_GET_NEXT_KEY map fd {map_fd}")
        except FileNotFoundError:  # ENOENT: past the last key
            return keys
        keys.append(next_buf.raw)
        key_buf = next_buf


def map_lookup_batch(
    map_fd: int, key_size: int, value_size: int, *, elem_flags: int = 0, chunk: int = 256
) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a map in as few syscalls as chunk allows
    (BPF_MAP_LOOKUP_BATCH): one call instead of one lookup per key.

    value_size is what one lookup returns: for a per-CPU map that is
    percpu_slot_size(size) * possible_cpus(). elem_flags: BPF_F_LOCK copies
    each value under its spin lock. A hash bucket larger than chunk makes the
    kernel refuse (ENOSPC); the chunk then doubles.
    """
    keys, values, count = BatchReader(
        map_fd, key_size, value_size, chunk, elem_flags=elem_flags
    ).read()
    return [
        (keys[i * key_size : (i + 1) * key_size], values[i * value_size : (i + 1) * value_size])
        for i in range(count)
    ]


class BatchReader:
    """The whole of one map, again and again, with BPF_MAP_LOOKUP_BATCH into
    buffers kept between reads: one syscall for a map of up to `capacity`
    entries (its max_entries), and no per-entry objects unless the caller
    makes them (a stream of snapshots reads the same maps ten times a second).
    A hash bucket larger than the capacity makes the kernel refuse (ENOSPC);
    the buffers then double.
    """

    def __init__(
        self, map_fd: int, key_size: int, value_size: int, capacity: int, *, elem_flags: int = 0
    ) -> None:
        """elem_flags: BPF_F_LOCK copies each value under its spin lock."""
        self.map_fd, self.key_size, self.value_size = map_fd, key_size, value_size
        self.elem_flags = elem_flags
        self._chunk = max(1, capacity)
        self._alloc()
        token_size = max(key_size, 8)  # arrays: a key; hash maps: a u32 bucket index
        self._tokens = tuple(ctypes.create_string_buffer(token_size) for _ in range(2))

    def _alloc(self) -> None:
        self._keys = ctypes.create_string_buffer(self.key_size * self._chunk)
        self._values = ctypes.create_string_buffer(self.value_size * self._chunk)

    def read(self) -> tuple[bytes, bytes, int]:
        """(keys, values, count): every entry's key, back to back, and its value
        (value_size bytes each) in the same order."""
        keys: list[bytes] = []
        values: list[bytes] = []
        count = 0
        in_batch = None
        while True:
            out_batch = self._tokens[0] if in_batch is not self._tokens[0] else self._tokens[1]
            attr = _BatchAttr(
                in_batch=_addr(in_batch),
                out_batch=_addr(out_batch),
                keys=_addr(self._keys),
                values=_addr(self._values),
                count=self._chunk,
                map_fd=self.map_fd,
                elem_flags=self.elem_flags,
            )
            done = False
            try:
                _bpf(BPF_MAP_LOOKUP_BATCH, attr, f"BPF_MAP_LOOKUP_BATCH map fd {self.map_fd}")
            except FileNotFoundError:  # ENOENT: the last elements are in this reply
                done = True
            except OSError as e:
                if e.errno != errno_mod.ENOSPC:
                    raise
                self._chunk *= 2  # a hash bucket larger than the chunk: again, with room
                self._alloc()
                continue
            n = attr.count
            keys.append(ctypes.string_at(self._keys, n * self.key_size))
            values.append(ctypes.string_at(self._values, n * self.value_size))
            count += n
            if done or n == 0:
                break
            in_batch = out_batch
        if len(keys) == 1:
            return keys[0], values[0], count
        return b"".join(keys), b"".join(values), count


# ---- per-CPU values ---------------------------------------------------------------


def parse_cpu_list(text: str) -> list[int]:
    """CPUs of a kernel cpu list such as "0-3,5,7-8"."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


@functools.cache
def possible_cpus() -> int:
    """How many values a per-CPU map holds per key: the kernel's possible CPUs."""
    return len(parse_cpu_list(Path("/sys/devices/system/cpu/possible").read_text()))


def is_percpu_map_type(map_type: int) -> bool:
    """Whether lookups on this map type return one value per CPU."""
    return map_type in _PERCPU_MAP_TYPES


def percpu_slot_size(value_size: int) -> int:
    """Bytes per CPU in a per-CPU value buffer: value_size rounded up to 8."""
    return (value_size + 7) & ~7


def map_lookup_percpu(map_fd: int, key: bytes, value_size: int) -> list[bytes]:
    """The value of key on each possible CPU (value_size bytes each), in CPU order."""
    slot = percpu_slot_size(value_size)
    raw = map_lookup(map_fd, key, slot * possible_cpus())
    return [raw[i * slot : i * slot + value_size] for i in range(possible_cpus())]


def map_update_percpu(
    map_fd: int, key: bytes, values: list[bytes], *, flags: int = BPF_ANY
) -> None:
    """Store one value per possible CPU under key (e.g. to zero counters).

    values holds possible_cpus() values of the map's value size, in CPU order.
    """
    if len(values) != possible_cpus():
        raise ValueError(f"need {possible_cpus()} per-CPU values, got {len(values)}")
    if len({len(v) for v in values}) != 1:
        raise ValueError("per-CPU values must all have the map's value size")
    slot = percpu_slot_size(len(values[0]))
    map_update(map_fd, key, b"".join(v.ljust(slot, b"\0") for v in values), flags=flags)


# ---- running a program on a test packet --------------------------------------------


def prog_test_run(
    prog_fd: int,
    data: bytes,
    *,
    repeat: int = 1,
    data_size_out: int | None = None,
    ctx_in: bytes | None = None,
    ctx_size_out: int = 0,
    flags: int = 0,
    cpu: int = 0,
    batch_size: int = 0,
) -> TestRunResult:
    """Run the program behind prog_fd on data with BPF_PROG_TEST_RUN.

    data_size_out is the room given for the packet after the program (default:
    len(data) + 256, so programs that grow the packet fit). ctx_in is the
    program's context (e.g. struct __sk_buff or xdp_md) as bytes; ctx_size_out
    > 0 asks for the context back. A packet that does not fit data_size_out
    raises OSError(ENOSPC). data_size_out=0 passes no output buffer at all, as
    flags=BPF_F_TEST_XDP_LIVE_FRAMES requires (batch_size: frames per batch
    there, 0 for the kernel's default of 64).
    """
    out_size = len(data) + 256 if data_size_out is None else data_size_out
    data_buf = ctypes.create_string_buffer(bytes(data), len(data))
    out_buf = ctypes.create_string_buffer(out_size) if out_size else None
    ctx_in_buf = ctypes.create_string_buffer(bytes(ctx_in), len(ctx_in)) if ctx_in else None
    ctx_out_buf = ctypes.create_string_buffer(ctx_size_out) if ctx_size_out else None
    attr = _TestRunAttr(
        prog_fd=prog_fd,
        data_size_in=len(data),
        data_size_out=out_size,
        data_in=_addr(data_buf),
        data_out=_addr(out_buf),
        repeat=repeat,
        ctx_size_in=len(ctx_in) if ctx_in else 0,
        ctx_size_out=ctx_size_out,
        ctx_in=_addr(ctx_in_buf),
        ctx_out=_addr(ctx_out_buf),
        flags=flags,
        cpu=cpu,
        batch_size=batch_size,
    )
    _bpf(BPF_PROG_TEST_RUN, attr, f"BPF_PROG_TEST_RUN prog fd {prog_fd} ({len(data)} bytes in)")
    data_out = out_buf.raw[: attr.data_size_out] if out_buf is not None else b""
    ctx_out = ctx_out_buf.raw[: attr.ctx_size_out] if ctx_out_buf is not None else b""
    return TestRunResult(attr.retval, data_out, attr.duration, ctx_out)
