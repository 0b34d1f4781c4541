"""Rule kinds, one module each, and their registry.

A kind module holds everything the kind is: the fields a rule of it may set (engine.rules validates them), its
evaluation as SQL over the store (observations per entity: node, gpu, key), and its PromQL form for
`fleettool rules export --prometheus`, or the reason it has none. _base.py says what a kind is, _sql.py and
_promql.py hold what the kinds share. To add a kind, write its module and add its one line to KINDS.
"""

from __future__ import annotations

from fleettool.engine.kinds import (
    absent,
    event,
    increase,
    nccl_localize,
    peer,
    port_episodes,
    port_peer,
    sql,
    threshold,
    trend,
)
from fleettool.engine.kinds._base import Entity, Kind, KindResult, Obs, RuleLike, Verdict

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        threshold.KIND,
        increase.INCREASE,
        increase.RATE,
        trend.KIND,
        peer.KIND,
        event.KIND,
        absent.KIND,
        nccl_localize.KIND,
        sql.KIND,
        port_episodes.KIND,
        port_peer.PEER,
        port_peer.COUNT,
    )
}

__all__ = ["KINDS", "Entity", "Kind", "KindResult", "Obs", "RuleLike", "Verdict"]
