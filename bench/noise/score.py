"""What a person sees of one replayed fixture, against its truth (bench/noise/run.py): pages, incidents, rows
on the first screen, raw alert rows, fatal actions, compression, roots named right, time to detect, and the
budgets of issue 30 it breaks; and every rule's precision, recall, time to detect and time to reset."""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from typing import Any

FATAL = frozenset({"reset-gpu", "reboot-node", "inspect-hardware"})
MATCH_S = 900.0  # an alert within 15 min of a truth root's time, on its node and GPU, is that root's


def at(s: str | None) -> float | None:
    if not s:
        return None
    return dt.datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()


def _same_gpu(truth: dict[str, Any], node: str | None, gpu: int | None, pci: str | None) -> bool:
    if node != truth["node"]:
        return False
    if truth.get("gpu") is None:
        return True
    return gpu == truth["gpu"] or (pci is not None and pci == truth.get("pci_bus_id"))


def root_named(root: dict[str, Any], inc: dict[str, Any]) -> bool:
    r = inc.get("root") or {}
    return _same_gpu(root, r.get("node"), r.get("gpu"), r.get("pci_bus_id")) and r.get("code") == root["xid"]


def measure(
    truth: dict[str, Any],
    incidents: list[dict[str, Any]],
    alerts: list[dict[str, Any]],
    members: dict[str, list[str]],
) -> tuple[dict[str, Any], list[str]]:
    """The figures of one fixture and the budgets it breaks (one line each, naming the fixture). `members`:
    incident id -> its alert ids."""
    name = truth["name"]
    budget = truth.get("budget") or {}
    by_alert = {a["alert_id"]: a for a in alerts}
    pages = [i for i in incidents if i["page"]]
    fatal = [i for i in incidents if i.get("action") in FATAL]
    faulty: set[str] = set()
    for i in fatal:
        if i.get("root"):
            faulty.add(i["root"]["node"])
        else:
            faulty |= {by_alert[a]["node"] for a in members.get(i["id"], []) if a in by_alert}
    raw, screen = len(alerts), len(incidents)
    fig: dict[str, Any] = {
        "raw": raw,
        "incidents": screen,
        "screen": screen,
        "pages": len(pages),
        "fatal": len(fatal),
        "faulty_nodes": len(faulty),
        "compression": round(raw / screen, 1) if screen else float(raw),
    }
    broken: list[str] = []
    matched: set[str] = set()
    ttd: list[float] = []
    rows: list[int] = []  # the row of each root's incident on the first screen (1 = top)
    roots_ok = 0
    for root in truth.get("roots") or []:
        want = f"{root['node']} GPU {root.get('gpu')} XID {root['xid']}"
        mine = [i for i in pages if root_named(root, i)]
        if root.get("page"):
            if len(mine) != 1:
                broken.append(
                    f"{name}: root {want} is the root of {len(mine)} paging incidents (want exactly 1)"
                )
            else:
                roots_ok += 1
                matched.add(mine[0]["id"])
                rows.append(1 + next(k for k, i in enumerate(incidents) if i["id"] == mine[0]["id"]))
                t = at(mine[0]["root"]["ts"])
                if t is not None:
                    ttd.append(t - (at(root["time"]) or t))
                inc = mine[0]
                if root.get("scope") and inc["scope"] != root["scope"]:
                    broken.append(
                        f"{name}: root {want} folded as scope {inc['scope']}/{inc['key']} (want {root['scope']}/{root.get('key')})"
                    )
                if inc["alerts"] - 1 < int(root.get("members_at_least", 0)):
                    broken.append(
                        f"{name}: root {want} holds {inc['alerts'] - 1} members (want >= {root['members_at_least']})"
                    )
    for want in truth.get("expect") or []:
        got = [
            i
            for i in incidents
            if i["scope"] == want["scope"]
            and (want.get("key") is None or i["key"] == want["key"])
            and i["alerts"] >= int(want.get("members_at_least", 1))
        ]
        label = f"{want['scope']}/{want.get('key') or '*'}"
        if not got:
            broken.append(f"{name}: no {label} incident of >= {want.get('members_at_least', 1)} alerts")
        elif want.get("page") is not None and any(bool(i["page"]) != want["page"] for i in got):
            broken.append(f"{name}: the {label} incident pages={not want['page']} (want {want['page']})")
    false_pages = len(pages) - len(matched)
    fig.update(roots=len(truth.get("roots") or []), roots_ok=roots_ok, false_pages=false_pages)
    fig["ttd_s"] = round(max(ttd), 1) if ttd else None
    fig["root_row"] = max(rows) if rows else None
    n_roots = sum(1 for r in truth.get("roots") or [] if r.get("page"))
    if "pages" in budget and len(pages) > budget["pages"]:
        broken.append(f"{name}: {len(pages)} pages > {budget['pages']}{_ids(pages)}")
    elif "pages" not in budget and "false_pages_per_1000_node_days" not in budget and len(pages) != n_roots:
        broken.append(
            f"{name}: {len(pages)} pages for {n_roots} root faults{_ids([p for p in pages if p['id'] not in matched])}"
        )
    if truth.get("teardown") and faulty:
        broken.append(
            f"{name}: teardown storm marked {len(faulty)} nodes faulty ({', '.join(sorted(faulty)[:5])})"
        )
    if "faulty_nodes" in budget and len(faulty) > budget["faulty_nodes"] and not truth.get("teardown"):
        broken.append(f"{name}: {len(faulty)} nodes marked faulty > {budget['faulty_nodes']}")
    if "fatal_actions" in budget and len(fatal) > budget["fatal_actions"]:
        broken.append(
            f"{name}: {len(fatal)} first-screen rows with a fatal action > {budget['fatal_actions']}{_ids(fatal)}"
        )
    if truth.get("storm") and fig["compression"] < budget.get("compression", 50):
        broken.append(
            f"{name}: compression {fig['compression']}x < {budget.get('compression', 50)}x ({raw} alerts on {screen} rows)"
        )
    if "max_first_screen" in budget and screen > budget["max_first_screen"]:
        broken.append(f"{name}: {screen} rows on the first screen > {budget['max_first_screen']}")
    per_k = budget.get("false_pages_per_1000_node_days")
    if per_k is not None:
        rate = 1000 * false_pages / float(truth["node_days"])
        fig["false_pages_per_1000_node_days"] = round(rate, 2)
        if rate > per_k:
            broken.append(f"{name}: {rate:.2f} false pages per 1000 node-days > {per_k}")
    return fig, broken


def _ids(incs: list[dict[str, Any]], n: int = 4) -> str:
    if not incs:
        return ""
    shown = "; ".join(
        f"{i['id']} {i['scope']}/{i['key']} {(i.get('root') or {}).get('node') or ''} {i['alerts']} alerts"
        for i in incs[:n]
    )
    return f" ({shown}{'; ...' if len(incs) > n else ''})"


def rule_scores(
    runs: list[tuple[dict[str, Any], list[dict[str, Any]]]], every: list[str] | None = None
) -> list[dict[str, Any]]:
    """Per rule over every fixture: an alert is true when it is on a truth root (its node and GPU, within 15 min
    of its time) or on a node the truth lists as affected; precision = true / all its alerts; recall = the truth
    targets that expect the rule and got one of its alerts / those targets; time to detect = median of the
    alert's first sighting less the root's time; time to reset = median of last_seen less first_seen of its
    resolved true alerts. `every`: the rule set's names (a rule that raised nothing still gets its row)."""
    stats: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"alerts": 0, "true": 0, "ttd": [], "ttr": [], "want": 0, "got": 0}
    )
    for truth, alerts in runs:
        roots = truth.get("roots") or []
        affected = {a["node"]: a.get("rule") for a in truth.get("affected") or []}
        hit: set[tuple[str, int]] = set()
        for a in alerts:
            s = stats[a["rule"]]
            s["alerts"] += 1
            t0 = at(a["first_seen"]) or 0.0
            ok = False
            for k, r in enumerate(roots):
                rt = at(r["time"]) or 0.0
                if _same_gpu(r, a["node"], a["gpu"], a.get("pci_bus_id")) and abs(t0 - rt) <= MATCH_S:
                    ok = True
                    s["ttd"].append(t0 - rt)
                    if r.get("rule") == a["rule"]:
                        hit.add(("root", k))
            if a["node"] in affected:
                ok = True
                if affected[a["node"]] == a["rule"]:
                    hit.add((a["node"], -1))
            if ok:
                s["true"] += 1
                t1 = at(a.get("last_seen"))
                if a["state"] == "resolved" and t1 is not None:
                    s["ttr"].append(t1 - t0)
        for k, r in enumerate(roots):
            if r.get("rule"):
                stats[r["rule"]]["want"] += 1
                stats[r["rule"]]["got"] += ("root", k) in hit
        for node, rule in affected.items():
            if rule:
                stats[rule]["want"] += 1
                stats[rule]["got"] += (node, -1) in hit
    for rule in every or []:  # every rule of the set has a row, the ones that never fired too
        stats[rule]
    out = []
    for rule, s in sorted(stats.items()):
        out.append(
            {
                "rule": rule,
                "alerts": s["alerts"],
                "precision": round(s["true"] / s["alerts"], 3) if s["alerts"] else None,
                "recall": round(s["got"] / s["want"], 3) if s["want"] else None,
                "targets": s["want"],
                "ttd_s": round(statistics.median(s["ttd"]), 1) if s["ttd"] else None,
                "ttr_s": round(statistics.median(s["ttr"]), 1) if s["ttr"] else None,
            }
        )
    return out
