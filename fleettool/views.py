"""What the triage screens show, as plain data from the store (no Textual here, so the CLI, tests and any
other front end can use it): the alert list, one alert's evidence (the series around it, its events, runs and
burn-in results, its runbook), and the fleet grid (every node and GPU with its worst open alert)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

from fleettool.store import Store
from fleettool.store.alerts import alert_by_id, alert_gpus, list_alerts
from fleettool.store.nodes import node_states
from fleettool.store.values import db_time, epoch

SEV_RANK = {"critical": 0, "warning": 1, "info": 2}
# the series an alert's evidence shows beside its rules' own: what an on-call engineer looks at for the category
# (a thermal slowdown is judged on the clock-event reasons, but the temperature is what explains it)
CONTEXT_SERIES: dict[str, tuple[str, ...]] = {
    "thermal": ("gpu_temp_c", "mem_temp_c", "sm_clock_mhz", "power_w"),
    "power": ("power_w", "power_limit_w", "sm_clock_mhz"),
    "ecc": ("ecc_dbe_volatile", "ecc_sbe_volatile", "remap_uncorrectable_rows", "remap_pending"),
    "row-remap": ("remap_uncorrectable_rows", "remap_correctable_rows", "remap_pending", "remap_failure"),
    "pcie": ("pcie_link_width", "pcie_link_gen", "pcie_replay_total"),
    "nvlink": ("nvlink_link_up", "nvlink_crc_flit_errors_total", "nvlink_crc_data_errors_total"),
    "straggler": ("sm_clock_mhz", "power_w", "gpu_temp_c"),
    "gpu-lost": ("gpu_temp_c", "power_w"),
}
STALE_S = 60.0  # a gauge this much older than the node's newest sample is shown as stale


def alerts(store: Store, *, now: float | None = None, state: str | None = None) -> list[dict[str, Any]]:
    """The alert list, in triage order (fleettool.store.alerts.AlertOrder.TRIAGE), silences and
    acknowledgements as of `now` (default: the wall clock)."""
    return list_alerts(store, now=now, state=state)


def runbook_text(runbook: str) -> str:
    name = runbook.rsplit("/", 1)[-1]
    try:
        return resources.files("fleettool.runbooks").joinpath(name).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return f"# {name}\n\nNo runbook found for this rule."


def render_runbook(text: str, alert: dict[str, Any], identity: dict[str, Any] | None) -> str:
    """A runbook for this alert: its `<node>`, `<gpu>` and `<bus>` (the PCI id, as lspci takes it) filled in,
    and a head that says which GPU (index, UUID, PCI id, model) and what the evidence found. A placeholder
    whose value is unknown (a node-level alert has no GPU) is left for the reader, and so are the others
    (`<job>`, `<default>`)."""
    ident = identity or {}
    fill = {"<node>": alert.get("node"), "<gpu>": alert.get("gpu")}
    pci = ident.get("pci_bus_id")
    if pci:
        fill["<bus>"] = pci if pci.count(":") == 2 else f"0000:{pci}"  # lspci -s takes domain:bus:dev.fn
    for k, v in fill.items():
        if v is not None:
            text = text.replace(k, str(v))
    gpu = "" if alert.get("gpu") is None else f", GPU {alert['gpu']}"
    label = {"uuid": "UUID", "pci_bus_id": "PCI", "model": "", "serial": "serial"}
    facts = [f"{label[k]} {ident[k]}".strip() for k in label if ident.get(k)]
    head = f"> **This alert:** {alert.get('rule')} on {alert.get('node')}{gpu}" + (
        f" ({', '.join(facts)})" if facts else ""
    )
    findings = (
        (alert.get("evidence") or {}).get("findings", []) if isinstance(alert.get("evidence"), dict) else []
    )
    lines = [head] + [f"> - {f.get('summary', '')}" for f in findings[:5] if f.get("summary")]
    if text.startswith("---"):  # keep the front matter first
        end = text.find("\n---", 3)
        if end > 0:
            cut = text.find("\n", end + 4) + 1 or len(text)
            return text[:cut] + "\n" + "\n".join(lines) + "\n\n" + text[cut:]
    return "\n".join(lines) + "\n\n" + text


def alert_detail(store: Store, alert_id: str, *, points: int = 60) -> dict[str, Any] | None:
    a = alert_by_id(store, alert_id)
    if a is None:
        return None
    ev = json.loads(a["evidence"]) if a["evidence"] else {}
    t0, t1 = ev.get("window") or [(epoch(a["first_seen"]) or 0) - 600, (epoch(a["last_seen"]) or 0) + 600]
    lo, hi = db_time(t0), db_time(t1)
    series: dict[str, list[float]] = {}
    series_ts: dict[str, list[float]] = {}  # each point's time (unix s; a bucket's first), for plots
    series_stale: dict[str, float] = {}  # seconds a series' last reading is behind its node's newest
    newest = store.query(
        "SELECT epoch(max(ts)) AS raw, (SELECT epoch(max(minute)) FROM samples_1m WHERE node = ? "
        "AND minute BETWEEN ? AND ?) AS rolled FROM samples WHERE node = ? AND ts BETWEEN ? AND ?",
        [a["node"], lo, hi, a["node"], lo, hi],
    )[0]
    metrics = [m for m, _rule in ev.get("series", [])]
    metrics += [m for m in CONTEXT_SERIES.get(a["category"], ()) if m not in metrics]
    for metric in metrics:
        vals = store.query(
            "SELECT ts, value FROM samples WHERE node = ? AND gpu IS NOT DISTINCT FROM ? AND metric = ? "
            "AND ts BETWEEN ? AND ? ORDER BY ts",
            [a["node"], a["gpu"], metric, lo, hi],
        )
        raw = bool(vals)
        if not vals:
            vals = store.query(
                "SELECT minute AS ts, vmean AS value FROM samples_1m WHERE node = ? AND gpu IS NOT DISTINCT FROM ? "
                "AND metric = ? AND minute BETWEEN ? AND ? ORDER BY minute",
                [a["node"], a["gpu"], metric, lo, hi],
            )
        v = [float(r["value"]) for r in vals]
        ts = [epoch(r["ts"]) or 0.0 for r in vals]
        node_newest = newest["raw" if raw else "rolled"]
        if ts and node_newest is not None and float(node_newest) - ts[-1] >= STALE_S:
            # the node went on reading and this series did not: its last value is not the GPU's state now
            series_stale[metric] = float(node_newest) - ts[-1]
        if len(v) > points:  # keep the shape: max of each bucket (spikes matter in triage)
            step = len(v) / points
            v = [max(v[int(i * step) : int((i + 1) * step)] or [v[-1]]) for i in range(points)]
            ts = [ts[int(i * step)] for i in range(points)]
        if v:
            series[metric] = v
            series_ts[metric] = ts
    events = store.query(
        "SELECT ts, kind, code, message FROM events WHERE node = ? AND (gpu IS NOT DISTINCT FROM ? OR gpu IS NULL) "
        "AND kind <> 'boot' AND (ts IS NULL OR ts BETWEEN ? AND ?) ORDER BY ts LIMIT 200",
        [a["node"], a["gpu"], lo, hi],
    )
    runs = store.query(
        "SELECT op, ranks, nodes, avg_busbw_gbps, peak_busbw_gbps, source FROM nccl_runs "
        "WHERE list_contains(nodes, ?) ORDER BY ts NULLS LAST LIMIT 20",
        [a["node"]],
    )
    burnins = store.query(
        "SELECT ts, test, gpu, verdict, figure, unit, reason FROM burnin_results WHERE node = ? "
        "ORDER BY ts DESC LIMIT 20",
        [a["node"]],
    )
    ident = store.query(
        "SELECT any_value(uuid) AS uuid, any_value(pci_bus_id) AS pci_bus_id, any_value(model) AS model, "
        "any_value(serial) AS serial FROM gpus WHERE node = ? AND gpu = ?",
        [a["node"], a["gpu"]],
    )
    identity = ident[0] if ident and a["gpu"] is not None else None
    return {
        **a,
        "evidence": ev,
        "series": series,
        "series_ts": series_ts,
        "series_stale": series_stale,
        "events": events,
        "runs": runs,
        "burnins": burnins,
        "identity": identity,
        "runbook_text": render_runbook(runbook_text(a["runbook"]), {**a, "evidence": ev}, identity),
    }


def fleet_grid(store: Store) -> list[dict[str, Any]]:
    """One row per node: its GPUs and, per GPU, the worst firing alert's severity (None when healthy)."""
    firing = list_alerts(store, state="firing")
    gpus = store.query(
        "SELECT node, gpu, any_value(model) AS model FROM gpus WHERE gpu IS NOT NULL GROUP BY node, gpu"
    )
    known = {(g["node"], g["gpu"]) for g in gpus}
    gpus += [{"node": n, "gpu": g, "model": None} for n, g in alert_gpus(store) if (n, g) not in known]
    worst: dict[tuple[str, int | None], str] = {}
    for a in firing:
        k = (a["node"], a["gpu"])
        if k not in worst or SEV_RANK[a["severity"]] < SEV_RANK[worst[k]]:
            worst[k] = a["severity"]
    nodes: dict[str, dict[str, Any]] = {}
    for g in gpus:
        n = nodes.setdefault(
            g["node"], {"node": g["node"], "model": g["model"], "gpus": {}, "node_alert": None}
        )
        n["gpus"][g["gpu"]] = worst.get((g["node"], g["gpu"]))
        n["model"] = n["model"] or g["model"]
    for (node, gpu), sev in worst.items():
        if gpu is None:
            n = nodes.setdefault(node, {"node": node, "model": None, "gpus": {}, "node_alert": None})
            n["node_alert"] = sev
    states = node_states(store)
    cats: dict[str, set[str]] = {}
    for a in firing:
        cats.setdefault(a["node"], set()).add(a["category"])
    out = []
    for n in nodes.values():
        n["state"] = states.get(n["node"], "healthy")
        n["categories"] = sorted(cats.get(n["node"], ()))
        sevs = [s for s in [*n["gpus"].values(), n["node_alert"]] if s]
        n["worst"] = min(sevs, key=lambda s: SEV_RANK[s]) if sevs else None
        out.append(n)
    out.sort(key=lambda n: (SEV_RANK.get(n["worst"] or "", 3), n["node"]))
    return out


def node_view(store: Store, node: str) -> dict[str, Any]:
    """One node: its GPUs with their latest gauges, open alerts, recent events, burn-in history, lifecycle."""
    from fleettool.lifecycle import audit, current

    gauges = store.query(
        "SELECT gpu, metric, arg_max(value, ts) AS value, epoch(max(ts)) AS last FROM samples WHERE node = ? "
        "AND gpu IS NOT NULL AND metric IN "
        "('gpu_temp_c', 'power_w', 'sm_clock_mhz', 'gpu_util_pct', 'clock_event_reasons') GROUP BY gpu, metric",
        [node],
    )
    newest = max((float(g["last"]) for g in gauges), default=None)
    gpus: dict[int, dict[str, Any]] = {}
    for g in gauges:
        cur = gpus.setdefault(g["gpu"], {"gpu": g["gpu"], "last": None})
        cur[g["metric"]] = g["value"]
        cur["last"] = max(cur["last"] or 0.0, float(g["last"]))
    for cur in gpus.values():
        # stale: no reading for STALE_S while the node's other GPUs went on (fell off the bus, a hung read)
        age = None if newest is None or cur["last"] is None else newest - cur["last"]
        cur["stale_s"] = age if age is not None and age >= STALE_S else None
    for a in list_alerts(store, state="firing", node=node):
        if a["gpu"] is not None:
            cur = gpus.setdefault(a["gpu"], {"gpu": a["gpu"]})
            if SEV_RANK[a["severity"]] < SEV_RANK.get(cur.get("alert") or "", 3):
                cur["alert"] = a["severity"]
    events = store.query(
        "SELECT ts, gpu, kind, code, message FROM events WHERE node = ? AND kind <> 'boot' ORDER BY ts DESC NULLS LAST "
        "LIMIT 30",
        [node],
    )
    burnins = store.query(
        "SELECT ts, gpu, test, verdict, figure, unit FROM burnin_results WHERE node = ? ORDER BY ts DESC LIMIT 30",
        [node],
    )
    st = current(store, node)
    return {
        "node": node,
        "gpus": [gpus[k] for k in sorted(gpus)],
        "events": events,
        "burnins": burnins,
        "state": st.state,
        "since": st.since,
        "audit": audit(store, node),
    }


def fit_columns(
    heads: Sequence[str],
    widths: Sequence[int],
    width: int,
    drop: Sequence[str] = (),
    *,
    flex_min: int = 30,
    gap: int = 2,
) -> tuple[list[int], dict[int, int]]:
    """How a table of columns `widths` (as wide as their cells) fits `width`, as k9s does it: the widest column
    (the summary) takes what the others leave; while that is under `flex_min`, the least important column goes
    (`drop`, by header; then right to left, never the first). Returns the columns kept (indices) and each one's
    width ({} when even one column left cannot fit: the caller squeezes)."""
    keep = list(range(len(heads)))
    if not keep:
        return keep, {}
    flex = max(keep, key=lambda i: (widths[i], i))

    def rest() -> int:
        return sum(widths[i] for i in keep if i != flex) + gap * (len(keep) - 1)

    order = [heads.index(h) for h in drop if h in heads]
    order += [i for i in reversed(range(1, len(heads))) if i not in order]
    for i in order:
        if rest() + min(widths[flex], flex_min) <= width:
            break
        if i != flex and i in keep:
            keep.remove(i)
    if width - rest() < min(widths[flex], flex_min):
        return keep, {}
    return keep, {i: widths[i] for i in keep} | {flex: min(widths[flex], width - rest())}
