"""Verified WRITEs that go on for as long as a lab test needs them."""

from __future__ import annotations

import threading
import time

from mrc_nic.contract import daemonops as ops
from mrc_nic.lab import client
from mrc_nic.workloads import rdma_write


class Repeating:
    """Verified writes of `size` bytes on one connection, one after another,
    until stop(): the send QP and its EVs live through the whole test, however
    fast this machine is at the moment."""

    def __init__(self, labname: str, size: int, *, auth: bool = False, **kw) -> None:
        self.conn = rdma_write.Connection(labname, "h0", "h1", size_hint=size)
        self.results: list[dict] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()

        def go() -> None:
            try:
                while not self._stop.is_set():
                    self.results.append(self.conn.write(size, verify=True, auth=auth, **kw))
                    if not self.results[-1]["completed"]:
                        return
            except BaseException as e:  # noqa: BLE001 (handed to the test)
                self.error = e

        self.thread = threading.Thread(target=go, daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 120.0) -> list[dict]:
        """The writes' results, once the one under way has ended; each must be
        complete and byte-exact."""
        self._stop.set()
        self.thread.join(timeout)
        alive = self.thread.is_alive()
        self.conn.close()
        assert not alive, "the write did not end"
        if self.error:
            raise self.error
        assert all(r["completed"] and r["verified"] for r in self.results), self.results
        return self.results

    def __enter__(self) -> Repeating:
        return self

    def __exit__(self, *exc: object) -> None:
        """Whatever the test did: the write under way is stopped and the
        connection released (a failed test must not leave QPs and memory to
        the next one)."""
        self._stop.set()
        if self.thread.is_alive():
            self.conn.stop("the test ended")
            self.thread.join(30)
        self.conn.close()


def send_qp(labname: str, old: frozenset[int] = frozenset()) -> int:
    """h0's send QP to h1 once it is in RTS (not one of `old`: a session that
    just ended may still be listed while its daemon releases it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        qps = client.call(labname, "h0", ops.QpList()).qps
        live = [
            q["qpn"]
            for q in qps
            if q["dest_host"] == 1 and q["state"] == "RTS" and q["qpn"] not in old
        ]
        if live:
            return live[0]
        time.sleep(0.01)
    raise AssertionError("no send QP in RTS")


def wait_for(what, predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if predicate(value):
            return value
        time.sleep(0.02)
    raise AssertionError(f"not reached in {timeout} s: last {value}")
