"""The tables of `mrc-nic status`, from a lab's snapshot (local or merged over machines)."""

from __future__ import annotations

from mrc_nic.cli import output


def render_status(snap: dict) -> None:
    t = snap["topology"]
    output.plain(
        f"lab {snap['lab']} ({t['file']}): {t['hosts']} hosts, "
        f"{t['planes']} planes, "
        f"{t['tiers']} tier(s), rate {t['rate']}, mtu {t['mtu']}, up in {snap['bringup_seconds']}s"
    )
    rows = []
    for h in snap["hosts"]:
        for p in h["ports"]:
            k = p["kernel"] or {}
            rows.append(
                [
                    h["name"],
                    p["ifname"],
                    p["plane"],
                    p["address"],
                    "up" if k.get("carrier") else "down",
                    output.human_count(k.get("tx_packets", 0)),
                    output.human_count(k.get("rx_packets", 0)),
                ]
            )
    output.table(
        "hosts", ["host", "port", "plane", "address", "state", "#tx pkts", "#rx pkts"], rows
    )
    rows = []
    for lk in snap["links"]:
        state = lk["state"]
        rows.append(
            [
                lk["name"],
                lk["plane"],
                output.styled(state, "green" if state == "up" else "red"),
                "" if lk["fault"] is None else f"#{lk['fault']}",
                *output.counter_cells(lk["up"], lk["down"]),
            ]
        )
    output.table(
        "links (pkts/bytes counted by the BPF port program)",
        [
            "link",
            "plane",
            "state",
            "fault",
            "#up pkts",
            "#up bytes",
            "#down pkts",
            "#down bytes",
            "#drops",
        ],
        rows,
    )
    if snap["faults"]:
        rows = [
            [
                f"#{f['id']}",
                f["target"],
                f["text"],
                len(f["links"]),
                output.human_count(f["drops"]) if f["drops_counted"] else "not counted",
                {True: "running", False: "dead", None: ""}[f["worker_alive"]],
            ]
            for f in snap["faults"]
        ]
        output.table(
            "faults in force", ["id", "target", "fault", "#links", "#drops", "worker"], rows
        )
    else:
        output.plain("no faults in force")
