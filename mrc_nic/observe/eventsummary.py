"""`mrc-nic events --summary`: the event log folded into one row per plane and second.

A blackholed plane makes a hundred EV records in a tenth of a second; what a
person reading during a chaos run wants from them is, per plane and second,
how many EVs went bad, how many were replaced and how many came back, next
to the faults and heals that explain them. Summary counts events into such
rows and hands a row out once its second is over (or at the end).

Counted per plane:
- bad: a send QP's EV went to ASSUMED_BAD (or DENIED) (ev_state);
- replaced: a send QP's EV was replaced by a fresh one (ev_replaced);
- back: a send QP's EV came back to GOOD from ASSUMED_BAD or DENIED (ev_state);
- rev bad / rev back: the same for the receive QPs' reverse EVs, the paths
  of their ACKs (reverse_ev_state), and rev replaced (reverse_ev_replaced).
Faults and heals are listed in the row of their second, on the planes of
the links they hit when the record says (a whole-plane fault's target), else
under plane "-".
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

GRACE_S = 0.5  # a second's row waits this long after the second for late records
BAD_STATES = ("ASSUMED_BAD", "DENIED")
COUNTS = ("bad", "replaced", "back", "rev_bad", "rev_replaced", "rev_back")
HEADER = (
    f"{'time':<8}  {'plane':>5}  {'bad':>5}  {'replaced':>8}  {'back':>5}  "
    f"{'rev bad':>7}  {'rev repl':>8}  {'rev back':>8}  faults and heals"
)


@dataclass
class _Row:
    second: int
    plane: int | str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"time": self.second, "plane": self.plane, **self.counts, "faults": self.notes}


def _planes_of(event: dict) -> list[int | str]:
    """The planes a fault or heal record names: its links' (p1.t0a-h0 is
    plane 1) or its target's ("plane 2")."""
    planes = set()
    for link in event.get("links") or []:
        m = re.match(r"p(\d+)\.", link)
        if m:
            planes.add(int(m.group(1)))
    m = re.fullmatch(r"plane (\d+)", str(event.get("target", "")))
    if m:
        planes.add(int(m.group(1)))
    return sorted(planes) or ["-"]


def _fault_note(event: dict) -> str:
    if event["type"] == "fault":
        return f"fault {event['id']} {event['mode']} on {event['target']}"
    return f"heal {event['id']} ({event['mode']} on {event['target']})"


class Summary:
    """Events in, rows out: add() returns the rows of the seconds now over."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int | str], _Row] = {}

    def _row(self, event: dict, plane: int | str | None) -> _Row:
        second = int(event["time"])
        key = (second, "-" if plane is None else plane)
        if key not in self.rows:
            self.rows[key] = _Row(*key)
        return self.rows[key]

    def _count(self, event: dict) -> None:
        kind = event["type"]
        # an EV's new state is new_state in the NIC's records, new in reverse.py's
        prefix = "rev_" if kind.startswith("reverse_") else ""
        if kind in ("ev_state", "reverse_ev_state"):
            new = event.get("new_state", event.get("new"))
            old = event.get("old_state", event.get("old"))
            # back: GOOD again after being bad; a new EV's first GOOD (UNTRIED
            # -> GOOD, a new QP's reverse EVs) is no recovery
            back = new == "GOOD" and old in BAD_STATES
            what = "bad" if new in BAD_STATES else "back" if back else None
            if what:
                self._row(event, event.get("plane")).counts[prefix + what] += 1
        elif kind in ("ev_replaced", "reverse_ev_replaced"):
            self._row(event, event.get("plane")).counts[prefix + "replaced"] += 1
        elif kind in ("fault", "heal"):
            for plane in _planes_of(event):
                self._row(event, plane).notes.append(_fault_note(event))

    def add(self, events: list[dict], now: float | None = None) -> list[dict]:
        """Count these events; return the rows of every second that ended more
        than GRACE_S before `now` (None: keep every row until flush())."""
        for event in events:
            self._count(event)
        if now is None:
            return []
        return self._take(lambda second: second + 1 + GRACE_S <= now)

    def flush(self) -> list[dict]:
        """Every row still held, oldest first."""
        return self._take(lambda second: True)

    def _take(self, over) -> list[dict]:
        done = sorted(
            (k for k in self.rows if over(k[0])), key=lambda k: (k[0], str(k[1]).zfill(3))
        )
        return [self.rows.pop(k).as_dict() for k in done]


def line(row: dict) -> str:
    """One row as text, under HEADER; zeros shown as '.' so the numbers stand out."""
    clock = time.strftime("%H:%M:%S", time.localtime(row["time"]))

    def n(key: str, width: int) -> str:
        return f"{row[key] or '.':>{width}}"

    return (
        f"{clock:<8}  {row['plane']!s:>5}  {n('bad', 5)}  {n('replaced', 8)}  {n('back', 5)}  "
        f"{n('rev_bad', 7)}  {n('rev_replaced', 8)}  {n('rev_back', 8)}  "
        f"{'; '.join(row['faults'])}"
    ).rstrip()
