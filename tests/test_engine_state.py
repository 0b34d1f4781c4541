"""The alert state machine is a pure function: every transition, no sleeping."""

from __future__ import annotations

from fleettool.engine.state import (
    FIRING,
    INACTIVE,
    PENDING,
    RESOLVED,
    AlertState,
    advance,
    run_observations,
    step,
)


def test_pending_then_firing_after_for() -> None:
    st = step(AlertState(), True, 100.0, for_s=300, keep_s=0)
    assert st.state == PENDING and st.active_since == 100.0
    st = step(st, True, 399.0, 300, 0)
    assert st.state == PENDING
    st = step(st, True, 400.0, 300, 0)
    assert st.state == FIRING and st.fired_at == 400.0


def test_pending_that_clears_never_fires() -> None:
    st = step(AlertState(), True, 0.0, 300, 0)
    st = step(st, False, 60.0, 300, 0)
    assert st == AlertState(INACTIVE)


def test_keep_firing_for_holds_then_resolves() -> None:
    st = step(AlertState(), True, 0.0, 0, 600)
    assert st.state == FIRING
    st = step(st, False, 60.0, 0, 600)
    assert st.state == FIRING and st.inactive_since == 60.0
    st = step(st, True, 120.0, 0, 600)  # flaps back before keep_firing_for: the same alert
    assert st.state == FIRING and st.inactive_since is None and st.active_since == 0.0
    st = step(st, False, 180.0, 0, 600)
    st = step(st, False, 779.0, 0, 600)
    assert st.state == FIRING
    st = step(st, False, 780.0, 0, 600)
    assert st.state == RESOLVED and st.resolved_at == 780.0


def test_advance_resolves_when_the_data_ends() -> None:
    st = step(step(AlertState(), True, 0.0, 0, 300), False, 10.0, 0, 300)
    assert advance(st, 200.0, 300).state == FIRING
    assert advance(st, 310.0, 300).state == RESOLVED


def test_run_observations_counts_instances() -> None:
    obs = [(float(t), t < 600 or 1200 <= t < 1800, 1.0) for t in range(0, 2400, 60)]
    inst = run_observations(obs, for_s=120, keep_s=60, now=2400.0)
    assert [(i.state, i.first_seen, i.fired_at, i.last_seen) for i in inst] == [
        (RESOLVED, 0.0, 120.0, 540.0),
        (RESOLVED, 1200.0, 1320.0, 1740.0),
    ]
    flap = [(0.0, True, None), (60.0, False, None)]
    assert run_observations(flap, for_s=120, keep_s=0, now=100.0) == []
    still = run_observations([(0.0, True, 5.0), (60.0, True, 7.0)], for_s=30, keep_s=0, now=60.0)
    assert len(still) == 1 and still[0].state == FIRING and still[0].value == 7.0


def test_keep_firing_for_runs_out_in_time_between_sparse_observations() -> None:
    """Two event lines 3 h apart with keep_firing_for 1 h are two alerts: the first resolved 1 h after its line
    cleared, the second new, even though no observation came between them (they were one alert, 0 to 3 h)."""
    from fleettool.engine.state import run_observations

    h = 3600.0
    obs = [(0.0, True, 13.0), (1.0, False, None), (3 * h, True, 13.0), (3 * h + 1, False, None)]
    first, second = run_observations(obs, for_s=0.0, keep_s=h, now=3 * h + 10)
    assert (first.state, first.first_seen, first.resolved_at) == ("resolved", 0.0, 1.0 + h)
    assert (second.state, second.first_seen) == ("firing", 3 * h)
