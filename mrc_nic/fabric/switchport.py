"""The switch-port BPF program: loader (bcc) and map client (raw bpf syscalls).

bpf/switch_port.c runs at clsact ingress and egress of every switch port. It
is compiled once per lab (SwitchPortProgram.load) and the same program fd is
attached to every port; a port's identity is the cls_bpf filter's classid,
``port_key(port_id, direction)``. Its maps are pinned under ``pin_dir(lab)``
so that short-lived CLI processes can set faults and read counters with
SwitchPortMaps, which needs neither bcc nor a compile. The same client
writes each port's virtual output queue (QueueSettings: rate, ECN thresholds,
trimming, buffer); mrc_nic.fabric.queues derives them from the topology.

The ctypes structures below mirror the structs of bpf/switch_port.h; a test
compares them field by field with the layout bcc compiles, and checks the
constants against the header.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import time
from pathlib import Path
from typing import Any, TypeVar

from mrc_nic import resources
from mrc_nic.abi import switch_defs as defs  # not abi.defs: no NIC layouts
from mrc_nic.kernel import bpfsys, pins, program, xdp
from mrc_nic.kernel.pins import PIN_ROOT, MapsMismatch, MapsMissing  # noqa: F401 (re-exported)
from mrc_nic.lab.topology import FORWARDING_MODES

INGRESS, EGRESS = 0, 1
DIRECTIONS = defs.SP_DIRECTIONS

BPF_DIR = resources.BPF_DIR
SOURCE = BPF_DIR / "switch_port.c"
FUNC_NAME = "switch_port"
XDP_FUNC_NAME = "switch_port_xdp"

FAULTS_MAP = "port_faults"
COUNTERS_MAP = "port_counters"
QUEUES_MAP = "port_queues"
EV_FAULTS_MAP = "ev_faults"  # faults on one EV of one QP (struct sp_ev_fault)
EV_FAULT_KEYS_MAP = "port_ev_faults"  # per port key: how many of them
CONFIG_MAP = "switch_config"  # lab-wide settings (struct sp_config): who forwards
FWD_MAP = "port_fwd"  # per ingress key: what the forwarding stage did (struct sp_fwd_counters)
PINNED_MAPS = (
    FAULTS_MAP,
    COUNTERS_MAP,
    QUEUES_MAP,
    EV_FAULTS_MAP,
    EV_FAULT_KEYS_MAP,
    CONFIG_MAP,
    FWD_MAP,
)


# LOSS drops when the high 32 bits of the hash are below rate * 2^32.
LOSS_SCALE_SHIFT = defs.SP_LOSS_SCALE_SHIFT
LOSS_SCALE = 1 << LOSS_SCALE_SHIFT

# Virtual output queue (struct sp_queue; switch_port.h explains the arithmetic).
Q_RATE_SHIFT = defs.SP_Q_RATE_SHIFT  # drain_q: bytes per ns << 32
Q_COST_SHIFT = defs.SP_Q_COST_SHIFT  # cost_q: ns per byte << 16
Q_BYTES_MAX = defs.SP_Q_BYTES_MAX  # buffer, burst and thresholds
MARK_SHIFT = defs.SP_MARK_SHIFT
Q_FLAGS_ALL = defs.SP_Q_FLAGS_ALL
Q_RATE_MIN_BPS = 1000
Q_RATE_MAX_BPS = 10**12
# The counter that is a high-water mark: the largest per-CPU copy, not the sum.
MAX_COUNTERS = frozenset({"backlog_hwm"})

# clsact's pseudo-parents (tc's "ingress" and "egress" hooks).
_CLSACT_PARENT = {INGRESS: "ffff:fff2", EGRESS: "ffff:fff3"}


FaultMode = defs.FaultMode


FaultConfig = defs.SpFault


QueueFlag = defs.QueueFlag


CountersLayout = defs.SpCounters


QueueLayout = defs.SpQueue


EvFaultKey = defs.SpEvKey


EvFaultConfig = defs.SpEvFault


ConfigLayout = defs.SpConfig


FwdCountersLayout = defs.SpFwdCounters

_Fault = TypeVar("_Fault", FaultConfig, EvFaultConfig)


# ---- keys and pins ----------------------------------------------------------


def port_key(port_id: int, direction: int) -> int:
    """Map index and filter classid of one direction of one port."""
    if direction not in (INGRESS, EGRESS):
        raise ValueError(f"direction must be INGRESS (0) or EGRESS (1), not {direction!r}")
    if port_id < 0:
        raise ValueError(f"port_id must be >= 0, not {port_id}")
    return port_id * DIRECTIONS + direction


def pin_dir(lab: str) -> Path:
    """Directory on bpffs holding the pinned maps of a lab."""
    return pins.pin_dir(lab)


def unpin(lab: str) -> None:
    """Remove the pins this module made for a lab, then its directory if empty."""
    pins.unpin(lab, PINNED_MAPS)


# ---- loss pattern -----------------------------------------------------------


def loss_threshold(loss_rate: float) -> int:
    """The 33-bit threshold a LOSS fault compares hashes with (0 .. 2^32)."""
    # NaN fails both comparisons, so it is refused too.
    if not (isinstance(loss_rate, int | float) and 0.0 <= loss_rate <= 1.0):
        raise ValueError(f"loss_rate must be a number in [0, 1], not {loss_rate!r}")
    return round(loss_rate * LOSS_SCALE)


def _fault_config(
    layout: type[_Fault],
    mode: FaultMode,
    *,
    loss_rate: float,
    seed: int,
    until_ns: int,
    fault_id: int,
) -> _Fault:
    """A fault of a port direction (struct sp_fault) or of one EV there (struct
    sp_ev_fault), checked; its loss sequence starts again and its counters at 0."""
    mode = FaultMode(mode)
    threshold = loss_threshold(loss_rate)
    pins.check_range("seed", seed, pins.U64_MAX)
    pins.check_range("until_ns", until_ns, pins.U64_MAX)
    pins.check_range("fault_id", fault_id, pins.U32_MAX)
    return layout(
        mode=mode, fault_id=fault_id, loss_threshold=threshold, seed=seed, until_ns=until_ns
    )


# ---- virtual output queue ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QueueSettings:
    """What struct sp_queue holds, in bytes and bits/s (see switch_port.h).

    trim None: no trimming. ecn False: no marking (kmin and kmax kept, unused).
    burst: bytes the real TBF sends at once after idle, which the twin subtracts.
    """

    rate_bps: int
    buffer: int
    kmin: int
    kmax: int
    trim: int | None
    ecn: bool = True
    lasthop: bool = False
    burst: int = 0
    seed: int = 0

    def check(self) -> None:
        """ValueError naming the first setting the program cannot take."""
        if not (
            isinstance(self.rate_bps, int) and Q_RATE_MIN_BPS <= self.rate_bps <= Q_RATE_MAX_BPS
        ):
            raise ValueError(
                f"rate must be {Q_RATE_MIN_BPS} to {Q_RATE_MAX_BPS} bit/s, not {self.rate_bps!r}"
            )
        sizes = {"buffer": self.buffer, "kmin": self.kmin, "kmax": self.kmax, "burst": self.burst}
        if self.trim is not None:
            sizes["trim"] = self.trim
        for name, value in sizes.items():
            if not (isinstance(value, int) and 0 <= value <= Q_BYTES_MAX):
                raise ValueError(f"{name} must be 0..{Q_BYTES_MAX} bytes, not {value!r}")
        if self.buffer < 1:
            raise ValueError("buffer must be at least 1 byte")
        if self.kmin > self.kmax:
            raise ValueError(f"kmin ({self.kmin} bytes) must not be above kmax ({self.kmax} bytes)")
        pins.check_range("seed", self.seed, pins.U64_MAX)

    def layout(self) -> QueueLayout:
        """The map value: an empty twin, marking draws from the start."""
        self.check()
        flags = QueueFlag.ENABLED
        if self.ecn:
            flags |= QueueFlag.ECN
        if self.trim is not None:
            flags |= QueueFlag.TRIM
        if self.lasthop:
            flags |= QueueFlag.LASTHOP
        return QueueLayout(
            flags=flags,
            rate_bps=self.rate_bps,
            drain_q=_div_round(self.rate_bps << Q_RATE_SHIFT, 8 * 10**9),
            cost_q=_div_round((8 * 10**9) << Q_COST_SHIFT, self.rate_bps),
            burst=self.burst,
            kmin=self.kmin,
            kmax=self.kmax,
            trim=self.trim or 0,
            buffer=self.buffer,
            seed=self.seed,
        )

    @classmethod
    def from_layout(cls, q: QueueLayout) -> QueueSettings:
        flags = QueueFlag(q.flags & Q_FLAGS_ALL)
        return cls(
            rate_bps=q.rate_bps,
            buffer=q.buffer,
            kmin=q.kmin,
            kmax=q.kmax,
            trim=q.trim if QueueFlag.TRIM in flags else None,
            ecn=QueueFlag.ECN in flags,
            lasthop=QueueFlag.LASTHOP in flags,
            burst=q.burst,
            seed=q.seed,
        )


def _div_round(a: int, b: int) -> int:
    return (a + b // 2) // b


def twin_backlog(q: QueueLayout, now_ns: int) -> int:
    """Bytes in a queue's twin at now_ns (time.monotonic_ns()), as the program computes it."""
    v = ((q.tail_ns - now_ns) * q.drain_q) >> Q_RATE_SHIFT if q.tail_ns > now_ns else 0
    return max(0, v - q.burst)


# ---- counters -----------------------------------------------------------------


def combine_cpus(name: str, values: list[int]) -> int:
    """One counter over CPUs: the sum, or the largest for a high-water mark."""
    return max(values, default=0) if name in MAX_COUNTERS else sum(values)


@dataclasses.dataclass
class PortCounters:
    """Counters of one port key, over CPUs (summed; backlog_hwm: the largest)."""

    pkts: int = 0
    bytes: int = 0
    passed_pkts: int = 0
    passed_bytes: int = 0
    drop_blackhole: int = 0
    drop_loss: int = 0
    enqueued: int = 0
    ecn_marked: int = 0
    trimmed: int = 0
    drop_buffer: int = 0
    backlog_hwm: int = 0

    @classmethod
    def from_cpus(cls, per_cpu: list[CountersLayout]) -> PortCounters:
        names = [name for name, _ in CountersLayout._fields_]
        return cls(
            **{name: combine_cpus(name, [getattr(c, name) for c in per_cpu]) for name in names}
        )

    @property
    def fault_drops(self) -> int:
        """Drops by injected faults (blackhole, loss)."""
        return self.drop_blackhole + self.drop_loss

    @property
    def drops(self) -> int:
        """Drops of every reason: faults and the buffer."""
        return self.fault_drops + self.drop_buffer

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


# ---- loader -------------------------------------------------------------------


class SwitchPortProgram:
    """The compiled program of one lab, its fd, and its pinned maps."""

    def __init__(self, lab: str, max_ports: int, bpf: Any, func: Any, xdp_func: Any) -> None:
        self.lab = lab
        self.max_ports = max_ports
        self.bpf = bpf  # the bcc.BPF object: keeps the program and maps alive
        self.fd: int = func.fd
        self.name: str = program.function_name(func)
        self.xdp_fd: int = xdp_func.fd  # the pass-only XDP program for host-facing ports

    @classmethod
    def load(cls, lab: str, max_ports: int) -> SwitchPortProgram:
        """Compile bpf/switch_port.c for max_ports ports and pin its maps.

        Refuses (FileExistsError) when the lab's maps are already pinned.
        """
        if max_ports < 1:
            raise ValueError(f"max_ports must be >= 1, not {max_ports}")
        cflags = [f"-DMAX_PORT_KEYS={max_ports * DIRECTIONS}", f"-I{BPF_DIR}"]
        functions = {FUNC_NAME: "SCHED_CLS", XDP_FUNC_NAME: "XDP"}
        bpf, funcs = program.compile_and_pin(
            lab, SOURCE, cflags, functions, PINNED_MAPS, what="BPF maps"
        )
        return cls(lab, max_ports, bpf, funcs[FUNC_NAME], funcs[XDP_FUNC_NAME])

    def attach(self, ipr: Any, ifindex: int, port_id: int) -> None:
        """Attach the program to both clsact hooks of an interface as port port_id.

        ipr is a pyroute2 IPRoute, possibly IPRoute(netns=...) for a switch namespace.
        """
        from pyroute2 import NetlinkError

        if not 0 <= port_id < self.max_ports:
            raise ValueError(f"port_id {port_id} out of range: the lab has {self.max_ports}")
        try:
            ipr.tc("add", "clsact", ifindex)
        except NetlinkError as e:
            if e.code != errno.EEXIST:
                raise
        for direction, parent in _CLSACT_PARENT.items():
            ipr.tc(
                "add-filter",
                "bpf",
                ifindex,
                ":1",
                fd=self.fd,
                name=self.name,
                parent=parent,
                classid=port_key(port_id, direction),
                direct_action=True,
            )

    def attach_xdp_pass(self, ipr: Any, ifindex: int) -> None:
        """Attach the pass-only XDP program (native mode) to a host-facing port,
        so that the host NIC's XDP_TX and redirects into the link arrive."""
        xdp.attach(ipr, ifindex, self.xdp_fd, "native")

    def close(self) -> None:
        """Drop this process's references; attached filters and pins keep the rest."""
        self.bpf.cleanup()


# ---- map client ---------------------------------------------------------------


class SwitchPortMaps:
    """Faults and counters of a lab's switch ports, through the pinned maps."""

    def __init__(
        self, lab: str, faults_fd: int, counters_fd: int, queues_fd: int, max_keys: int
    ) -> None:
        self.lab = lab
        self._faults_fd = faults_fd
        self._counters_fd = counters_fd
        self._queues_fd = queues_fd
        self.max_keys = max_keys

    @classmethod
    def open(cls, lab: str) -> SwitchPortMaps:
        """Open the pinned maps of a lab (FileNotFoundError if the lab is not up)."""
        sizes = {
            FAULTS_MAP: ctypes.sizeof(FaultConfig),
            COUNTERS_MAP: ctypes.sizeof(CountersLayout),
            QUEUES_MAP: ctypes.sizeof(QueueLayout),
        }
        fds = program.open_pinned_maps(lab, sizes, "BPF maps")
        max_keys = min(bpfsys.map_info(fd).max_entries for fd in fds.values())
        return cls(lab, fds[FAULTS_MAP], fds[COUNTERS_MAP], fds[QUEUES_MAP], max_keys)

    def __enter__(self) -> SwitchPortMaps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for attr in ("_faults_fd", "_counters_fd", "_queues_fd"):
            fd = getattr(self, attr)
            if fd >= 0:
                os.close(fd)
                setattr(self, attr, -1)
        for attr in ("_ev_maps", "_fwd_maps"):
            for fd in getattr(self, attr, None) or ():
                os.close(fd)
            setattr(self, attr, None)

    def _key(self, port_id: int, direction: int) -> bytes:
        key = port_key(port_id, direction)
        if key >= self.max_keys:
            raise ValueError(
                f"port {port_id} out of range: lab {self.lab!r} has "
                f"{self.max_keys // DIRECTIONS} switch ports"
            )
        return key.to_bytes(4, "little")

    def set_fault(
        self,
        port_id: int,
        direction: int,
        mode: FaultMode,
        *,
        loss_rate: float = 0.0,
        seed: int = 0,
        until_ns: int = 0,
        fault_id: int = 0,
    ) -> None:
        """Configure the fault of one port direction; restarts its loss sequence.

        until_ns is a CLOCK_MONOTONIC time (time.monotonic_ns()) after which the
        program stops applying the fault; 0 means no expiry.
        """
        config = _fault_config(
            FaultConfig, mode, loss_rate=loss_rate, seed=seed, until_ns=until_ns, fault_id=fault_id
        )
        bpfsys.map_update(self._faults_fd, self._key(port_id, direction), bytes(config))

    def clear_fault(self, port_id: int, direction: int) -> None:
        """Remove the fault of one port direction (array entries are zeroed, not deleted)."""
        bpfsys.map_update(self._faults_fd, self._key(port_id, direction), bytes(FaultConfig()))

    def fault(self, port_id: int, direction: int) -> dict[str, Any]:
        """The configured fault: mode name, loss_rate, seed, until_ns, fault_id.

        Also "expired": whether until_ns has passed (the program no longer applies it).
        """
        raw = bpfsys.map_lookup(
            self._faults_fd, self._key(port_id, direction), ctypes.sizeof(FaultConfig)
        )
        config = FaultConfig.from_buffer_copy(raw)
        try:
            mode_name = FaultMode(config.mode).name
        except ValueError:
            mode_name = f"UNKNOWN({config.mode})"
        return {
            "mode": mode_name,
            # 2^-32 resolution: rounding gives back the rate that was set.
            "loss_rate": round(config.loss_threshold / LOSS_SCALE, 9),
            "seed": config.seed,
            "until_ns": config.until_ns,
            "fault_id": config.fault_id,
            "expired": config.until_ns != 0 and time.monotonic_ns() >= config.until_ns,
        }

    def counters(self, port_id: int, direction: int) -> PortCounters:
        """Counters of one port direction, summed over CPUs."""
        per_cpu = bpfsys.map_lookup_percpu(
            self._counters_fd, self._key(port_id, direction), ctypes.sizeof(CountersLayout)
        )
        return PortCounters.from_cpus([CountersLayout.from_buffer_copy(v) for v in per_cpu])

    # ---- virtual output queue ----

    def set_queue(self, port_id: int, direction: int, settings: QueueSettings) -> None:
        """Configure the queue of one port direction; its twin starts empty."""
        value = bytes(settings.layout())  # checks before anything is written
        bpfsys.map_update(self._queues_fd, self._key(port_id, direction), value)

    def clear_queue(self, port_id: int, direction: int) -> None:
        """No queue on this port direction (packets pass unqueued)."""
        bpfsys.map_update(self._queues_fd, self._key(port_id, direction), bytes(QueueLayout()))

    def queue_layout(self, port_id: int, direction: int) -> QueueLayout:
        """The raw struct sp_queue of one port direction."""
        raw = bpfsys.map_lookup(
            self._queues_fd, self._key(port_id, direction), ctypes.sizeof(QueueLayout)
        )
        return QueueLayout.from_buffer_copy(raw)

    def queue(self, port_id: int, direction: int) -> QueueSettings | None:
        """The queue's settings; None when the port direction has none."""
        q = self.queue_layout(port_id, direction)
        return QueueSettings.from_layout(q) if q.flags & QueueFlag.ENABLED else None

    def backlog(self, port_id: int, direction: int) -> int:
        """Bytes in the queue's twin now (0 without a queue)."""
        q = self.queue_layout(port_id, direction)
        return twin_backlog(q, time.monotonic_ns()) if q.flags & QueueFlag.ENABLED else 0

    def set_backlog(self, port_id: int, direction: int, nbytes: int) -> None:
        """Fill the twin with nbytes of backlog as of now (tests and experiments).

        Keeps the settings and the marking draws; the backlog then drains at
        the queue's rate like any other."""
        q = self.queue_layout(port_id, direction)
        if not q.flags & QueueFlag.ENABLED:
            raise ValueError(f"port {port_id} direction {direction} has no queue")
        pins.check_range("backlog", nbytes, Q_BYTES_MAX)
        span = ((nbytes + q.burst) * q.cost_q) >> Q_COST_SHIFT if nbytes else 0
        q.tail_ns = time.monotonic_ns() + span
        bpfsys.map_update(self._queues_fd, self._key(port_id, direction), bytes(q))

    # ---- forwarding ----

    def _config_fds(self) -> tuple[int, int]:
        fds = getattr(self, "_fwd_maps", None)
        if fds is None:
            opened = program.open_pinned_maps(
                self.lab,
                {CONFIG_MAP: ctypes.sizeof(ConfigLayout), FWD_MAP: None},
                "BPF maps (forwarding: a lab brought up by this version)",
            )
            fds = self._fwd_maps = (opened[CONFIG_MAP], opened[FWD_MAP])
        return fds

    def set_forwarding(self, mode: str) -> None:
        """Who forwards the lab's MRC packets in its switches from now on: "bpf"
        (each ingress port's program) or "kernel" (the IP stack)."""
        if mode not in FORWARDING_MODES:
            raise ValueError(
                f"forwarding must be one of {', '.join(FORWARDING_MODES)}, not {mode!r}"
            )
        config_fd, _ = self._config_fds()
        flags = defs.SP_CFG_FWD_BPF if mode == "bpf" else 0
        bpfsys.map_update(config_fd, bytes(4), bytes(ConfigLayout(flags=flags)))

    def forwarding(self) -> str:
        """ "bpf" or "kernel": who forwards the lab's switch traffic now."""
        config_fd, _ = self._config_fds()
        raw = bpfsys.map_lookup(config_fd, bytes(4), ctypes.sizeof(ConfigLayout))
        return "bpf" if ConfigLayout.from_buffer_copy(raw).flags & defs.SP_CFG_FWD_BPF else "kernel"

    def fwd_counters(self, port_id: int) -> dict[str, int]:
        """What the forwarding stage did with the packets that came in by a
        port (its ingress key), summed over CPUs."""
        _, fwd_fd = self._config_fds()
        per_cpu = bpfsys.map_lookup_percpu(
            fwd_fd, self._key(port_id, INGRESS), ctypes.sizeof(FwdCountersLayout)
        )
        rows = [FwdCountersLayout.from_buffer_copy(v) for v in per_cpu]
        return {name: sum(getattr(r, name) for r in rows) for name, _ in FwdCountersLayout._fields_}

    def fwd_totals(self) -> dict[str, int]:
        """fwd_counters summed over every port of the lab."""
        totals: dict[str, int] = {}
        for port_id in range(self.max_keys // DIRECTIONS):
            for name, value in self.fwd_counters(port_id).items():
                totals[name] = totals.get(name, 0) + value
        return totals

    # ---- faults on one EV of one QP ----

    def _ev_fds(self) -> tuple[int, int]:
        fds = getattr(self, "_ev_maps", None)
        if fds is None:
            opened = program.open_pinned_maps(
                self.lab,
                {EV_FAULTS_MAP: ctypes.sizeof(EvFaultConfig), EV_FAULT_KEYS_MAP: 4},
                "BPF maps (faults on an EV: a lab brought up by this version)",
            )
            fds = self._ev_maps = (opened[EV_FAULTS_MAP], opened[EV_FAULT_KEYS_MAP])
        return fds

    def _ev_key(self, port_id: int, direction: int, dqpn: int, ev: int) -> bytes:
        pins.check_range("dqpn", dqpn, 0xFFFFFF)
        pins.check_range("ev", ev, 0xFFFF)
        key = port_key(port_id, direction)
        self._key(port_id, direction)  # range check
        return bytes(EvFaultKey(port_key=key, dqpn=dqpn, ev=ev))

    def _ev_count(self, port_id: int, direction: int, delta: int) -> None:
        _, keys_fd = self._ev_fds()
        key = self._key(port_id, direction)
        n = int.from_bytes(bpfsys.map_lookup(keys_fd, key, 4), "little")
        bpfsys.map_update(keys_fd, key, max(0, n + delta).to_bytes(4, "little"))

    def set_ev_fault(
        self,
        port_id: int,
        direction: int,
        dqpn: int,
        ev: int,
        mode: FaultMode,
        *,
        loss_rate: float = 0.0,
        seed: int = 0,
        until_ns: int = 0,
        fault_id: int = 0,
    ) -> None:
        """A fault on the MRC packets to QP dqpn with UDP source port ev, at one
        port direction (struct sp_ev_fault)."""
        faults_fd, _ = self._ev_fds()
        key = self._ev_key(port_id, direction, dqpn, ev)
        config = _fault_config(
            EvFaultConfig,
            mode,
            loss_rate=loss_rate,
            seed=seed,
            until_ns=until_ns,
            fault_id=fault_id,
        )
        fresh = self.ev_fault(port_id, direction, dqpn, ev) is None
        bpfsys.map_update(faults_fd, key, bytes(config))
        if fresh:
            self._ev_count(port_id, direction, +1)

    def clear_ev_fault(self, port_id: int, direction: int, dqpn: int, ev: int) -> dict | None:
        """Remove one EV fault; its last counters (None if there was none)."""
        faults_fd, _ = self._ev_fds()
        last = self.ev_fault(port_id, direction, dqpn, ev)
        if last is not None:
            bpfsys.map_delete(faults_fd, self._ev_key(port_id, direction, dqpn, ev))
            self._ev_count(port_id, direction, -1)
        return last

    def ev_fault(self, port_id: int, direction: int, dqpn: int, ev: int) -> dict | None:
        """One EV fault: mode, loss_rate, fault_id, pkts (seen) and dropped; None if none."""
        faults_fd, _ = self._ev_fds()
        try:
            raw = bpfsys.map_lookup(
                faults_fd,
                self._ev_key(port_id, direction, dqpn, ev),
                ctypes.sizeof(EvFaultConfig),
            )
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        f = EvFaultConfig.from_buffer_copy(raw)
        return {
            "mode": FaultMode(f.mode).name,
            "loss_rate": round(f.loss_threshold / LOSS_SCALE, 9),
            "fault_id": f.fault_id,
            "pkts": f.pkts,
            "dropped": f.dropped,
        }
