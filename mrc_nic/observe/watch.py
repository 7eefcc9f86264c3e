"""The frames of `mrc-nic stats --watch` (and of `stats` as a table), drawn with rich.

render() turns one snapshot (with rates) and the recent history into one
frame that fits width x height: a header, the table of the chosen view
(--by plane|path|ev|qp|link), and footers with drops by reason and the
faults in force. Tables lose rows (with a caption saying how many) rather
than overflow, so a frame never scrolls, which is what makes Live flicker.
live.py draws the frames one after the other.
"""

from __future__ import annotations

import time

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from mrc_nic.observe.aggregate import DROP_REASONS
from mrc_nic.observe.sparkline import SPARK_SECONDS, History, Spark

VIEWS = ("plane", "path", "ev", "qp", "link")
EV_LETTERS = {"GOOD": "G", "SKIP": "S", "ASSUMED_BAD": "B", "DENIED": "D", "UNKNOWN": "U"}


# ---- numbers ---------------------------------------------------------------------------


def count(value: float | None) -> str:
    """123, 45.6k, 1.23M; '-' when not known (the first frame has no rates)."""
    if value is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{value:.0f}"


def gbits(bits_per_s: float | None) -> str:
    return "-" if bits_per_s is None else f"{bits_per_s / 1e9:.2f}"


def micros(ns: int | None) -> str:
    return "-" if not ns else f"{ns / 1e3:.0f}"


def _rate(record: dict, *path: str) -> float | None:
    value = record.get("rates")
    for key in path:
        if value is None:
            return None
        value = value.get(key)
    return value


# ---- frames ----------------------------------------------------------------------------


def _table(title: str | None, columns: list[str], **kwargs) -> Table:
    """A borderless table: one line of title, one of header, one rule, then rows."""
    t = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
        padding=(0, 1),
        collapse_padding=True,
        **kwargs,
    )
    for col in columns:
        justify = "right" if col.startswith("#") else "left"
        t.add_column(col.lstrip("#"), justify=justify, no_wrap=True, overflow="ellipsis")
    return t


def _fill(table: Table, rows: list[list], budget: int, what: str) -> Table:
    """Add at most `budget` rows; when some do not fit, a caption line (which
    takes one of the budget's lines) says how many and how to see them."""
    if len(rows) > budget:
        shown = max(budget - 1, 0)
        _caption(table, f"… {len(rows) - shown} more {what}")
        rows = rows[:shown]
    for row in rows:
        table.add_row(*row)
    return table


def _caption(table: Table, text: str) -> Table:
    """One dim line under the table: why it is empty, or what did not fit."""
    table.caption, table.caption_justify, table.caption_style = text, "left", "dim"
    return table


def _fault_cell(record: dict) -> str:
    faults = record.get("faults") or ([record["fault"]] if record.get("fault") else [])
    return ",".join(f"#{f}" for f in faults)


def _state_cell(state: str | None) -> str:
    if state is None or state == "up":
        return state or ""
    return f"[red]{state}[/]"


def _evs_cell(by_state: dict[str, int]) -> str:
    return " ".join(f"{EV_LETTERS.get(s, s)}{n}" for s, n in by_state.items() if n) or "-"


def plane_table(snap: dict, history: History, budget: int) -> Table:
    top = history.top()
    now = snap["monotonic_ns"] / 1e9
    t = _table(
        f"planes: offered by hosts, delivered to hosts (sparks: {SPARK_SECONDS:.0f}s, "
        f"top {gbits(top)} Gb/s)",
        ["plane", "fault", "#off pkt/s", "#Gb/s", "#dlv pkt/s", "#Gb/s", "#drop/s", "delivered"],
    )
    t.columns[-1].no_wrap = False  # the one column that gives way on a narrow terminal
    rows = []
    for p in snap["planes"]:
        drops = _rate(p, "drops")
        fault = _fault_cell(p)
        if p["links_down"]:
            fault = f"{fault} {p['links_down']}dn".strip()
        rows.append(
            [
                str(p["plane"]),
                f"[red]{fault}[/]" if fault else "",
                count(_rate(p, "offered", "pkts_per_s")),
                gbits(_rate(p, "offered", "bits_per_s")),
                count(_rate(p, "delivered", "pkts_per_s")),
                gbits(_rate(p, "delivered", "bits_per_s")),
                count(None if drops is None else sum(v or 0 for v in drops.values())),
                Spark(history, p["plane"], now, top),
            ]
        )
    return _fill(t, rows, budget, "planes")


def _direction_cells(record: dict) -> list[str]:
    cells = []
    for d in ("up", "down"):
        cells.append(count(_rate(record, d, "passed_pkts_per_s")))
        cells.append(gbits(_rate(record, d, "passed_bits_per_s")))
    drops = [_rate(record, d, "drops_per_s") for d in ("up", "down")]
    cells.append(count(None if None in drops else sum(drops)))
    return cells


def path_table(snap: dict, budget: int) -> Table:
    t = _table(
        "paths: host port > T0 > T1 (rates of the T0-T1 link)",
        ["path", "state", "fault", "#up pkt/s", "#Gb/s", "#down pkt/s", "#Gb/s", "#drop/s"],
    )
    rows = [
        [p["path"], _state_cell(p["state"]), _fault_cell(p), *_direction_cells(p)]
        for p in snap["paths"]
    ]
    return _fill(t, rows, budget, "paths (--host, --plane, a taller terminal)")


def link_table(snap: dict, budget: int) -> Table:
    faults = {f["id"]: f for f in snap["faults"]}
    t = _table(
        "links: passed per direction (up: towards the spines)",
        ["link", "state", "fault", "#up pkt/s", "#Gb/s", "#down pkt/s", "#Gb/s", "#drop/s"],
    )
    rows = []
    for lk in snap["links"]:
        f = faults.get(lk["fault"])
        fault = f"[red]#{f['id']} {f['text']}[/]" if f else ""
        rows.append([lk["name"], _state_cell(lk["state"]), fault, *_direction_cells(lk)])
    return _fill(t, rows, budget, "links (--host, --plane, a taller terminal)")


# The EV letters of the QP and EV views, on screen with them.
EV_LEGEND = "EVs: G good, B assumed bad, S skip, D denied, U unknown"
# Marks an infl/win cell whose PSNs in flight exceed the window: NSCC cut the
# window (cwnd) after they were sent; no new data leaves until ACKs bring
# the flight under it.
OVER_WINDOW = "↓"


def _flight_cell(in_flight: int, window: int) -> str:
    return f"{in_flight}/{window}{OVER_WINDOW if in_flight > window else ''}"


def _recv_shown(qp: dict) -> bool:
    """A QP's receive side gets a row when it is the QP's only side or it has
    placed data: a sending QP's idle receive side (RTR, 0 Gb/s) is noise."""
    recv = qp["recv"]
    if recv is None:
        return False
    placed = (recv.get("counters") or {}).get("placed_pkts", 0)
    return qp["send"] is None or bool(placed) or bool(_rate(qp, "recv", "goodput_bits_per_s"))


def _qp_rows(qp: dict, with_planes: bool) -> list[list[str]]:
    rows = []
    send, recv = qp["send"], qp["recv"]
    if send is not None:
        rtt = send["rtt_ns"]
        rows.append(
            [
                qp["qp"],
                f"{qp['host']}>{qp['peer']}",  # the direction data flows: out of this host
                "send",
                send["state"],
                gbits(_rate(qp, "send", "goodput_bits_per_s")),
                count(_rate(qp, "send", "retx_pkts_per_s")),
                _flight_cell(send["in_flight"], send["cwnd"] or send["window"]),
                micros(rtt["srtt_mean"]),
                micros(rtt["min"]),
                _evs_cell(send["evs"]["by_state"]),
            ]
        )
        if with_planes:
            plane_rates = {p["plane"]: p for p in _rate(qp, "send", "planes") or []}
            for p in send["planes"]:
                r = plane_rates.get(p["plane"], {})
                rows.append(
                    [
                        "",
                        f"plane {p['plane']}",
                        "",
                        "",
                        gbits(r.get("tx_bits_per_s")),
                        count(r.get("retx_pkts_per_s")),
                        "",
                        micros(p["srtt_ns"]),
                        "",
                        _evs_cell(p["evs_by_state"]),
                    ]
                )
    if _recv_shown(qp):
        rows.append(
            [
                qp["qp"],
                f"{qp['peer']}>{qp['host']}",  # data flows from the peer into this host
                "recv",
                recv["state"],
                gbits(_rate(qp, "recv", "goodput_bits_per_s")),
                "",
                f"{recv['received_ahead']}/{recv['window']}",
                "",
                "",
                "",
            ]
        )
    return rows


def qp_table(snap: dict, budget: int, *, with_planes: bool) -> Table:
    rows = [row for qp in snap["qps"] for row in _qp_rows(qp, with_planes)]
    over = any(str(r[6]).endswith(OVER_WINDOW) for r in rows)
    note = f"; {OVER_WINDOW}: more in flight than the window (NSCC cut it)" if over else ""
    t = _table(
        f"QPs: goodput (send acked, recv placed), RTT µs; {EV_LEGEND}{note}",
        ["qp", "route", "side", "state", "#Gb/s", "#retx/s", "#infl/win", "#srtt", "#min", "EVs"],
    )
    if not rows:
        return _caption(t, "no QP in the NIC maps")
    return _fill(t, rows, budget, "QP rows (--by qp, --host)")


def ev_table(snap: dict, budget: int) -> Table:
    t = _table(
        f"EVs of send QPs ({EV_LEGEND.removeprefix('EVs: ')})",
        ["qp", "ev", "#plane", "state", "#srtt µs", "#tx pkt/s", "#ack/s", "#lost", "#retx"],
    )
    rows = []
    for qp in snap["qps"]:
        for ev in (qp["send"] or {}).get("ev_list") or []:
            c = ev["counters"]
            state = ev["state"] if ev["state"] in ("GOOD", "SKIP") else f"[red]{ev['state']}[/]"
            rows.append(
                [
                    qp["qp"],
                    str(ev["ev"]),
                    str(ev["plane"]),
                    state,
                    micros(ev["srtt_ns"]),
                    count(_rate(ev, "tx_pkts_per_s")),
                    count(_rate(ev, "acks_per_s")),
                    count(c["lost_pkts"]),
                    count(c["retx_pkts"]),
                ]
            )
    if not rows:
        return _caption(t, "no EV in the NIC maps")
    return _fill(t, rows, budget, "EVs (--plane, --host, a taller terminal)")


def drops_line(snap: dict) -> Text:
    """Drops per second by reason, fabric and NIC, retransmissions, and what the
    switch queues mark and trim per second."""
    parts = []
    for reason in DROP_REASONS:
        rates = [_rate(p, "drops", f"{reason}_per_s") for p in snap["planes"]]
        known = [r for r in rates if r is not None]
        parts.append(f"{reason} {count(sum(known)) if known else '-'}")
    nic = snap["nic"]["rates"] or {}
    nic_drops = {
        k.removeprefix("drop_").removesuffix("_per_s"): v
        for k, v in nic.items()
        if k.startswith("drop_") and v
    }
    parts.extend(f"nic {k} {count(v)}" for k, v in sorted(nic_drops.items()))
    retx = nic.get("tx_retx_per_s")
    line = Text.from_markup("[bold]drops/s[/] " + ", ".join(parts))
    line.append_text(Text.from_markup(f"   [bold]retx/s[/] {count(retx)}"))
    congestion = []
    for name, key in (("marked", "ecn_marked_per_s"), ("trimmed", "trimmed_per_s")):
        known = [r for p in snap["planes"] if (r := _rate(p, "queue", key)) is not None]
        congestion.append(f"{name} {count(sum(known)) if known else '-'}")
    line.append_text(Text.from_markup("   [bold]queues/s[/] " + ", ".join(congestion)))
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


def faults_line(snap: dict) -> Text:
    if not snap["faults"]:
        text = Text.from_markup("[bold]faults[/] none")
    else:
        items = [f"#{f['id']} {f['text']} on {f['target']}" for f in snap["faults"]]
        text = Text.from_markup("[bold]faults[/] [red]" + "; ".join(items) + "[/]")
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def fidelity_line(snap: dict) -> Text:
    """The live verdict: which resource bound the lab since the frame before."""
    from mrc_nic.observe import fidelity

    fid = snap.get("fidelity")
    colour = {"links": "green", "cpu": "red"}.get(fid["verdict"] if fid else "", "yellow")
    text = Text(fidelity.summary(fid), style=colour)
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def header(snap: dict, view: str, keys: bool) -> Text:
    when = time.strftime("%H:%M:%S", time.localtime(snap["time"]))
    f = snap["filter"]
    scope = "".join(
        f" {k} {v}" for k, v in (("host", f["host"]), ("plane", f["plane"])) if v is not None
    )
    every = f"{snap['interval_s']:.2f}s" if snap["interval_s"] else "-"
    hint = "  [dim]1-5 view, q quit[/]" if keys else ""
    text = Text.from_markup(
        f"[bold]mrc-nic[/] lab [bold]{snap['lab']}[/] {when}  every {every}  "
        f"by [bold]{view}[/]{scope}{hint}"
    )
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def render(
    snap: dict,
    history: History,
    view: str,
    width: int,
    height: int | None,
    *,
    keys: bool = False,
) -> RenderableType:
    """One frame. height None: no limit (plain text output)."""
    measure = Console(width=width, height=height or 1000, color_system=None)

    def lines(renderable: RenderableType) -> int:
        return len(measure.render_lines(renderable, measure.options, pad=False))

    top = [header(snap, view, keys)]
    bottom = [drops_line(snap), faults_line(snap)]
    if "fidelity" in snap:
        bottom.append(fidelity_line(snap))

    def main(budget: int) -> RenderableType:
        if view == "plane":
            return plane_table(snap, history, budget)
        if view == "path":
            return path_table(snap, budget)
        if view == "link":
            return link_table(snap, budget)
        if view == "ev":
            return ev_table(snap, budget)
        return qp_table(snap, budget, with_planes=True)

    def qps(budget: int) -> RenderableType:
        return qp_table(snap, budget, with_planes=False)

    if height is None:
        body: list[RenderableType] = [main(10**6)]
        if view == "plane":
            body.append(qps(10**6))
        return Group(*top, *body, *bottom)
    # A table's budget counts its rows and the caption saying what did not fit;
    # what a table takes besides them (title, header, rule) is measured once.
    room = height - len(top) - len(bottom)
    first = main(max(room - (lines(main(0)) - 1), 0))
    body = [first]
    left = room - lines(first)
    qp_frame = lines(qps(0)) - 1
    if view == "plane" and left > qp_frame:
        body.append(qps(left - qp_frame))
    return Group(*top, *body, *bottom)
