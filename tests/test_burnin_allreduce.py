"""The all-reduce data check holds at any rank and iteration count: every iteration's inputs sum exactly in
the dtype (whatever the order of addition), every rank compares what it received with that sum, and one
element corrupted on one rank of eight, at one of twenty iterations, FAILs the run naming that rank. Real
torch.distributed over gloo, eight processes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.burnin.allreduce import EXACT_BELOW, Pattern
from fleettool.burnin.context import BurninConfig
from fleettool.burnin.report import BurninReport
from fleettool.burnin.steps import measure_allreduce
from fleettool.burnin.verdict import Verdict

torch = pytest.importorskip("torch", reason="the burn-in extra (pip install -e '.[burnin]') is not installed")

NO_FLOOR = lambda _t: (None, "")  # noqa: E731


@settings(max_examples=40, deadline=None)
@given(world=st.integers(1, 2**16), dtype=st.sampled_from(sorted(EXACT_BELOW)), seed=st.integers(0, 2**32))
def test_the_inputs_sum_exactly_in_any_order(world: int, dtype: str, seed: int) -> None:
    limit = EXACT_BELOW[dtype]
    if world > limit:
        with pytest.raises(ValueError, match=f"{world} ranks cannot sum exactly in {dtype}"):
            _ = Pattern(world, dtype).period
        return
    pat = Pattern(world, dtype)
    assert 1 <= pat.largest_sum() <= limit
    # the sum accumulated in the dtype itself, ranks added in a random order, equals the exact sum
    n = pat.period + 3
    ranks = random.Random(seed).sample(range(world), min(world, 40))
    acc = torch.zeros(n, dtype=getattr(torch, dtype))
    exact = torch.zeros(n, dtype=torch.int64)
    j = torch.arange(n, dtype=torch.int64)
    for r in ranks:
        send, _ = pat.tensors(torch, r, n, torch.device("cpu"))
        acc += send
        exact += 1 + j % pat.period + r % pat.period
    assert acc.tolist() == exact.double().tolist()
    if len(ranks) == world:
        assert acc.tolist() == pat.tensors(torch, 0, n, torch.device("cpu"))[1].tolist()


def ar(tmp_path: Path, inject: tuple[int, int] | None, procs: int = 8, iters: int = 20):  # type: ignore[no-untyped-def]
    cfg = BurninConfig(
        node="n",
        backend="cpu",
        ar_min=16 << 10,
        ar_max=32 << 10,
        ar_iters=iters,
        ar_procs=procs,
        ar_inject=inject,
    )
    rep = BurninReport("r", "n", 0.0)
    res = measure_allreduce(cfg, [{"gpu": None, "device": "cpu"}], NO_FLOOR, rep)
    return res, rep


def test_one_wrong_element_on_one_rank_of_eight_at_one_of_twenty_iterations_fails(tmp_path: Path) -> None:
    res, rep = ar(tmp_path, inject=(5, 13))
    assert rep.allreduce is not None and rep.allreduce["world"] == 8
    rows = rep.allreduce["rows"]
    assert [r["size_bytes"] for r in rows] == [16 << 10, 32 << 10]
    # the one element, at each size, and on rank 5 alone
    assert [r["wrong"] for r in rows] == [1, 1]
    assert [r["wrong_ranks"] for r in rows] == [[5], [5]]
    # every rank compares every element of every iteration (3 warm-up + 20 timed)
    assert [r["checked"] for r in rows] == [(s // 4) * 23 * 8 for s in (16 << 10, 32 << 10)]
    assert res.test == "allreduce-8" and res.verdict == Verdict.FAIL and res.evidence["corruption"] is True
    assert (
        res.reason
        == "all-reduce returned wrong values: 2 element(s) differ from the exact sum (received on rank 5)"
    )
    assert res.evidence["check"]["largest_sum"] <= res.evidence["check"]["exact_below"] == 2**24


def test_three_ranks_twenty_iterations_clean_checks_every_element(tmp_path: Path) -> None:
    """(Eight clean ranks are the test above: exactly one wrong element of 8 x 23 x n.)"""
    res, rep = ar(tmp_path, inject=None, procs=3)
    assert rep.allreduce is not None
    rows = rep.allreduce["rows"]
    assert all(r["wrong"] == 0 for r in rows)
    # the old check compared nothing past W(W+1)/2 * W^(iters-1) >= 2**24: now every element, every iteration
    assert [r.get("checked") for r in rows] == [(r["size_bytes"] // 4) * 23 * 3 for r in rows]
    assert all(r["wrong_ranks"] == [] for r in rows)
    assert res.test == "allreduce-3" and res.verdict == Verdict.WARN  # no floor on the CPU
    assert "corruption" not in res.evidence and all(r["busbw_gbps"] > 0 for r in rows)
