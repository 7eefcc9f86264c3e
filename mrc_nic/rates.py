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
"""

from __future__ import annotations

from collections.abc import Callable

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
# A send QP's goodput: acknowledged payload. The engine fills every packet but
# a message's last with one 1 KiB element, so acked packets x 1 KiB is exact
# for whole-KiB messages (the only ones the engine sends in v1).
PAYLOAD_BYTES = 1024


def increase(prev: int | None, cur: int | None) -> int | None:
    """How much a counter grew; a counter that went down restarted from zero."""
    if prev is None or cur is None:
        return None
    return cur - prev if cur >= prev else cur


def per_second(prev: dict, cur: dict, seconds: float, spec: dict) -> dict[str, float | None]:
    """Rates of cur's counters over prev's, as named by spec (see LINK_DIRECTION)."""
    out: dict[str, float | None] = {}
    for key, (fields, scale) in spec.items():
        grew = [increase(prev.get(f), cur.get(f)) for f in fields]
        out[key] = None if None in grew else sum(grew) * scale / seconds
    return out


def add_rates(prev: dict, cur: dict) -> dict:
    """Fill cur's `rates` fields and `interval_s` from prev (same lab); returns cur."""
    seconds = (cur["monotonic_ns"] - prev["monotonic_ns"]) / 1e9
    if seconds <= 0:
        return cur
    cur["interval_s"] = seconds

    def rate(p: dict, c: dict, spec: dict) -> dict:
        return per_second(p, c, seconds, spec)

    _match(prev["links"], cur["links"], lambda r: r["name"], _direction_rates(rate))
    _match(prev["paths"], cur["paths"], lambda r: r["path"], _direction_rates(rate))
    kernel_seconds = _kernel_seconds(prev, cur)

    def kernel_rate(p: dict, c: dict, spec: dict, carried: dict | None) -> dict | None:
        if kernel_seconds == 0:
            return carried  # the same kernel reading as before
        return per_second(p, c, kernel_seconds, spec) if kernel_seconds else None

    _match(prev["planes"], cur["planes"], lambda r: r["plane"], _plane_rates(rate, kernel_rate))
    prev_ports = {(h["name"], p["ifname"]): p for h in prev["hosts"] for p in h["ports"]}
    for host in cur["hosts"]:
        for port in host["ports"]:
            old = prev_ports.get((host["name"], port["ifname"]))
            if old and old["kernel"] and port["kernel"]:
                port["rates"] = kernel_rate(old["kernel"], port["kernel"], HOST_PORT, old["rates"])
    _match(prev["qps"], cur["qps"], lambda r: r["qpn"], _qp_rates(rate))
    old_nic, nic = prev["nic"]["counters"], cur["nic"]["counters"]
    if old_nic is not None and nic is not None:
        spec = {f"{name}_per_s": ((name,), 1) for name in nic}
        cur["nic"]["rates"] = rate(old_nic, nic, spec)
    return cur


def _match(prev: list[dict], cur: list[dict], identity: Callable, fill: Callable) -> None:
    """fill(prev_record, cur_record) for each record of cur that prev has too."""
    before = {identity(r): r for r in prev}
    for record in cur:
        old = before.get(identity(record))
        if old is not None:
            fill(old, record)


def _direction_rates(rate: Callable) -> Callable:
    def fill(old: dict, new: dict) -> None:
        new["rates"] = {d: rate(old[d], new[d], LINK_DIRECTION) for d in ("up", "down")}

    return fill


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
            send["goodput_bits_per_s"] = None if acked is None else acked * PAYLOAD_BYTES * 8
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
