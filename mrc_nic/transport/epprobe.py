"""A controller's connectionless EV probes and port status updates (OCP
mrc_ctl_ep_batch_send_wait, MRC_CTL_EP_OP_EV_PROBE and MRC_CTL_EP_OP_PORT_STATUS_UPDATE).

A batch of (destination, EV, port) probes, each sent on its own path: a
PROBE to the endpoint QPN (MRC_EP_QPN) with the EV as UDP source port, out
of the port's plane, so it takes the path that data of any QP to that
destination on that EV takes. The destination's NIC answers it in XDP
without a QP (bpf/nic_answers.h, rx_ep_probe), with its own service time in
the reply; this host's NIC records the reply with its arrival time in
nic_ep_probes (rx_ep_probe_reply), slot psn % EP_SLOTS. The daemon reads
its slots every tick while a batch waits, and answers the batch once every
probe is answered or its timeout has passed: the responses in arrival
order, each with its req_id, port, RTT (arrival minus the PROBE's tx_ts,
less the responder's service time: adj_svc_time 1) as mrc_ctl.h has them.

A port status update (PORT_STATUS_UPDATE) is the same PROBE with
MRC_PROBE_F_PORT_STATUS, its port_bitmap the port status the request gives
(op.port_status_update.port_status, bit n: port n; left out: this host's
own, nic_port_up): the destination's NIC records it for this host in its
nic_peer_ports (rx_ep_probe; `mrc-nic port status` shows it as `peers`) and
answers with its own port status, which the response carries as
peer_port_status, with the RTT as for a probe. Neither leaves from a port
this host has administratively DISABLED: such a request is not sent (the
reply lists it in `unsent`) and goes unanswered.

Slots, not psn ranges, are what batches share: each probe takes a free slot
and a probe number psn = generation << log2(EP_SLOTS) | slot, so a late
reply to an earlier probe of that slot (another psn, another tx_ts) is
never taken for this one. A batch that would need more slots than are free
is refused with EAGAIN, as the header says.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import socket
import time
from typing import Any

from mrc_nic.abi import defs
from mrc_nic.contract.framing import RequestError
from mrc_nic.lab.topology import Topology
from mrc_nic.nic import wireconst
from mrc_nic.transport import prober
from mrc_nic.transport.host import host_with_address
from mrc_nic.transport.profiles import AUTO_EV_BASE

EP_SLOTS = defs.NIC_EP_SLOTS  # probes a host has outstanding, at most
TIMEOUT_MIN_NS = 1_000  # 1 us
TIMEOUT_MAX_NS = 10_000_000_000  # 10 s
OP_TYPES = ("EV_PROBE", "PORT_STATUS_UPDATE")  # enum mrc_ctl_ep_op_type
FMT_MODES = ("UDP", "STEV")  # what a wire EV of this IPv4 lab can be (profiles: SRV6 refused)


@dataclasses.dataclass(frozen=True)
class Probe:
    """One request of a batch, checked: where it goes and on which EV."""

    req_id: int
    dst_host: int  # the destination's host index
    plane: int  # the port it leaves from, 0-based
    ev: int  # the wire EV: UDP source port
    dgid: str  # as asked
    # PORT_STATUS_UPDATE: the status it sends, bit p = plane p (-1: the host's own when
    # sent); None: an EV_PROBE
    port_status: int | None = None


@dataclasses.dataclass
class Sent:
    probe: Probe
    slot: int
    psn: int
    tx_ts: int
    src_ip: int  # the destination's address on the plane, as BPF stores it (network order)


@dataclasses.dataclass(eq=False)
class Batch:
    conn: Any
    deadline_ns: int
    sent: list[Sent]
    answers: dict[int, dict] = dataclasses.field(default_factory=dict)  # slot -> response
    unsent: list[int] = dataclasses.field(default_factory=list)  # req_ids of DISABLED ports


def _bad(message: str) -> RequestError:
    return RequestError(errno.EINVAL, message)


def _host_of(topo: Topology, gid: object, what: str) -> int:
    """The host index whose address (on any plane) gid is."""
    try:
        addr = ipaddress.IPv4Address(str(gid))
    except ValueError:
        raise _bad(f"{what} must be an IPv4 address of a host of the lab, not {gid!r}") from None
    index = host_with_address(topo, addr)
    if index is None:
        raise _bad(f"{what} {addr} is no host's address in lab {topo.lab!r}")
    return index


def _port_status(topo: Topology, where: str, op: object) -> int | None:
    """A PORT_STATUS_UPDATE request's op {port_status_update: {port_status}}: the
    status as a plane bitmap (bit p: plane p), None when left out (the host's own)."""
    if op is None:
        return None
    inner = op.get("port_status_update") if isinstance(op, dict) else None
    if not isinstance(inner, dict) or set(op) != {"port_status_update"}:
        raise _bad(f"{where}: op must be {{port_status_update: {{port_status}}}}, not {op!r}")
    if set(inner) - {"port_status"}:
        raise _bad(f"{where}: op.port_status_update takes port_status only")
    mask = inner.get("port_status")
    if mask is None:
        return None
    ports = (1 << topo.planes) - 1 << 1  # bit n: port n, 1..planes (phy_port_mask)
    if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0 or mask & ~ports:
        raise _bad(
            f"{where}: port_status is a mask of ports 1..{topo.planes} (bit n: port n, "
            f"at most {ports:#x}), not {mask!r}"
        )
    return mask >> 1


def check_requests(
    topo: Topology, host: int, op_type: str, reqs: list, rsp_timeout: int, req_tc: int
) -> list[Probe]:
    """The batch's requests as Probes, or the first refusal (errno and one line)."""
    if op_type not in OP_TYPES:
        raise _bad(f"op_type must be one of {', '.join(OP_TYPES)}, not {op_type!r}")
    update = op_type == "PORT_STATUS_UPDATE"
    if not reqs:
        raise _bad("a batch needs at least one request")
    if len(reqs) > EP_SLOTS:
        raise _bad(f"a batch holds at most {EP_SLOTS} requests, not {len(reqs)}")
    if not (isinstance(rsp_timeout, int) and TIMEOUT_MIN_NS <= rsp_timeout <= TIMEOUT_MAX_NS):
        raise _bad(
            f"rsp_timeout must be {TIMEOUT_MIN_NS}..{TIMEOUT_MAX_NS} ns, not {rsp_timeout!r}"
        )
    if not (isinstance(req_tc, int) and 0 <= req_tc <= 63):
        raise _bad(f"req_tc is a DSCP, 0..63, not {req_tc!r}")
    out, ids = [], set()
    for i, r in enumerate(reqs):
        where = f"request {i}"
        if not isinstance(r, dict):
            raise _bad(f"{where} must be an object (struct mrc_ctl_ep_req)")
        unknown = set(r) - {"req_id", "sgid", "dgid", "ev_fmt_mode", "req_ev", "op"}
        if unknown:
            raise _bad(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        if not update and r.get("op") is not None:
            raise _bad(f"{where}: an EV_PROBE takes no op (op is for PORT_STATUS_UPDATE)")
        status = _port_status(topo, where, r.get("op")) if update else None
        req_id = r.get("req_id")
        if not (isinstance(req_id, int) and 0 <= req_id <= 0xFFFF):
            raise _bad(f"{where}: req_id must be 0..65535, not {req_id!r}")
        if req_id in ids:
            raise _bad(f"{where}: req_id {req_id} is already in the batch (must be unique)")
        ids.add(req_id)
        mode = str(r.get("ev_fmt_mode", "UDP")).upper()
        if mode not in FMT_MODES:
            raise _bad(f"{where}: ev_fmt_mode must be UDP or STEV on this lab, not {mode!r}")
        if r.get("sgid") is not None and _host_of(topo, r["sgid"], f"{where}: sgid") != host:
            raise _bad(f"{where}: sgid {r['sgid']} is not this host's")
        if "dgid" not in r:
            raise _bad(f"{where}: dgid is missing (the destination's address)")
        dst = _host_of(topo, r["dgid"], f"{where}: dgid")
        if dst == host:
            raise _bad(f"{where}: dgid {r['dgid']} is this host: probe another one")
        ev = r.get("req_ev")
        if not isinstance(ev, dict) or not isinstance(ev.get("val"), int):
            raise _bad(f"{where}: req_ev must be {{val, port}}, not {ev!r}")
        val, port = ev["val"], ev.get("port", 0)
        if not 1 <= val <= wireconst.EV_MAX:
            raise _bad(f"{where}: req_ev.val is a UDP source port here, 1..65535, not {val}")
        if not (isinstance(port, int) and 0 <= port <= topo.planes):
            raise _bad(f"{where}: req_ev.port must be 1..{topo.planes} (0: AUTO's), not {port!r}")
        if port == 0:
            if val < AUTO_EV_BASE:
                raise _bad(
                    f"{where}: EV {val} is not an AUTO EV (from {AUTO_EV_BASE}): give req_ev.port"
                )
            port = (val - AUTO_EV_BASE) % topo.planes + 1  # EV profile 0's plane for it
        if update and status is None:
            status = -1  # this host's own, when it is sent
        out.append(Probe(req_id, dst, port - 1, val, str(r["dgid"]), status))
    return out


class EpProber:
    """One host's endpoint probe batches: send, collect, answer."""

    def __init__(self, topo: Topology, host: int, maps: Any) -> None:
        self.topo, self.host, self.maps = topo, host, maps
        self._free = list(range(EP_SLOTS))
        self._gen = 0
        self._socks: dict[int, socket.socket] = {}
        self._templates: dict[tuple, bytes] = {}
        self.batches: list[Batch] = []
        self.sent = 0
        self.unsent = 0  # requests not sent: their port is DISABLED

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()

    def start(self, req: Any, conn: Any) -> Batch:
        """Check and send a batch (ctlops.EpBatchSendWait); it is answered by step()."""
        probes = check_requests(
            self.topo, self.host, req.op_type, req.reqs, req.rsp_timeout, req.req_tc
        )
        if len(probes) > len(self._free):
            raise RequestError(
                errno.EAGAIN,
                f"{EP_SLOTS - len(self._free)} probes are outstanding, {len(self._free)} "
                f"slots free for {len(probes)}: retry later",
            )
        batch = Batch(conn, 0, [])
        disabled = self.maps.ports_disabled(self.host)
        batch.unsent = [p.req_id for p in probes if disabled >> p.plane & 1]
        probes = [p for p in probes if not disabled >> p.plane & 1]  # a DISABLED port sends none
        self.unsent += len(batch.unsent)
        taken = self._free[: len(probes)]
        del self._free[: len(probes)]
        try:
            for p, slot in zip(probes, taken, strict=True):
                self._gen = (self._gen + 1) & (wireconst.PSN_MASK // EP_SLOTS)
                psn = self._gen * EP_SLOTS + slot
                tx_ts = self._send(p, psn, req.req_tc)
                dst_ip = self.topo.host_address(p.dst_host, p.plane).packed
                batch.sent.append(Sent(p, slot, psn, tx_ts, int.from_bytes(dst_ip, "little")))
        except BaseException:
            self._free.extend(taken)  # nothing of the batch waits: its slots are free again
            raise
        batch.deadline_ns = time.monotonic_ns() + req.rsp_timeout
        self.batches.append(batch)
        return batch

    def _send(self, p: Probe, psn: int, req_tc: int) -> int:
        """Send one probe; its tx_ts (CLOCK_MONOTONIC, as the NIC's
        bpf_ktime_get_ns), taken once its frame is ready."""
        from mrc_nic.nic import wire

        bitmap, flags = self.maps.port_bitmap(self.host), 0
        if p.port_status is not None:  # a port status update: what it says
            flags = wireconst.PROBE_F_PORT_STATUS
            bitmap = bitmap if p.port_status < 0 else p.port_status
        key = (p.dst_host, p.plane, bitmap, flags, req_tc)
        template = self._templates.get(key)
        if template is None:
            port = self.maps.port(self.host, p.plane)
            ends = wire.Endpoints(
                src_mac=port["mac"],
                dst_mac=port["nh_mac"],
                src_ip=str(self.topo.host_address(self.host, p.plane)),
                dst_ip=str(self.topo.host_address(p.dst_host, p.plane)),
            )
            frame = wire.probe(
                ends, ev=1, dqpn=wire.EP_QPN, psn=0, tx_ts=0, port_bitmap=bitmap, flags=flags
            )
            if req_tc:
                from scapy.layers.inet import IP

                frame[IP].tos = req_tc << wire.DSCP_SHIFT | int(wire.Ecn.ECT0)
                del frame[IP].chksum
            if len(self._templates) >= prober.TEMPLATES_MAX:
                self._templates.clear()
            template = self._templates[key] = bytes(frame)
        sock = prober.plane_socket(self._socks, p.plane)
        tx_ts = time.monotonic_ns()
        try:
            sock.send(prober.probe_frame(template, p.ev, psn, tx_ts))
            self.sent += 1
        except OSError:
            pass  # the port is down: this probe goes unanswered
        return tx_ts

    def step(self, now_ns: int | None = None) -> list[tuple[Any, list[dict], list[int]]]:
        """Collect what came back; the batches that are done, with their
        responses in arrival order (and their slots freed) and the req_ids
        not sent."""
        if not self.batches:
            return []
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        slots = self.maps.ep_probes(self.host)
        done = []
        for b in self.batches:
            for s in b.sent:
                if s.slot in b.answers:
                    continue
                e = slots[s.slot]
                if e.rx_ns and e.psn == s.psn and e.tx_ts == s.tx_ts and e.src_ip == s.src_ip:
                    b.answers[s.slot] = response(s, e)
            if len(b.answers) == len(b.sent) or now_ns >= b.deadline_ns:
                done.append(b)
        out = []
        for b in done:
            self.batches.remove(b)
            self._free.extend(s.slot for s in b.sent)
            rsps = sorted(b.answers.values(), key=lambda r: r["_rx"])  # arrival order
            rsps = [{k: v for k, v in r.items() if k != "_rx"} for r in rsps]
            out.append((b.conn, rsps, b.unsent))
        return out


def response(s: Sent, e: Any) -> dict:
    """struct mrc_ctl_ep_rsp of one answered probe, and mrc-nic's extensions."""
    rtt_raw = max(0, e.rx_ns - s.tx_ts)
    adj = 1 if e.flags & wireconst.PROBE_F_SVC else 0
    svc = e.svc_ns if adj else 0
    return {
        "req_id": s.probe.req_id,
        "port": e.plane + 1,
        "rtt": min(max(0, rtt_raw - svc), 0xFFFFFFFF),
        "adj_svc_time": adj,
        "ev": e.ev,
        "dgid": s.probe.dgid,
        "rtt_raw": rtt_raw,
        "svc_time": svc,
        "ecn": bool(e.flags & wireconst.AckFlag.ECN),
        **(
            {"peer_port_status": e.port_bitmap << 1}  # the responder's ports, bit n: port n
            if s.probe.port_status is not None
            else {}
        ),
        "_rx": e.rx_ns,
    }
