"""Bench only (bench/agent_memory.py): DuckDB settings for the agent's flush and rule connections, from the
environment, without changing fleettool. On PYTHONPATH, with FLEETTOOL_BENCH_DUCKDB_SET="name=value;name=value",
the agent process (`fleettool agent`, or the writer child of bench/agent_writer_proc.py) runs each
`SET name = 'value'` after the agent's own Connection.limit_resources (memory_limit, threads), so a setting
given here overrides the agent's. Every other process (the bare loop, the bench itself) is left alone."""

import os
import sys

_SETS = os.environ.get("FLEETTOOL_BENCH_DUCKDB_SET", "")
_ARGV = sys.argv if hasattr(sys, "argv") else []
_IS_AGENT = len(_ARGV) > 1 and (
    (_ARGV[1] == "agent" and not _ARGV[0].endswith("agent_writer_proc.py")) or _ARGV[1] == "child"
)
if _SETS and _IS_AGENT:
    from fleettool.store import connection as _conn

    _said: list[bool] = []
    _orig = _conn.Connection.limit_resources

    def _limit_resources(self, memory_limit, threads):  # type: ignore[no-untyped-def]
        _orig(self, memory_limit, threads)
        for kv in _SETS.split(";"):
            k, _, v = kv.partition("=")
            self.con.execute(f"SET {k.strip()} = '{v.strip()}'")
        if not _said:  # once: the settings as DuckDB reads them back
            _said.append(True)
            got = [
                f"{k}={self.con.execute('SELECT current_setting(?)', [k]).fetchall()[0][0]}"
                for k in [kv.partition("=")[0].strip() for kv in _SETS.split(";")]
            ]
            print(f"bench duckdb settings: {' '.join(got)}", file=sys.stderr, flush=True)

    _conn.Connection.limit_resources = _limit_resources
