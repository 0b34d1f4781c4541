"""`replay --as-agent`: the recording judged as the agent judges it while collecting it, with what replay says
of it (fleettool.agent.as_agent)."""

from __future__ import annotations

import sys
from typing import Any


def judge_as_agent(store: Any, rules: Any, downs: tuple[tuple[float, float], ...]) -> list[dict[str, Any]]:
    """The recording judged as the agent judges it (fleettool.agent.as_agent), the alerts as replay lists them."""
    from fleettool.agent.as_agent import judge
    from fleettool.pipeline import REPLAY_ALERT_FIELDS
    from fleettool.store.alerts import list_alerts

    run = judge(store, rules, downs=downs)
    if run.start is None:
        print("fleettool: note: --as-agent: no timed data to judge over time", file=sys.stderr)
        return [{k: a[k] for k in REPLAY_ALERT_FIELDS} for a in list_alerts(store)]
    assert run.end is not None
    for off, dur in downs:
        if run.start + off >= run.end:
            print(
                f"fleettool: note: --down {_dur(off)}+{_dur(dur)} starts after the recording ends "
                f"({_dur(run.end - run.start)} long): the agent was never down",
                file=sys.stderr,
            )
    print(
        f"fleettool: judged as the agent: {run.flushes} flushes ({run.urgent_flushes} at once for events), "
        f"{run.restarts} restarts, {run.dropped_samples} samples not taken while down",
        file=sys.stderr,
    )
    return [{k: a[k] for k in REPLAY_ALERT_FIELDS} for a in list_alerts(store)]


def _dur(seconds: float) -> str:
    from fleettool.units import human_duration

    return human_duration(seconds)
