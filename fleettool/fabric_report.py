"""What a replay says of a node's InfiniBand / RoCE ports, beside the GPU summaries of fleettool.report: each
node's ports by their last state, the ones not ACTIVE named with their state and rate, and the ports whose state
changed during the recording."""

from __future__ import annotations

from typing import Any

from fleettool.formats.ib_sysfs import PORT_STATES
from fleettool.store import Store

_LAST = """
SELECT node, sub,
       arg_max(value, ts) FILTER (metric = 'ib_port_state') AS state,
       arg_max(value, ts) FILTER (metric = 'ib_port_rate_gbps') AS rate,
       arg_max(value, ts) FILTER (metric = 'ib_port_link_layer') AS layer,
       count(DISTINCT value) FILTER (metric = 'ib_port_state') AS states
FROM samples
WHERE metric IN ('ib_port_state', 'ib_port_rate_gbps', 'ib_port_link_layer') AND gpu IS NULL
GROUP BY node, sub ORDER BY node, sub
"""


def port_summary(store: Store) -> list[dict[str, Any]]:
    """One row per port: node, port (`mlx5_0/1`), its last state (name), rate (Gb/s), link layer, and whether
    its state changed during the recording."""
    out = []
    for r in store.query(_LAST):
        if r["state"] is None:
            continue
        state = int(r["state"])
        layer = {1: "InfiniBand", 2: "Ethernet"}.get(int(r["layer"])) if r["layer"] is not None else None
        out.append(
            {
                "node": r["node"],
                "port": str(r["sub"]).removeprefix("port="),
                "state": PORT_STATES.get(state, str(state)),
                "rate_gbps": r["rate"],
                "link_layer": layer,
                "changed": (r["states"] or 0) > 1,
            }
        )
    return out


def render_ports(rows: list[dict[str, Any]]) -> str:
    """`gpu-17 ports: 9 (8 ACTIVE, 1 DOWN: mlx5_2/1 DOWN at 400 Gb/s); changed: mlx5_2/1`, one line a node."""
    lines = []
    for node in dict.fromkeys(r["node"] for r in rows):
        mine = [r for r in rows if r["node"] == node]
        counts: dict[str, int] = {}
        for r in mine:
            counts[r["state"]] = counts.get(r["state"], 0) + 1
        states = ", ".join(
            f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: (x[0] != "ACTIVE", x[0]))
        )
        down = [
            f"{r['port']} {r['state']}"
            + (f" at {r['rate_gbps']:g} Gb/s" if r["rate_gbps"] is not None else "")
            for r in mine
            if r["state"] not in ("ACTIVE", "ACTIVE_DEFER")
        ]
        changed = [r["port"] for r in mine if r["changed"]]
        line = f"{node} ports: {len(mine)} ({states})"
        line += f"; not active: {', '.join(down)}" if down else ""
        line += f"; state changed during the recording: {', '.join(changed)}" if changed else ""
        lines.append(line)
    return "\n".join(lines)
