"""A real Prometheus server (Debian's `prometheus`) scrapes `mrc-nic stats --listen`
on a real lab while traffic runs, and the lab's series arrive in its database;
`promtool check metrics` passes on the endpoint's exposition."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

from mrc_nic.workloads import traffic
from tests.helpers.env import MRC, ROOT

pytestmark = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="Debian's prometheus package is not installed (scripts/setup installs it)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=2) as reply:
        return json.load(reply)["data"]["result"]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.read().decode()


def test_a_prometheus_server_scrapes_the_lab_and_promtool_accepts_it(default_lab, tmp_path):
    lab, topo = default_lab.lab, default_lab
    metrics_port, prom_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [*MRC, "stats", "-l", lab, "--format", "prom", "--listen", f"127.0.0.1:{metrics_port}"]
        + ["--duration", "40"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: mrc-nic\n    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
    )
    server = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        + [f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    flow = threading.Thread(
        target=traffic.udp,
        args=(topo, "h0", "h1"),
        kwargs={"seconds": 6.0, "pps": 4000, "source_ports": 4},
        daemon=True,
    )
    try:
        flow.start()
        deadline = time.monotonic() + 30
        delivered: list[dict] = []
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                delivered = query(prom_port, "mrc_plane_delivered_packets_total > 0")
            except OSError:
                continue  # the server is still starting
            if len(delivered) == topo.planes:
                break
        assert sorted(int(s["metric"]["plane"]) for s in delivered) == list(range(topo.planes))
        assert all(s["metric"]["job"] == "mrc-nic" for s in delivered)
        up = query(prom_port, 'up{job="mrc-nic"}')
        assert up and up[0]["value"][1] == "1"

        text = get(f"http://127.0.0.1:{metrics_port}/metrics")
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        with pytest.raises(urllib.error.HTTPError, match="404"):
            get(f"http://127.0.0.1:{metrics_port}/other")
    finally:
        server.terminate()
        exporter.terminate()
        server.wait(timeout=10)
        exporter.wait(timeout=10)
        flow.join(timeout=10)
