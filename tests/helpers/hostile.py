"""A hostile tenant: what a program that is not root, run in a host by
`mrc-nic exec --user`, tries against the other sessions of its NIC
(tests/lab/test_hostile_tenant.py). Run as

    python -m tests.helpers.hostile ACTION 'JSON ARGUMENTS'

it opens a session of its own where the action needs one (verbs.Context:
the descriptors its daemon hands it), does what the action says with them or
without, and prints one JSON line of what the kernel and the daemon said to
each try. Every wait is bounded in time.
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import resource
import select
import socket
import sys
import time
from pathlib import Path

from mrc_nic import verbs
from mrc_nic.contract import appops, framing
from mrc_nic.kernel import bpfsys
from mrc_nic.lab import client
from mrc_nic.nic.driver.doorbell import doorbell_frame, kick_frame
from mrc_nic.nic.driver.formats import WQ_SIZE
from mrc_nic.nic.layout import Kick, KickOp
from mrc_nic.verbs import SGE, SendFlags, SendWR

_SYS_PIDFD_GETFD = 438  # the same number on every architecture (asm-generic)
_ETH_P_ALL = 0x0003  # linux/if_ether.h: every protocol, frames sent and received


def _refusal(e: OSError) -> str:
    return errno.errorcode.get(e.errno, str(e.errno))


def _tried(fn, *args) -> str:
    """'done' (an fd it got is closed again), or the errno's name."""
    try:
        fd = fn(*args)
    except OSError as e:
        return _refusal(e)
    if isinstance(fd, int) and fd >= 0:
        os.close(fd)
    return "done"


def _pidfd_getfd(pid: int, fd: int) -> int:
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        got = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return got
    finally:
        os.close(pidfd)


def names(args: dict) -> dict:
    """Name another session's queues and memory: every pin of the lab
    (BPF_OBJ_GET), the maps behind given ids (BPF_MAP_GET_FD_BY_ID), and a
    process's descriptors (/proc/PID/fd, pidfd_getfd)."""
    pins = {p.name: _tried(bpfsys.obj_get, p) for p in sorted(Path(args["pin_dir"]).iterdir())}
    ids = {name: _tried(bpfsys.map_fd_by_id, map_id) for name, map_id in args["map_ids"].items()}
    pid = args["pid"]
    try:
        os.listdir(f"/proc/{pid}/fd")
        proc_fd = "listed"
    except OSError as e:
        proc_fd = _refusal(e)
    getfd = {str(fd): _tried(_pidfd_getfd, pid, fd) for fd in args["fds"]}
    return {"pins": pins, "map_ids": ids, "proc_fd": proc_fd, "pidfd_getfd": getfd}


def _xdp_ctx(data: bytes, meta: int, ifindex: int = 0) -> bytes:
    return bytes(bpfsys.XdpMd(data=meta, data_end=len(data), ingress_ifindex=ifindex))


def _packet_socket(device) -> tuple[socket.socket | None, int, str | None]:
    """A packet socket on the doorbell port: the context's, if it could open one
    (root's), else one of its own, which a tenant may not make: (socket, frame
    size, None), or (None, 0, the errno's name)."""
    if device.port is not None:
        return device.port[0], device.port[1], None
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except OSError as e:
        return None, 0, _refusal(e)
    sock.bind(("doorbell", 0))
    return sock, 1514, None


def kicks(args: dict) -> dict:
    """Kicks of other sessions' QPs through this session's doorbell: each
    [qpn, op, arg] as a BPF_PROG_RUN of kick_fd (the kick as XDP metadata) and,
    if it can make a packet socket, as a frame sent into the doorbell port
    (else "port" is the refusal)."""
    out: dict = {"run": []}
    with verbs.Context() as ctx:
        device = ctx._nic  # the descriptors the session was handed (driver.views)
        sock, size, refused = _packet_socket(device)
        out["port"] = refused if sock is None else []
        for qpn, op, arg in args["kicks"]:
            data = kick_frame(qpn, KickOp(op), arg)
            result = bpfsys.prog_test_run(
                device.program_fd,
                data,
                data_size_out=4096,
                ctx_in=_xdp_ctx(data, ctypes.sizeof(Kick)),
                ctx_size_out=ctypes.sizeof(bpfsys.XdpMd),
            )
            out["run"].append(result.retval)
            if sock is not None:
                out["port"].append(sock.send(doorbell_frame(qpn, size, KickOp(op), arg)))
    return out


def frames(args: dict) -> dict:
    """Wire frames (hex) into the NIC through this session's descriptors:
    `port`: sent on the doorbell socket as handed over; `run`: a BPF_PROG_RUN of
    kick_fd without metadata, as if received on `ifname`; `rebound`: the doorbell
    socket bound to `ifname` first (bind needs no privilege on a packet socket
    one already holds); `sendto`: sent on it to `ifname`, unbound."""
    out: dict = {}
    data = [bytes.fromhex(f) for f in args["frames"]]
    with verbs.Context() as ctx:
        device = ctx._nic
        sock, _, refused = _packet_socket(device)
        if sock is None and args["how"] != "run":  # no packet socket: none to send on
            out["sent" if args["how"] != "rebound" else "bound"] = refused
        elif args["how"] == "port":
            out["sent"] = [sock.send(f) for f in data]
        elif args["how"] == "run":
            ifindex = socket.if_nametoindex(args["ifname"])
            out["retvals"] = []
            for f in data:
                try:
                    r = bpfsys.prog_test_run(device.program_fd, f, ctx_in=_xdp_ctx(f, 0, ifindex))
                    out["retvals"].append(r.retval)
                except OSError as e:
                    out["retvals"].append(_refusal(e))
        elif args["how"] == "sendto":  # the doorbell socket as it is, another port named
            try:
                out["sent"] = [sock.sendto(f, (args["ifname"], 0)) for f in data]
            except OSError as e:
                out["sent"] = _refusal(e)
        else:
            try:
                sock.bind((args["ifname"], 0))
                out["bound"] = sock.getsockname()[0]
                out["sent"] = [sock.send(f) for f in data]
            except OSError as e:
                out["bound"] = _refusal(e)
    return out


def sniff(args: dict) -> dict:
    """The doorbell socket bound to `ifname` for every protocol (ETH_P_ALL):
    says `listening`, then reads frames for `seconds`; how many it read and
    whether one held the bytes `marker` (hex)."""
    marker = bytes.fromhex(args["marker"])
    out: dict = {"frames": 0, "seen": False}
    with verbs.Context() as ctx:
        sock, _, refused = _packet_socket(ctx._nic)
        if sock is None:
            print(json.dumps({"bound": refused}), flush=True)
            return {"bound": refused, "frames": 0, "seen": False}
        try:
            sock.bind((args["ifname"], _ETH_P_ALL))
        except OSError as e:
            print(json.dumps({"bound": _refusal(e)}), flush=True)
            return {"bound": _refusal(e)}
        out["bound"] = sock.getsockname()[0]
        print(json.dumps({"bound": out["bound"]}), flush=True)  # listening
        end = time.monotonic() + args["seconds"]
        while time.monotonic() < end and not out["seen"]:
            sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                frame = sock.recv(65536)
            except TimeoutError:
                break
            out["frames"] += 1
            out["seen"] = marker in frame
    return out


def hold(args: dict) -> dict:
    """Not hostile: another tenant's session (a PD, an MR, a CQ, a QP in RTS
    towards `dest_qpn` at `dest_gid`, idle) held until stdin closes or
    `seconds` pass. Its first line says what it holds:
    its pid, QPN, MR region and the descriptors its session keeps."""
    with verbs.Context() as ctx:
        pd = verbs.PD(ctx)
        mr = pd.reg_mr(4096)
        cq = verbs.CQ(ctx, 16)
        qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq))
        qp.to_init()  # in RTS, as a QP that sends: its queue is the NIC's
        qp.to_rtr(args["dest_qpn"], args["dest_gid"])
        qp.to_rts()
        device = ctx._nic
        fds = [device.program_fd, ctx.session.sock.fileno()]
        fds += [device.port[0].fileno()] if device.port else []
        held = {"pid": os.getpid(), "qpn": qp.qp_num, "region": mr.lkey, "fds": fds}
        print(json.dumps(held), flush=True)
        _line(args["seconds"])  # EOF: the test is done with it
    return {"held": True}


def garbage(args: dict) -> dict:
    """Random bytes over this session's own send queue (WQEs and counters) and
    MR, a doorbell, a WR posted after them: what became of its own QP, its
    completions read for at most `seconds`."""
    out: dict = {}
    with verbs.Context() as ctx:
        pd = verbs.PD(ctx)
        mr = pd.reg_mr(64 * 1024)
        cq = verbs.CQ(ctx, 64)
        qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq))
        qp.to_init()
        qp.to_rtr(args["dest_qpn"], args["dest_gid"])
        qp.to_rts()
        out["qpn"] = qp.qp_num
        mr.buf[:] = os.urandom(len(mr.buf))
        sq = qp._sq  # its own queue: a map of its own, mapped here (driver.views)
        sq.memory[:WQ_SIZE] = os.urandom(WQ_SIZE)
        qp._kick(8)  # the doorbell rung on the garbage
        wr = SendWR(
            wr_id=1,
            sg_list=[SGE(mr.addr, 4096, mr.lkey)],
            remote_addr=args["remote_addr"],
            rkey=args["rkey"],
            send_flags=SendFlags.SIGNALED,
        )
        try:
            qp.post_send(wr)
            out["post"] = "posted"
        except verbs.VerbsError as e:
            out["post"] = [e.errno, str(e)]
        wcs: list = []
        end = time.monotonic() + args["seconds"]
        while time.monotonic() < end and not wcs:
            try:
                wcs += cq.poll(16)
            except verbs.VerbsError as e:
                out["poll"] = [e.errno, str(e)]
                break
            if not wcs:
                cq.wait(0.05)
        out["wcs"] = [[wc.wr_id, wc.status.name] for wc in wcs]
        out["state"] = qp.query()["state"]  # the daemon's view: ERR on its next tick
        while out["state"] != "ERR" and time.monotonic() < end:
            time.sleep(0.05)
            out["state"] = qp.query()["state"]
    return out


def inject(args: dict) -> dict:
    """A QP of its own aimed at another session's receive QP: connected to
    `dest_qpn` on `dest_gid` from that QP's next PSN (`psn`), one signaled
    WRITE of `marker` (hex) to `remote_addr` with `rkey`, as if it had
    learned them; its completion, read for at most `seconds` (none: the
    receiver answers the QP it knows, not this one)."""
    marker = bytes.fromhex(args["marker"])
    with verbs.Context() as ctx:
        pd = verbs.PD(ctx)
        mr = pd.reg_mr(4096)
        mr.buf[: len(marker)] = marker
        cq = verbs.CQ(ctx, 16)
        qp = verbs.QP(pd, verbs.QPInitAttr(send_cq=cq, recv_cq=cq))
        qp.to_init()
        qp.to_rtr(args["dest_qpn"], args["dest_gid"])
        qp.to_rts(sq_psn=args["psn"])
        wr = SendWR(
            wr_id=1,
            sg_list=[SGE(mr.addr, len(marker), mr.lkey)],
            remote_addr=args["remote_addr"],
            rkey=args["rkey"],
            send_flags=SendFlags.SIGNALED,
        )
        qp.post_send(wr)
        wcs: list = []
        end = time.monotonic() + args["seconds"]
        while time.monotonic() < end and not wcs:
            wcs += cq.poll(1)
            if not wcs:
                cq.wait(0.05)
        return {"wcs": [[wc.wr_id, wc.status.name] for wc in wcs]}


def session_ops(args: dict) -> dict:
    """A session of its own spoken raw (mrc_nic.lab.client): its hello's
    descriptors kept, then writes into the lab's CQ lost counts (mmap
    PROT_WRITE, BPF_MAP_UPDATE_ELEM) and every operation on the numbers of
    another session's objects (`theirs`: qpn, region, cq, pd): the errno's
    name each got, or 'done'."""

    out: dict = {}
    with _session() as s:
        hello = s.call(appops.Hello(pid=os.getpid()))
        lost = hello.cq_lost_fd
        try:
            try:
                mmap.mmap(lost, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE).close()
                out["lost_mmap_write"] = "done"
            except OSError as e:
                out["lost_mmap_write"] = _refusal(e)
            key = bytes(4)
            value = bpfsys.map_lookup(lost, key, 8)
            out["lost_update"] = _tried(bpfsys.map_update, lost, key, value)
        finally:
            for fd in (hello.kick_fd, lost):
                if fd >= 0:
                    os.close(fd)
        theirs = args["theirs"]
        tries = {
            "query_qp": appops.QueryQp(qpn=theirs["qpn"]),
            "modify_qp": appops.ModifyQp(qpn=theirs["qpn"], state="ERR", attrs={}),
            "destroy_qp": appops.DestroyQp(qpn=theirs["qpn"]),
            "dereg_mr": appops.DeregMr(region=theirs["region"]),
            "destroy_cq": appops.DestroyCq(cq=theirs["cq"]),
            "dealloc_pd": appops.DeallocPd(pd=theirs["pd"]),
            "reg_mr_in_their_pd": appops.RegMr(pd=theirs["pd"], length=4096, access=3),
            "create_qp_on_their_cq": appops.CreateQp(
                pd=theirs["pd"], send_cq=theirs["cq"], recv_cq=theirs["cq"], max_send_wr=1,
                max_recv_wr=1, max_send_sge=1, max_recv_sge=1,
            ),
        }  # fmt: skip
        for name, request in tries.items():
            try:
                s.call(request)
                out[name] = "done"
            except client.DaemonError as e:
                out[name] = e.errno_name
    return out


def _line(seconds: float) -> str:
    """The test's next line on stdin, waited for at most `seconds` ('' then)."""
    ready, _, _ = select.select([sys.stdin], [], [], seconds)
    return sys.stdin.readline().strip() if ready else ""


def _session():
    """A connection to its host's daemon (mrc_nic.lab.client), spoken raw."""

    return client.Session(os.environ["MRC_NIC_LAB"], os.environ["MRC_NIC_HOST"])


def _hello(s) -> None:
    """Open the session (app_hello); the descriptors it is handed are closed."""

    hello = s.call(appops.Hello(pid=os.getpid()))
    for fd in (hello.kick_fd, hello.cq_lost_fd):
        if fd >= 0:
            os.close(fd)


def _hold(out: dict, end: float) -> None:
    """Say `out` (a line), then wait for stdin to close, until `end` at most."""
    print(json.dumps(out), flush=True)
    _line(max(0.0, end - time.monotonic()))


def stale(args: dict) -> dict:
    """Keep what a released QP, MR and CQ were: a raw session makes them,
    maps their send queue, memory and ring as the library does, releases
    them in the daemon and says which ring, region and CQ slot they had;
    on `go` writes random bytes over the stale queue and memory, on `check`
    says whether the stale ring got any record since (its producer position)."""

    with _session() as s:
        _hello(s)
        pd = s.call(appops.AllocPd()).pd
        mr = s.call(appops.RegMr(pd=pd, length=16 * 1024, access=3))
        cq = s.call(appops.CreateCq(cqe=16))
        qp = s.call(appops.CreateQp(pd=pd, send_cq=cq.cq, recv_cq=cq.cq, max_send_wr=1,
                                    max_recv_wr=1, max_send_sge=1, max_recv_sge=1))  # fmt: skip
        info = bpfsys.map_info(mr.memory_fd)
        memory = mmap.mmap(mr.memory_fd, info.max_entries * info.value_size)
        queue = mmap.mmap(qp.sq_fd, WQ_SIZE)
        produced = mmap.mmap(cq.ring_fd, 4096, prot=mmap.PROT_READ, offset=4096)
        for fd in (mr.memory_fd, qp.sq_fd, cq.ring_fd):
            os.close(fd)
        s.call(appops.DestroyQp(qpn=qp.qpn))
        s.call(appops.DeregMr(region=mr.region))
        s.call(appops.DestroyCq(cq=cq.cq))
        s.call(appops.DeallocPd(pd=pd))
        print(json.dumps({"ring": qp.ring, "region": mr.region, "cq": cq.cq}), flush=True)
        out: dict = {}
        if _line(args["seconds"]) == "go":
            queue[:] = os.urandom(len(queue))
            memory[:] = os.urandom(len(memory))
            out["before"] = int.from_bytes(produced[:8], "little")
            print(json.dumps(out), flush=True)
            if _line(args["seconds"]) == "check":
                out["after"] = int.from_bytes(produced[:8], "little")
        return out


def clog(args: dict) -> dict:
    """A session of its own that sends `requests` requests (query_qp of no QP)
    and reads none of the replies, sending for at most 5 s; says how many it
    sent and whether the daemon dropped it, then holds the connection until
    stdin closes or `seconds` pass."""

    with _session() as s:
        _hello(s)
        line = framing.encode(framing.encode_request(appops.QueryQp(qpn=0)))
        s.sock.settimeout(5)
        sent, dropped = 0, False
        try:
            while sent < args["requests"]:
                s.sock.sendall(line)
                sent += 1
        except TimeoutError:
            pass  # the daemon reads no more
        except (BrokenPipeError, ConnectionResetError):
            dropped = True  # the daemon let it go: it reads no replies
        _hold({"sent": sent, "dropped": dropped}, time.monotonic() + args["seconds"])
    return {"sent": sent, "dropped": dropped}


def connections(args: dict) -> dict:
    """Up to `most` connections to its host's daemon, each a session
    (app_hello) if `hello`, its descriptor limit raised as far as it may; says how many
    it opened and what stopped it, then holds them until stdin closes or
    `seconds` pass."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held: list = []
    out: dict = {"limit": hard, "stopped": None}
    end = time.monotonic() + args["seconds"]
    try:
        while len(held) < args["most"] and time.monotonic() < end:
            try:
                s = _session()
            except BlockingIOError:  # its backlog is full: the daemon accepts one at a time
                time.sleep(0.001)
                continue
            except (OSError, client.DaemonError) as e:
                out["stopped"] = str(e)
                break
            held.append(s)
            if not args["hello"]:
                continue
            try:
                _hello(s)
            except (OSError, client.DaemonError) as e:
                out["stopped"] = str(e)
                break
        out["opened"] = len(held)
        _hold(out, end)
    finally:
        for s in held:
            s.close()
    return out


def hog(args: dict) -> dict:
    """`sessions` sessions, each asking for `shares`, each allocating PDs until
    refused (or `seconds` pass); says how many each got and its limits, then
    holds them until stdin closes or `seconds` pass."""
    end = time.monotonic() + args["seconds"]
    contexts, out = [], {"pds": [], "limits": [], "refused": None}
    try:
        for _ in range(args["sessions"]):
            try:
                ctx = verbs.Context(shares=args["shares"])
            except verbs.VerbsError as e:  # it asked for more than it may
                out["refused_open"] = [e.errno, str(e)]
                break
            contexts.append(ctx)
            pds = []
            while time.monotonic() < end:
                try:
                    pds.append(verbs.PD(ctx))
                except verbs.VerbsError as e:
                    out["refused"] = str(e)
                    break
            out["pds"].append(len(pds))
            out["limits"].append(ctx.shares["pds"])
        _hold(out, end)
    finally:
        for ctx in contexts:
            ctx.close()
    return out


def open_nics(args: dict) -> dict:
    """Open each [lab, host]'s NIC: 'opened host', or [errno, message]."""
    out = {}
    for lab, host in args["targets"]:
        try:
            with verbs.Context(lab, host) as ctx:
                verbs.PD(ctx).reg_mr(4096)
                out[f"{lab}:{host}"] = f"opened {ctx.host}"
        except verbs.VerbsError as e:
            out[f"{lab}:{host}"] = [e.errno, str(e)]
    return out


ACTIONS = {
    "names": names,
    "kicks": kicks,
    "frames": frames,
    "sniff": sniff,
    "hold": hold,
    "garbage": garbage,
    "inject": inject,
    "session_ops": session_ops,
    "stale": stale,
    "clog": clog,
    "connections": connections,
    "hog": hog,
    "open_nics": open_nics,
}


def main() -> None:
    action, args = sys.argv[1], json.loads(sys.argv[2])
    result = ACTIONS[action](args)
    result["uid"] = os.getuid()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
