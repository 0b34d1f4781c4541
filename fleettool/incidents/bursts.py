"""Folding by time, the fold's last stage (after causal.py and spread.py):

- a teardown storm: the job-teardown groups of spread.py whose times chain (each within STORM_GAP_S of the
  one before) are one informational incident, however many jobs it spans (#1710's two days of XID 45 on
  three nodes are one row, not one per job);
- a burst: what is left, of any category, on any nodes, each alert within BURST_S of the one before. A
  hardware fault joins a burst only while it starts within SAME_MINUTE_S of the burst's first hardware fault,
  so two independent hardware faults keep their own incidents; a burst with exactly one hardware fault has it
  as its root (what fired beside it within minutes is counted under it, never paged); with none, or with
  faults of the same minute, it is a storm without a root.
"""

from __future__ import annotations

from fleettool.incidents.model import AlertView
from fleettool.incidents.spread import Group

BURST_S = 300.0
SAME_MINUTE_S = 60.0
STORM_GAP_S = 6 * 3600.0
MAX_JOBS_NAMED = 5


def _span(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def teardown_storms(groups: list[Group]) -> list[Group]:
    """Teardown groups whose times chain within STORM_GAP_S, each chain one group (as it was when alone; scope
    fleet, key 'teardown', when it joins several)."""
    out: list[list[Group]] = []
    end = -1e300
    for g in sorted(groups, key=lambda g: (min(a.first_seen for a in g.alerts), g.key or "")):
        t0, t1 = min(a.first_seen for a in g.alerts), max(a.first_seen for a in g.alerts)
        if out and t0 - end <= STORM_GAP_S:
            out[-1].append(g)
            end = max(end, t1)
        else:
            out.append([g])
            end = t1
    merged = []
    for chain in out:
        if len(chain) == 1:
            merged.append(chain[0])
            continue
        alerts = [a for g in chain for a in g.alerts]
        jobs = sorted({g.key for g in chain if g.scope == "job" and g.key})
        nodes = len({a.node for a in alerts})
        xids = sorted({c for a in alerts for c in a.codes})
        span = max(a.first_seen for a in alerts) - min(a.first_seen for a in alerts)
        named = ", ".join(jobs[:MAX_JOBS_NAMED]) + (
            f" and {len(jobs) - MAX_JOBS_NAMED} more" if len(jobs) > MAX_JOBS_NAMED else ""
        )
        of_jobs = f" across {len(jobs)} jobs ({named})" if jobs else ""
        why = (
            f"a teardown storm: XID {', '.join(map(str, xids))} on {nodes} nodes, {len(alerts)} GPU alerts over "
            f"{_span(span)}{of_jobs}, and no hardware fault"
        )
        merged.append(Group("fleet", "teardown", alerts, [why]))
    return merged


def quiet(a: AlertView) -> bool:
    """A teardown XID alone, not escalated by repeats: it joins a teardown storm."""
    return a.teardown_only and not a.escalated


def _runs(alerts: list[AlertView], burst_s: float) -> list[list[AlertView]]:
    out: list[list[AlertView]] = []
    hw0: float | None = None
    for a in sorted(alerts, key=lambda a: (a.first_seen, a.alert_id)):
        joins = bool(out) and a.first_seen - out[-1][-1].first_seen <= burst_s
        if joins and a.hardware and hw0 is not None and a.first_seen - hw0 > SAME_MINUTE_S:
            joins = False
        if joins:
            out[-1].append(a)
        else:
            out.append([a])
            hw0 = None
        if a.hardware and hw0 is None:
            hw0 = a.first_seen
    return out


def _would_page(a: AlertView) -> bool:
    return a.severity == "critical" and not (a.silenced or a.planned)


def time_groups(alerts: list[AlertView], burst_s: float = BURST_S) -> tuple[list[Group], list[AlertView]]:
    """Bursts of two or more alerts (module docstring); and the alerts alone in their time."""
    out: list[Group] = []
    left: list[AlertView] = []
    for run in _runs(alerts, burst_s):
        if len(run) == 1:
            left.extend(run)
            continue
        hw = [a for a in run if a.hardware]
        nodes = len({a.node for a in run})
        cats = sorted({a.category for a in run})
        span = _span(run[-1].first_seen - run[0].first_seen)
        others = [a for a in run if a not in hw]
        if len(hw) == 1 and not any(_would_page(a) for a in others):
            why = (
                f"{len(run) - 1} alerts ({', '.join(cats)}) on {nodes} node{'s' * (nodes > 1)} within {span} of "
                f"the hardware fault on {hw[0].node}, each within {_span(burst_s)} of the one before"
            )
            out.append(
                Group(
                    "fleet" if nodes > 1 else "node",
                    None if nodes > 1 else run[0].node,
                    run,
                    [why],
                    root=hw[0],
                )
            )
            continue
        kind = (
            f"{len(hw)} hardware faults in the same minute and "
            if len(hw) > 1
            else "a hardware fault and "
            if hw
            else ""
        )
        why = (
            f"a burst: {kind}{len(run)} alerts ({', '.join(cats)}) on {nodes} node{'s' * (nodes > 1)} within "
            f"{span}, each within {_span(burst_s)} of the one before"
        )
        out.append(
            Group("fleet" if nodes > 1 else "node", ",".join(cats) if nodes > 1 else run[0].node, run, [why])
        )
    return out, left
