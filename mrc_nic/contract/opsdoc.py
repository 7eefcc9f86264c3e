"""docs/daemon.md's lists of operations, written from their declarations.

python -m mrc_nic.contract.opsdoc [--check] (`make docs`): the host daemons'
operations (mrc_nic.contract.daemonops) and the event log's
(mrc_nic.contract.eventops), each between its markers in docs/daemon.md.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mrc_nic.contract import daemonops, eventops
from mrc_nic.contract import framing as lp

DOCS = Path(__file__).resolve().parents[2] / "docs" / "daemon.md"
TABLES = {"daemon": daemonops.OPS, "events": eventops.OPS}


def _marks(name: str) -> tuple[str, str]:
    return (
        f"<!-- ops:{name} (generated from the declarations: make docs) -->\n",
        f"<!-- /ops:{name} -->\n",
    )


def docs_text(text: str) -> str:
    """docs/daemon.md's text with each service's operations written anew."""
    for name, ops in TABLES.items():
        begin, end = _marks(name)
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise ValueError(f"docs/daemon.md has no {begin.strip()} ... {end.strip()}")
        text = pattern.sub(lambda _, ops=ops, b=begin, e=end: b + lp.markdown(ops) + e, text)
    return text


def main(argv: list[str]) -> int:
    """python -m mrc_nic.contract.opsdoc [--check]: rewrite docs/daemon.md's
    lists of operations (--check: exit 1 when they are not up to date)."""
    old = DOCS.read_text()
    new = docs_text(old)
    if "--check" in argv:
        return int(new != old)
    if new != old:
        DOCS.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
