"""Read commands: `fleettool events`, `fleettool alerts`, `fleettool gpus`. stdout is data; --json everywhere.

They open the database read-only for one query; while the agent flushes (milliseconds) they wait for it.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import typer

from fleettool.cli.common import DEFAULT_DB, open_store
from fleettool.cli.options import DbReadOpt, FormatOpt, JsonOpt, NodeFilterOpt
from fleettool.cli.output import emit, iso, with_iso


def register(app: typer.Typer) -> None:
    @app.command()
    def events(
        db: DbReadOpt = DEFAULT_DB,
        json_out: JsonOpt = False,
        fmt: FormatOpt = "table",
        node: NodeFilterOpt = None,
        kind: Annotated[
            str | None, typer.Option(help="only this kind (xid, sxid, fell-off-bus, nvml-error, agent)")
        ] = None,
        limit: Annotated[int, typer.Option(min=1, help="at most this many, newest first")] = 1000,
    ) -> None:
        """List events (XID lines, NVML errors, agent health changes), newest first.

        Example: fleettool events --db fleet.duckdb --kind xid --json
        """
        where: list[str] = []
        params: list[Any] = []
        if node:
            where.append("node = ?")
            params.append(node)
        if kind:
            where.append("kind = ?")
            params.append(kind)
        sql = "SELECT ts, node, gpu, uuid, pci_bus_id, kind, code, message, source FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY ts DESC NULLS LAST LIMIT ?"
        params.append(limit)
        with open_store(db, read_only=True, sql_only=True) as store:
            rows = store.query(sql, params)
        cols = ("ts", "node", "gpu", "uuid", "pci_bus_id", "kind", "code", "message", "source")
        out = [with_iso({c: r[c] for c in cols} | _pci(r), "ts") for r in rows]
        emit(out, ["ts", "node", "gpu", "pci_bus_id", "kind", "code", "message"], as_json=json_out, fmt=fmt)

    @app.command()
    def nccl(
        db: DbReadOpt = DEFAULT_DB,
        json_out: JsonOpt = False,
        fmt: FormatOpt = "table",
        node: Annotated[str | None, typer.Option(help="only runs that include this node")] = None,
        rows: Annotated[
            bool, typer.Option("--rows/--no-rows", help="include every table row (--json)")
        ] = True,
    ) -> None:
        """List nccl-tests runs: op, ranks, nodes, the footer's average busbw and the peak busbw, and how many
        runs of the same shape (op, nodes, ranks per node, largest message, GPU model) the straggler rule compares
        each with ("no comparable peers" under three of a shape: such a run is never judged).

        Example: fleettool nccl --db fleet.duckdb --json
        """
        sql = (
            "SELECT run_id, ts, op, ranks, nodes, avg_busbw_gbps, peak_busbw_gbps, wrong, version, source, model, "
            "finished FROM nccl_runs"
        )
        params: list[Any] = []
        if node:
            sql += " WHERE list_contains(nodes, ?)"
            params.append(node)
        sql += " ORDER BY ts NULLS LAST, source"
        from fleettool.engine.kinds.nccl_localize import MIN_PEERS, describe, shapes

        with open_store(db, read_only=True) as store:
            runs = store.query(sql, params)
            shaped = {x["run_id"]: x["shape"] for x in shapes(store)}
            per_shape = Counter(shaped.values())
            table: dict[str, list[dict[str, Any]]] = {}
            counts: dict[str, int] = {}
            if rows and runs:
                for r in store.query(
                    "SELECT * FROM nccl_rows WHERE run_id IN (SELECT run_id FROM nccl_runs) ORDER BY size_bytes"
                ):
                    table.setdefault(r.pop("run_id"), []).append(r)
            elif runs:  # --no-rows: how many, still (it said 0 for runs of 8 rows)
                counts = dict(store.rows("SELECT run_id, count(*) FROM nccl_rows GROUP BY run_id"))
        out = [
            {
                "op": r["op"],
                "ranks": r["ranks"],
                "nodes": list(r["nodes"] or []),
                "avg_busbw_gbps": r["avg_busbw_gbps"],
                "peak_busbw_gbps": r["peak_busbw_gbps"],
                "rows": table.get(r["run_id"], []) if rows else counts.get(r["run_id"], 0),
                "source": r["source"],
                "ts": iso(r["ts"]),
                "wrong": r["wrong"],
                "version": r["version"],
                "model": r["model"],
                "finished": r["finished"],  # false: hung or killed before its footer; null: stored before v5
                "run_id": r["run_id"],
                "shape": describe(shaped[r["run_id"]]) if r["run_id"] in shaped else None,
                "peers": _peers(per_shape, shaped.get(r["run_id"]), MIN_PEERS),
            }
            for r in runs
        ]
        emit(
            out,
            [
                "op",
                "ranks",
                ("nodes", lambda o: ",".join(o["nodes"])),
                "avg_busbw_gbps",
                "peak_busbw_gbps",
                ("rows", lambda o: len(o["rows"]) if isinstance(o["rows"], list) else o["rows"]),
                ("finished", lambda o: {True: "yes", False: "NO (hung/killed)"}.get(o["finished"], "?")),
                "peers",
                "source",
            ],
            as_json=json_out,
            fmt=fmt,
        )

    @app.command()
    def gpus(db: DbReadOpt = DEFAULT_DB, json_out: JsonOpt = False, fmt: FormatOpt = "table") -> None:
        """List the GPUs the store knows (node, index, UUID, PCI id, model, driver).

        Example: fleettool gpus --db fleet.duckdb
        """
        with open_store(db, read_only=True, sql_only=True) as store:
            rows = store.query(
                "SELECT node, gpu, uuid, pci_bus_id, model, driver, serial, first_seen, last_seen FROM gpus "
                "ORDER BY node, gpu"
            )
        out = [with_iso(r | _pci(r), "first_seen", "last_seen") for r in rows]
        emit(
            out, ["node", "gpu", "uuid", "pci_bus_id", "model", "driver", "serial"], as_json=json_out, fmt=fmt
        )


def _peers(per_shape: Counter[Any], shape: Any, min_peers: int) -> str:
    """How the straggler rule sees a run: the others of its shape, or why it is not judged."""
    if shape is None:
        return "not judged: no bandwidth or no node named"
    n = per_shape[shape]
    if n >= min_peers:
        return f"{n - 1} of its shape"
    return (
        f"no comparable peers: {n - 1} other run{'' if n == 2 else 's'} of its shape, {min_peers - 1} needed"
    )


def _pci(row: dict[str, Any]) -> dict[str, Any]:
    """A row's PCI id as nvidia-smi prints it (a store not yet opened read-write holds the short key)."""
    from fleettool.model import canonical_pci_bus_id

    return {"pci_bus_id": canonical_pci_bus_id(row.get("pci_bus_id"))}
