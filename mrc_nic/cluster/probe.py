"""One machine's reading of its shard, in a process of its own: the stats
snapshot (as `mrc-nic stats --format json` makes it) and the fidelity
meter's raw sample (the machine's CPU and softnet counters, its links' TBF
counters), taken together so that a verdict and the counters it explains
cover the same time.

The agent runs this as `python -m mrc_nic.cluster.probe` with a JSON request
on stdin ({"lab", "stats", "ev_detail", "meter"}) and reads one JSON line
back; not in the agent itself, for the reason cluster.shard gives. The raw
sample is judged where the machines' samples meet (cluster.verdict): a
verdict needs two samples of one machine, and this process lives for one.
"""

from __future__ import annotations

import json
import sys


def probe(lab: str, stats: bool = True, ev_detail: bool = False, meter: bool = True) -> dict:
    from mrc_nic.observe import fidelity
    from mrc_nic.observe import stats as stats_mod

    out: dict = {}
    if meter:
        m = fidelity.Meter(lab)
        try:
            out["meter"] = fidelity.raw_to_json(m.raw())
        finally:
            m.close()
    if stats:
        out["snapshot"] = stats_mod.Sampler(lab, ev_detail=ev_detail).snapshot()
    return out


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        result = {"ok": probe(**request)}
    except Exception as e:  # noqa: BLE001 (one line for the agent to relay)
        from mrc_nic.errors import MrcNicError

        result = {"error": str(e) if isinstance(e, MrcNicError) else f"{type(e).__name__}: {e}"}
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
