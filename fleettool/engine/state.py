"""The alert state machine, a pure function: (state, observation, now) -> state. Tests never sleep.

inactive --active--> pending --active for `for`--> firing --inactive for `keep_firing_for`--> resolved
pending --inactive--> inactive (never fired: nothing to resolve). A resolved alert that becomes active again
starts a new pending period (a new alert instance).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

INACTIVE, PENDING, FIRING, RESOLVED = "inactive", "pending", "firing", "resolved"


@dataclass(frozen=True, slots=True)
class AlertState:
    state: str = INACTIVE
    active_since: float | None = None  # start of the current active stretch (pending since)
    fired_at: float | None = None
    last_active: float | None = None
    inactive_since: float | None = None
    resolved_at: float | None = None
    value: float | None = None


def step(
    st: AlertState, active: bool, now: float, for_s: float, keep_s: float, value: float | None = None
) -> AlertState:
    """Advance the state with one observation at `now` (observations arrive in time order)."""
    if active:
        if st.state in (INACTIVE, RESOLVED):
            st = AlertState(PENDING, active_since=now, last_active=now, value=value)
        else:
            st = replace(
                st, last_active=now, inactive_since=None, value=value if value is not None else st.value
            )
        if st.state == PENDING and st.active_since is not None and now - st.active_since >= for_s:
            st = replace(st, state=FIRING, fired_at=st.active_since + for_s)
        return st
    # inactive observation
    if st.state == PENDING:
        return AlertState()
    if st.state == FIRING:
        since = st.inactive_since if st.inactive_since is not None else now
        if now - since >= keep_s:
            return replace(st, state=RESOLVED, resolved_at=since + keep_s, inactive_since=since)
        return replace(st, inactive_since=since)
    return st


def advance(st: AlertState, now: float, keep_s: float) -> AlertState:
    """Time passes with no new observation (end of the data): a firing alert whose condition cleared resolves
    once keep_firing_for has passed."""
    if st.state == FIRING and st.inactive_since is not None and now - st.inactive_since >= keep_s:
        return replace(st, state=RESOLVED, resolved_at=st.inactive_since + keep_s)
    return st


@dataclass(frozen=True, slots=True)
class Instance:
    """One alert instance of one rule on one entity, as the state machine saw it."""

    state: str  # pending, firing, resolved
    first_seen: float  # pending since
    fired_at: float | None
    last_seen: float  # last time the condition held
    resolved_at: float | None
    value: float | None


def run_observations(
    obs: list[tuple[float, bool, float | None]], for_s: float, keep_s: float, now: float
) -> list[Instance]:
    """Feed time-ordered observations (ts, active, value) through the machine, then let time run to `now`.
    Returns every instance that fired (resolved or still firing) and a trailing pending one."""
    out: list[Instance] = []
    st = AlertState()
    for ts, active, value in obs:
        # time passes before each observation: keep_firing_for is measured in time, so an alert whose condition
        # cleared more than keep_firing_for before this observation resolved then, and an active observation
        # now is a new alert (sparse event lines hours apart were one alert: no inactive observation came
        # between them to let keep_firing_for run out)
        passed = advance(st, ts, keep_s)
        if passed.state == RESOLVED and st.state == FIRING:
            out.append(_inst(passed))
        prev = st = passed
        st = step(st, active, ts, for_s, keep_s, value)
        if st.state == RESOLVED and prev.state == FIRING:
            out.append(_inst(st))
    st = advance(st, now, keep_s)
    if st.state in (PENDING, FIRING) or (
        st.state == RESOLVED and (not out or out[-1].first_seen != st.active_since)
    ):
        out.append(_inst(st))
    return out


def _inst(st: AlertState) -> Instance:
    assert st.active_since is not None
    return Instance(
        state=st.state,
        first_seen=st.active_since,
        fired_at=st.fired_at,
        last_seen=st.last_active if st.last_active is not None else st.active_since,
        resolved_at=st.resolved_at,
        value=st.value,
    )
