"""The node lifecycle tables: node_states (each node's current state) and node_audit (every transition, with
who, when, why and what was run on the schedulers). Which transitions are allowed is fleettool.lifecycle's."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleettool.store.values import db_time

if TYPE_CHECKING:
    from fleettool.store.db import Store


@dataclass(frozen=True)
class NodeState:
    """A node's current lifecycle state (since: naive UTC, as stored; None for a node never moved)."""

    node: str
    state: str
    since: dt.datetime | None
    who: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class Transition:
    """One lifecycle move of a node at `ts` (unix seconds); side_effects: the commands run, '; '-joined."""

    ts: float
    node: str
    from_state: str
    to_state: str
    who: str
    reason: str
    side_effects: str = ""


def node_state(store: Store, node: str) -> NodeState | None:
    """The stored state of a node, or None when it never moved (it is then healthy)."""
    rows = store.query("SELECT node, state, since, who, reason FROM node_states WHERE node = ?", [node])
    if not rows:
        return None
    r = rows[0]
    return NodeState(r["node"], r["state"], r["since"], r["who"], r["reason"])


def node_known(store: Store, node: str) -> bool:
    """Whether the store has anything of the node: a lifecycle move, a GPU, an event, an alert, a burn-in or a
    sample (the small tables first)."""
    for table in ("node_states", "gpus", "alerts", "events", "burnin_results", "samples_1m", "samples"):
        if store.query(f"SELECT 1 FROM {table} WHERE node = ? LIMIT 1", [node]):
            return True
    return False


def known_nodes(store: Store, limit: int = 10) -> list[str]:
    """Up to `limit` nodes the store knows (from its inventory, alerts and lifecycle), sorted."""
    rows = store.query(
        "SELECT DISTINCT node FROM (SELECT node FROM gpus UNION SELECT node FROM alerts "
        "UNION SELECT node FROM node_states UNION SELECT node FROM events) ORDER BY node LIMIT ?",
        [limit],
    )
    return [r["node"] for r in rows]


def node_states(store: Store) -> dict[str, str]:
    """node -> state of every node that ever moved."""
    return {r["node"]: r["state"] for r in store.query("SELECT node, state FROM node_states")}


def record_transition(store: Store, t: Transition) -> NodeState:
    """Set the node's current state and append the move to node_audit; returns the new state."""
    ts = db_time(t.ts)
    store.execute(
        "INSERT OR REPLACE INTO node_states (node, state, since, who, reason) VALUES (?, ?, ?, ?, ?)",
        [t.node, t.to_state, ts, t.who, t.reason],
    )
    store.execute(
        "INSERT INTO node_audit (ts, node, from_state, to_state, who, reason, side_effects) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [ts, t.node, t.from_state, t.to_state, t.who, t.reason, t.side_effects],
    )
    return NodeState(t.node, t.to_state, ts, t.who, t.reason)


def node_audit(store: Store, node: str) -> list[dict[str, Any]]:
    """Every transition of a node, oldest first."""
    return store.query(
        "SELECT ts, from_state, to_state, who, reason, side_effects FROM node_audit WHERE node = ? ORDER BY ts",
        [node],
    )


def taken_out_at(store: Store, node: str, states: tuple[str, ...]) -> dt.datetime | None:
    """When the node last moved into one of `states` (the repair a return must be proven after), or None."""
    v = store.scalar(
        f"SELECT max(ts) FROM node_audit WHERE node = ? AND to_state IN ({', '.join('?' for _ in states)})",
        [node, *states],
    )
    return v if isinstance(v, dt.datetime) else None


def all_audit(store: Store) -> list[dict[str, Any]]:
    """Every transition of every node, by node then time (for availability)."""
    return store.query("SELECT ts, node, from_state, to_state FROM node_audit ORDER BY node, ts")
