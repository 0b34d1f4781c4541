"""The alert state machine, a pure function: (state, observation, now) -> state. Tests never sleep.

inactive --active--> pending --active for `for`--> firing --inactive for `keep_firing_for`--> resolved
pending --inactive--> inactive (never fired: nothing to resolve). A resolved alert that becomes active again
starts a new pending period (a new alert instance).

firing --no observation for `stale_s`--> stale: for a rule judged on series (threshold, increase, peer, trend),
an alert whose condition held at its entity's last data and whose data then stopped is neither firing (nothing
says the condition still holds) nor resolved (nothing says it cleared): it is `stale`, "no data since T", and
stays so. Data that come back later start afresh (a new alert when the condition holds again). A pending alert
whose data stop drops back to inactive. Event rules pass no `stale_s`: a quiet kernel log is normal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

INACTIVE, PENDING, FIRING, RESOLVED, STALE = "inactive", "pending", "firing", "resolved", "stale"


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

    state: str  # pending, firing, resolved, stale
    first_seen: float  # pending since
    fired_at: float | None
    last_seen: float  # last time the condition held
    resolved_at: float | None
    value: float | None
    stale_since: float | None = None  # stale: the entity's last observation ("no data since")


def run_observations(
    obs: list[tuple[float, bool, float | None]],
    for_s: float,
    keep_s: float,
    now: float,
    stale_s: float | None = None,
    gaps: frozenset[float] | set[float] = frozenset(),
) -> list[Instance]:
    """Feed time-ordered observations (ts, active, value) through the machine, then let time run to `now`.
    Returns every instance that fired (resolved, stale or still firing) and a trailing pending one. `stale_s`
    (series rules): a firing alert with no observation for that long goes stale (module docstring): at the end
    (`now` that long after the last observation), and after each observation in `gaps` (the kind saw the series
    stop after it: two observations of one run-length-encoded stretch are not a gap, however far apart)."""
    out: list[Instance] = []
    st = AlertState()
    last: float | None = None  # the previous observation's time

    def stopped(st: AlertState, t: float, at_end: bool = False) -> AlertState:
        """The data stopped between `last` and `t` (stale_s or more): a firing alert whose condition held at
        the last data goes stale; a pending one drops."""
        if stale_s is None or last is None or t - last < stale_s or (not at_end and last not in gaps):
            return st
        if st.state == FIRING and st.inactive_since is None:
            out.append(replace(_inst(st), state=STALE, stale_since=last))
            return AlertState()
        return AlertState() if st.state == PENDING else st

    for ts, active, value in obs:
        # time passes before each observation: keep_firing_for is measured in time, so an alert whose condition
        # cleared more than keep_firing_for before this observation resolved then, and an active observation
        # now is a new alert (sparse event lines hours apart were one alert: no inactive observation came
        # between them to let keep_firing_for run out)
        passed = advance(st, ts, keep_s)
        if passed.state == RESOLVED and st.state == FIRING:
            out.append(_inst(passed))
        prev = st = stopped(passed, ts)
        st = step(st, active, ts, for_s, keep_s, value)
        last = ts
        if st.state == RESOLVED and prev.state == FIRING:
            out.append(_inst(st))
    passed = advance(st, now, keep_s)
    if passed.state == RESOLVED and st.state == FIRING:
        out.append(_inst(passed))
    st = stopped(passed, now, at_end=True)
    if st.state in (PENDING, FIRING):
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
