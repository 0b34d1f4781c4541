"""`fleettool baselines`: the fleet's baselines per (SKU, driver), shown or recomputed from the store."""

from __future__ import annotations

from typing import Annotated

import typer

from fleettool.cli.common import DEFAULT_DB, open_store
from fleettool.cli.extras import require_extra
from fleettool.cli.options import DbOpt, FormatOpt, JsonOpt
from fleettool.cli.output import emit


def register(app: typer.Typer) -> None:
    @app.command()
    def baselines(
        db: DbOpt = DEFAULT_DB,
        update: Annotated[bool, typer.Option("--update", help="recompute from the store and save")] = False,
        json_out: JsonOpt = False,
        fmt: FormatOpt = "table",
    ) -> None:
        """Fleet baselines per (SKU, driver): median and MAD of loaded clocks, tensor activity, power, NCCL
        busbw and burn-in figures. --update recomputes them from the store.

        Example: fleettool baselines --db fleet.duckdb --update --json
        """
        import time

        if update:
            require_extra("analytics", "baselines --update")
        from fleettool.engine.baselines import compute
        from fleettool.store.baselines import list_baselines, save

        with open_store(db, read_only=not update, create=False) as store:
            if update:
                bs = compute(store)
                save(store, bs, time.time())
            rows = list_baselines(store)
        emit(rows, ["model", "driver", "metric", "key", "median", "mad", "n"], as_json=json_out, fmt=fmt)
