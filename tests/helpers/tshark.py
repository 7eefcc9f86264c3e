"""Fields of a pcap as tshark decodes them."""

from __future__ import annotations

import subprocess


def tshark_fields(path, *fields: str) -> list[list[str]]:
    args = ["tshark", "-r", str(path), "-T", "fields"]
    for f in fields:
        args += ["-e", f]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]
