"""A server and a client program, each in a lab host (through `mrc-nic exec`)."""

from __future__ import annotations

import subprocess
import time

TIMEOUT = 120  # seconds for either program


def run_server_client(
    server_cmd: list[str],
    client_cmd: list[str],
    *,
    settle: float = 0.0,
    ready: str | None = None,
) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The server started, then the client once the server's stderr said
    `ready` (a client does not wait long for its server, as perftest's) or
    settle seconds later, run to its end, then the server's end awaited:
    (client, server). The server is killed (by pid) if it outlives the wait."""
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = ""
    try:
        if ready is not None:
            said = server.stderr.readline()
            assert ready in said, said + server.stderr.read()
        time.sleep(settle)
        client = subprocess.run(client_cmd, capture_output=True, text=True, timeout=TIMEOUT)
        out, err = server.communicate(timeout=TIMEOUT)
        err = said + err
    finally:
        if server.poll() is None:  # ours, by pid
            server.kill()
            server.wait()
    return client, subprocess.CompletedProcess(server.args, server.returncode, out, err)
