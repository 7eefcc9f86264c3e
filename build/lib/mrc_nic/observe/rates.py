"""Rates between two snapshots: packets/s, bits/s and drops/s, filled in place.

Every record that carries counters has a `rates` field, null in a lone
snapshot. add_rates(prev, cur) sets it in `cur` from the counters of the
record with the same identity in `prev` (link name, plane, path, QPN, EV),
over the time between the two BPF counter reads (`monotonic_ns`).

Kernel numbers (host port counters, queue drops) may be read less often
than BPF counters (stats.Sampler's kernel_every): their rates are over the
time between two kernel reads (`kernel_monotonic_ns`), and a snapshot that
reused the previous reading carries the previous rates.

A counter that went down was reset (a QP set up again under the same QPN,
counters zeroed): its increase is then its current value, as Prometheus
counts a counter reset.

The rates of one set of counters are a read-only record (jsonenc.Frozen).
Counters that are the same read-only record in both snapshots (idle in
between) get shared zeros, the same object every time, so that a stream
does not encode them again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from operator import itemgetter

from mrc_nic.observe.jsonenc import Frozen

# out key -> (counter fields summed, scale). Bytes become bits (x 8).
LINK_DIRECTION = {
    "pkts_per_s": (("pkts",), 1),
    "bits_per_s": (("bytes",), 8),
    "passed_pkts_per_s": (("passed_pkts",), 1),
    "passed_bits_per_s": (("passed_bytes",), 8),
    "drops_per_s": (("drop_blackhole", "drop_loss", "drop_buffer"), 1),
    "ecn_marked_per_s": (("ecn_marked",), 1),
    "trimmed_per_s": (("trimmed",), 1),
}
HOST_PORT = {
    "tx_pkts_per_s": (("tx_packets",), 1),
    "tx_bits_per_s": (("tx_bytes",), 8),
    "rx_pkts_per_s": (("rx_packets",), 1),
    "rx_bits_per_s": (("rx_bytes",), 8),
}
SEND_QP = {
    "acked_pkts_per_s": (("acked_pkts",), 1),
    "lost_pkts_per_s": (("lost_pkts",), 1),
}
SEND_QP_TX = {
    "sent_pkts_per_s": (("data_pkts",), 1),
    "sent_bits_per_s": (("data_bytes",), 8),
    "retx_pkts_per_s": (("retx_pkts",), 1),
}
RECV_QP = {
    "placed_pkts_per_s": (("placed_pkts",), 1),
    "goodput_bits_per_s": (("placed_bytes",), 8),
    "dup_pkts_per_s": (("dup_pkts",), 1),
}
EV = {
    "tx_pkts_per_s": (("tx_pkts",), 1),
    "tx_bits_per_s": (("tx_bytes",), 8),
    "acks_per_s": (("acks",), 1),
    "retx_pkts_per_s": (("retx_pkts",), 1),
    "lost_pkts_per_s": (("lost_pkts",), 1),
}


def payload_per_packet(tx_counters: dict) -> float | None:
    """A send QP's payload bytes per new data packet so far (struct
    nic_sq_tx_stats). Its goodput is acknowledged packets times this: the
    engine fills every packet but a message's last with the lab's full
    payload (nic.seg_size: 1 KiB at MTU 1500, up to 3 KiB), so the mean is
    exact for whole packets and close when the last ones are short."""
    pkts = tx_counters.get("data_pkts")
    return tx_counters.get("data_bytes", 0) / pkts if pkts else None


def increase(prev: int | None, cur: int | None) -> int | None:
    """How much a counter grew; a counter that went down restarted from zero."""
    if prev is None or cur is None:
        return None
    return cur - prev if cur >= prev else cur


def per_second(prev: dict, cur: dict, seconds: float, spec: dict) -> Frozen:
    """Rates of cur's counters over prev's, as named by spec (see LINK_DIRECTION):
    a read-only record (copy it to change it)."""
    out: dict[str, float | None] = {}
    get_prev, get_cur = prev.get, cur.get
    for key, (fields, scale) in spec.items():
        total: int | None = 0
        for f in fields:
            before, after = get_prev(f), get_cur(f)
            if before is None or after is None:
                total = None
                break
            total += after - before if after >= before else after
        out[key] = None if total is None else total * scale / seconds
    return Frozen(out)


def _unchanged(counters: Frozen, spec: dict) -> Frozen:
    """per_second(counters, counters, ...): a shared read-only record of zeros
    (None where a field is missing), kept per spec and set of fields, and
    remembered per record (an idle port's record stays the same object)."""
    known = _ZEROS_OF.get((id(spec), id(counters)))
    if known is not None and known[0] is counters:
        return known[1]
    key = (id(spec), tuple(counters))
    zeros = _ZEROS.get(key)
    if zeros is None:
        zeros = _ZEROS[key] = per_second(counters, counters, 1.0, spec)
        _ZERO_IDS.add(id(zeros))
    if len(_ZEROS_OF) >= _ZEROS_OF_MAX:
        _ZEROS_OF.clear()
    _ZEROS_OF[(id(spec), id(counters))] = (counters, zeros)  # holds it: its id stays its own
    return zeros


_ZEROS: dict[tuple, Frozen] = {}
_ZERO_IDS: set[int] = set()  # ids of those (they live on in _ZEROS)
_ZEROS_OF: dict[tuple[int, int], tuple[Frozen, Frozen]] = {}
_ZEROS_OF_MAX = 4096


@functools.cache
def _nic_spec(names: tuple[str, ...]) -> dict:
    return {f"{name}_per_s": ((name,), 1) for name in names}


def add_rates(prev: dict, cur: dict) -> dict:
    """Fill cur's `rates` fields and `interval_s` from prev (same lab); returns cur."""
    seconds = (cur["monotonic_ns"] - prev["monotonic_ns"]) / 1e9
    if seconds <= 0:
        return cur
    cur["interval_s"] = seconds

    def rate(p: dict, c: dict, spec: dict) -> dict:
        return per_second(p, c, seconds, spec)

    _RATED.turn()
    directions = _direction_rates(rate)
    _rate_records(prev["links"], cur["links"], _NAME, directions)
    _rate_records(prev["paths"], cur["paths"], _PATH, directions)
    kernel_seconds = _kernel_seconds(prev, cur)

    def kernel_rate(p: dict, c: dict, spec: dict, carried: dict | None) -> dict | None:
        if kernel_seconds == 0:
            return carried  # the same kernel reading as before
        # Read-only: the snapshots that repeat this kernel reading carry it.
        return per_second(p, c, kernel_seconds, spec) if kernel_seconds else None

    _match(prev["planes"], cur["planes"], _PLANE, _plane_rates(rate, kernel_rate))
    prev_ports = {(h["name"], p["ifname"]): p for h in prev["hosts"] for p in h["ports"]}
    for host in cur["hosts"]:
        ports = host["ports"]
        for i, port in enumerate(ports):
            old = prev_ports.get((host["name"], port["ifname"]))
            if old and old["kernel"] and port["kernel"]:
                rates = kernel_rate(old["kernel"], port["kernel"], HOST_PORT, old["rates"])
                ports[i] = _with_rates(port, rates)
    _match(prev["qps"], cur["qps"], lambda r: r["qpn"], _qp_rates(rate))
    old_nic, nic = prev["nic"]["counters"], cur["nic"]["counters"]
    if old_nic is not None and nic is not None:
        spec = _nic_spec(tuple(nic))
        if old_nic is nic and type(nic) is Frozen:  # no counter moved
            cur["nic"]["rates"] = _unchanged(nic, spec)
        else:
            cur["nic"]["rates"] = rate(old_nic, nic, spec)
    return cur


_NAME, _PATH, _PLANE = itemgetter("name"), itemgetter("path"), itemgetter("plane")


def _rate_records(prev: list[dict], cur: list[dict], identity: Callable, rates: Callable) -> None:
    """The rates of each record of cur that prev has too, rates(prev_record, cur_record),
    into cur (see _with_rates)."""
    before = None
    for i, record in enumerate(cur):
        # Most records of a stream are where they were, idle: no lookup by name.
        made = _RATED.idle(record, prev[i]) if i < len(prev) else None
        if made is not None:
            cur[i] = made
            continue
        if before is None:
            before = {identity(r): r for r in prev}
        old = before.get(identity(record))
        if old is None:
            continue
        made = _RATED.idle(record, old)
        cur[i] = made if made is not None else _with_rates(record, rates(old, record))


def _with_rates(record: dict, rates: dict | None) -> dict:
    """record with its `rates`: a read-only record is replaced by a new one (the
    same as the last time if record and rates are the same objects as then:
    an idle link stays one object); any other is filled in place."""
    if type(record) is Frozen:
        return _RATED.rated(record, rates)
    record["rates"] = rates
    return record


class _Rated:
    """Read-only records with their rates, from this add_rates call and the one before."""

    def __init__(self) -> None:
        self.now: dict[int, tuple[Frozen, object, Frozen]] = {}
        self.before: dict[int, tuple[Frozen, object, Frozen]] = {}

    def turn(self) -> None:
        self.before, self.now = self.now, {}

    def idle(self, record: dict, old: dict) -> Frozen | None:
        """record with its rates, if they are idle zeros again: old is what
        rated() made from this same record last time, with idle zeros (so its
        counters are record's, the same objects, and the zeros are the same)."""
        key = id(record)
        hit = self.now.get(key) or self.before.get(key)
        if hit is None or hit[0] is not record or hit[2] is not old or id(hit[1]) not in _IDLE_IDS:
            return None
        self.now[key] = hit
        return old

    def rated(self, record: Frozen, rates: object) -> Frozen:
        key = id(record)
        hit = self.now.get(key) or self.before.get(key)
        if hit is None or hit[0] is not record or hit[1] is not rates:
            # The entry holds record and rates: their ids stay their own.
            hit = (record, rates, Frozen({**record, "rates": rates}))
        self.now[key] = hit
        return hit[2]


_RATED = _Rated()


def _match(prev: list[dict], cur: list[dict], identity: Callable, fill: Callable) -> None:
    """fill(prev_record, cur_record) for each record of cur that prev has too."""
    before = {identity(r): r for r in prev}
    for record in cur:
        old = before.get(identity(record))
        if old is not None:
            fill(old, record)


def _direction_rates(rate: Callable) -> Callable:
    """Rates of a link's or a path's two directions, read-only. A path's
    counters are its T0-T1 link's, the same records: their rates are computed
    once. Counters that are the same read-only record in both snapshots (an
    idle port: port_table) have the shared zero rates."""
    done: dict[tuple[int, int], dict] = {}  # (id(old), id(new)) -> rates; both stay alive

    def one(old: dict, new: dict) -> dict:
        if old is new and type(new) is Frozen:
            return _unchanged(new, LINK_DIRECTION)
        pair = (id(old), id(new))
        out = done.get(pair)
        if out is None:
            out = done[pair] = rate(old, new, LINK_DIRECTION)
        return out

    def both(old: dict, new: dict) -> dict:
        up, down = one(old["up"], new["up"]), one(old["down"], new["down"])
        if up is down and id(up) in _ZERO_IDS:  # idle both ways: shared zeros
            idle = _IDLE.get(id(up))
            if idle is None:
                idle = _IDLE[id(up)] = Frozen(up=up, down=down)
                _IDLE_IDS.add(id(idle))
            return idle
        return Frozen(up=up, down=down)

    return both


_IDLE: dict[int, Frozen] = {}  # id(zeros) -> {"up": zeros, "down": zeros}; zeros live in _ZEROS
_IDLE_IDS: set[int] = set()  # ids of those (they live on in _IDLE)


def _kernel_seconds(prev: dict, cur: dict) -> float | None:
    """Seconds between the kernel readings of two snapshots; None if either has none."""
    before, after = prev.get("kernel_monotonic_ns"), cur.get("kernel_monotonic_ns")
    if before is None or after is None:
        return None
    return (after - before) / 1e9


def _plane_rates(rate: Callable, kernel_rate: Callable) -> Callable:
    volume = {"pkts_per_s": (("pkts",), 1), "bits_per_s": (("bytes",), 8)}
    bpf_drops = {
        "blackhole_per_s": (("blackhole",), 1),
        "loss_per_s": (("loss",), 1),
        "buffer_per_s": (("buffer",), 1),
    }
    queue_counters = {
        "enqueued_per_s": (("enqueued",), 1),
        "ecn_marked_per_s": (("ecn_marked",), 1),
        "trimmed_per_s": (("trimmed",), 1),
    }
    queue_drops = {"queue_per_s": (("queue",), 1)}

    def fill(old: dict, new: dict) -> None:
        carried = (old["rates"] or {}).get("drops")
        queue = kernel_rate(old["drops"], new["drops"], queue_drops, carried)
        new["rates"] = {
            "offered": rate(old["offered"], new["offered"], volume),
            "delivered": rate(old["delivered"], new["delivered"], volume),
            "drops": {
                **rate(old["drops"], new["drops"], bpf_drops),
                "queue_per_s": (queue or {}).get("queue_per_s"),
            },
            "queue": rate(old.get("queue", {}), new.get("queue", {}), queue_counters),
        }

    return fill


def _qp_rates(rate: Callable) -> Callable:
    def fill(old: dict, new: dict) -> None:
        out: dict[str, dict | None] = {"send": None, "recv": None}
        if old["send"] and new["send"]:
            send = {
                **rate(old["send"]["counters"], new["send"]["counters"], SEND_QP),
                **rate(old["send"]["tx_counters"], new["send"]["tx_counters"], SEND_QP_TX),
            }
            acked = send["acked_pkts_per_s"]
            per_pkt = payload_per_packet(new["send"]["tx_counters"])
            send["goodput_bits_per_s"] = (
                None if acked is None or per_pkt is None else acked * per_pkt * 8
            )
            send["planes"] = _plane_ev_rates(rate, old["send"]["planes"], new["send"]["planes"])
            out["send"] = send
            _match(
                old["send"]["ev_list"] or [],
                new["send"]["ev_list"] or [],
                lambda r: r["ev"],
                lambda o, n: n.update(rates=rate(o["counters"], n["counters"], EV)),
            )
        if old["recv"] and new["recv"]:
            out["recv"] = rate(old["recv"]["counters"], new["recv"]["counters"], RECV_QP)
        new["rates"] = out

    return fill


def _plane_ev_rates(rate: Callable, old: list[dict], new: list[dict]) -> list[dict]:
    before = {p["plane"]: p for p in old}
    return [
        {"plane": p["plane"], **rate(before[p["plane"]], p, EV)}
        for p in new
        if p["plane"] in before
    ]
