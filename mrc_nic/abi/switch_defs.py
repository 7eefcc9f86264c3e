"""The C ABI of the switch port program, generated from bpf/*.h: do not edit.

Regenerate with `make abi` (python -m mrc_nic.abi.generate); a unit test fails
when a header changed and this file was not regenerated.
"""

import ctypes
import enum

# ---- bpf/switch_port.h ---------------------------------------------------------

MAX_PORT_KEYS = 1024  # tunable: the loader may override it
SP_DIR_INGRESS = 0
SP_DIR_EGRESS = 1
SP_DIRECTIONS = 2
SP_LOSS_SCALE_SHIFT = 32
SP_EV_FAULTS_MAX = 256  # tunable: the loader may override it
SP_Q_ENABLED = 1
SP_Q_ECN = 2
SP_Q_TRIM = 4
SP_Q_LASTHOP = 8
SP_Q_FLAGS_ALL = 0xf
SP_Q_RATE_SHIFT = 32
SP_Q_COST_SHIFT = 16
SP_Q_BYTES_MAX = 0x40000000
SP_MARK_SHIFT = 32
SP_CFG_FWD_BPF = 1


class FaultMode(enum.IntEnum):
    """enum sp_fault_mode (bpf/switch_port.h)."""

    NONE = 0
    BLACKHOLE = 1
    LOSS = 2


class SpFault(ctypes.Structure):
    """struct sp_fault (bpf/switch_port.h)."""

    _pack_ = 1
    _align_ = 8  # aligned(8): ctypes honours it from 3.13
    _fields_ = [
        ("mode", ctypes.c_uint32),
        ("fault_id", ctypes.c_uint32),
        ("loss_threshold", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("until_ns", ctypes.c_uint64),
        ("seq", ctypes.c_uint64),
    ]


class SpEvKey(ctypes.Structure):
    """struct sp_ev_key (bpf/switch_port.h)."""

    _pack_ = 1
    _align_ = 8  # aligned(8): ctypes honours it from 3.13
    _fields_ = [
        ("port_key", ctypes.c_uint32),
        ("dqpn", ctypes.c_uint32),
        ("ev", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class SpEvFault(ctypes.Structure):
    """struct sp_ev_fault (bpf/switch_port.h)."""

    _pack_ = 1
    _align_ = 8  # aligned(8): ctypes honours it from 3.13
    _fields_ = [
        ("mode", ctypes.c_uint32),
        ("fault_id", ctypes.c_uint32),
        ("loss_threshold", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("until_ns", ctypes.c_uint64),
        ("seq", ctypes.c_uint64),
        ("pkts", ctypes.c_uint64),
        ("dropped", ctypes.c_uint64),
    ]


class SpCounters(ctypes.Structure):
    """struct sp_counters (bpf/switch_port.h)."""

    _pack_ = 1
    _align_ = 8  # aligned(8): ctypes honours it from 3.13
    _fields_ = [
        ("pkts", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("passed_pkts", ctypes.c_uint64),
        ("passed_bytes", ctypes.c_uint64),
        ("drop_blackhole", ctypes.c_uint64),
        ("drop_loss", ctypes.c_uint64),
        ("enqueued", ctypes.c_uint64),
        ("ecn_marked", ctypes.c_uint64),
        ("trimmed", ctypes.c_uint64),
        ("drop_buffer", ctypes.c_uint64),
        ("backlog_hwm", ctypes.c_uint64),
    ]


class SpQueue(ctypes.Structure):
    """struct sp_queue (bpf/switch_port.h)."""

    _pack_ = 1
    _align_ = 8  # aligned(8): ctypes honours it from 3.13
    _fields_ = [
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("rate_bps", ctypes.c_uint64),
        ("drain_q", ctypes.c_uint64),
        ("cost_q", ctypes.c_uint64),
        ("burst", ctypes.c_uint64),
        ("kmin", ctypes.c_uint64),
        ("kmax", ctypes.c_uint64),
        ("trim", ctypes.c_uint64),
        ("buffer", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("tail_ns", ctypes.c_uint64),
        ("seq", ctypes.c_uint64),
    ]


class SpConfig(ctypes.Structure):
    """struct sp_config (bpf/switch_port.h)."""

    _pack_ = 1
    _align_ = 8  # aligned(8): ctypes honours it from 3.13
    _fields_ = [
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class SpFwdCounters(ctypes.Structure):
    """struct sp_fwd_counters (bpf/switch_port.h)."""

    _pack_ = 1
    _align_ = 8  # aligned(8): ctypes honours it from 3.13
    _fields_ = [
        ("redirected", ctypes.c_uint64),
        ("stack_other", ctypes.c_uint64),
        ("stack_ttl", ctypes.c_uint64),
        ("stack_fib", ctypes.c_uint64),
        ("no_neigh", ctypes.c_uint64),
    ]

# ---- enums of #define groups --------------------------------------------------


class QueueFlag(enum.IntFlag):
    """SP_Q_* (#define group)."""

    ENABLED = 1
    ECN = 2
    TRIM = 4
    LASTHOP = 8


TUNABLES = frozenset(
    {
        "MAX_PORT_KEYS",
        "SP_EV_FAULTS_MAX",
    }
)
