"""A prototype for issue 33's 100 MiB question, bench only: the agent split in two long-lived processes.

- the parent never loads DuckDB (a stand-in module is put in sys.modules before fleettool is imported, so the
  store's Python code imports but the 45 MiB library is never mapped; any call into it would raise). It runs
  what the agent runs between flushes: the collectors, the loop, the buffer, the rules' trigger sets (for the
  urgent flushes), the topology sources and /metrics;
- at each flush it pickles the buffer (and the topology answers that came in) down a pipe to the child, a
  process that owns DuckDB and does the agent's own flush (fleettool.agent.flush.flush_buffer: write, topology,
  the rules, retention, CHECKPOINT, malloc_trim), and waits for the child's answer: the firing alerts, incident
  and remediation counts and the flush's statistics, which /metrics serves.

The agent's code is used as is (nothing in fleettool/ changed); the parent's Agent.flush is replaced on the
instance. It takes the subset of `fleettool agent`'s options that bench/agent_overhead.py passes, so it runs
there through --fleettool:

  python bench/agent_overhead.py --fleettool "python bench/agent_writer_proc.py" --children ...

A prototype: the child is not restarted when it dies (the parent then stops), and the child's start-up reads
(the known GPUs, the kernel-log cursor) are asked of it over the same pipe.
"""

from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _no_duckdb() -> None:
    """A stand-in `duckdb`: fleettool's modules import it and name its exception classes; nothing is loaded."""
    mod = types.ModuleType("duckdb")
    made: dict[str, type] = {}

    def attr(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return made.setdefault(name, type(name, (Exception,), {}))

    mod.__getattr__ = attr  # type: ignore[method-assign]
    sys.modules["duckdb"] = mod


def _args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="agent_writer_proc.py agent")
    for opt, d in (
        ("--db", None),
        ("--node", "bench"),
        ("--metrics-port", None),
        ("--metrics-addr", "127.0.0.1"),
        ("--kmsg", "auto"),
        ("--dcgm-exporter", None),
        ("--raw-retention", "7d"),
        ("--rollup-retention", "400d"),
        ("--source", "fake"),
        ("--gpus", "8"),
        ("--flush", "60s"),
        ("--max-buffer", "64MiB"),
        ("--duration", None),
    ):
        ap.add_argument(opt, default=d)
    ap.add_argument("--fake-costs", action="store_true")
    ap.add_argument("--no-rules", action="store_true")
    return ap.parse_args(argv)


def _config(a: argparse.Namespace) -> Any:
    from fleettool.agent.config import AgentConfig
    from fleettool.cli.agent_cmd import _buffer_size
    from fleettool.cli.common import parse_duration

    return AgentConfig(
        db=Path(a.db),
        node=a.node,
        flush_s=parse_duration(a.flush, "--flush"),
        max_buffer_bytes=_buffer_size(a.max_buffer),
        raw_keep_s=parse_duration(a.raw_retention, "--raw-retention"),
        rollup_keep_s=parse_duration(a.rollup_retention, "--rollup-retention"),
        duration_s=parse_duration(a.duration, "--duration") if a.duration else None,
    )


def _scheduler(a: argparse.Namespace) -> Any:
    if a.no_rules:
        return None
    from fleettool.cli.rules_cmd import _load
    from fleettool.engine.incremental import RuleScheduler

    return RuleScheduler(_load(None, False))


def _send(f: Any, obj: Any) -> None:
    pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    f.flush()


# -- the child: DuckDB, the flush and the rules -----------------------------------------------------------------
def child(argv: list[str]) -> None:
    from fleettool.agent import memory
    from fleettool.agent.config import Buffer
    from fleettool.agent.loop import Agent
    from fleettool.cli.agent_cmd import _known_gpus
    from fleettool.cli.common import open_store
    from fleettool.cli.topology_opts import agent_topology, topology_files
    from fleettool.store.kmsg_cursor import this_boot_resume

    memory.limit_arenas()
    a = _args(argv)
    cfg = _config(a)
    # the topology's store() half: the parent's sources' answers are handed over at each flush
    topo = agent_topology(cfg.node, topology_files(None), None, None, None)
    ag = Agent(cfg, [], scheduler=_scheduler(a), topology=topo)
    topo.log = ag.log
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # the pipe carries pickles only
    with open_store(cfg.db, read_only=False):
        pass
    _send(
        out, (_known_gpus(cfg.db, cfg.node), this_boot_resume(cfg.db, cfg.node) if a.kmsg != "off" else None)
    )
    while True:
        try:
            msg = pickle.load(inp)
        except EOFError:
            return
        final, urgent, (samples, events, gpus, pods), pending, dropped = msg
        ag.buf = Buffer(samples=samples, events=events, gpus=gpus, pods=pods)
        ag.stats.dropped_rows = dropped
        with topo._lock:
            topo._pending.extend(pending)
        ag._urgent = urgent
        ok = ag.flush(final=final)
        _send(out, (ok, ag.stats, ag.open_alerts, ag.incidents, ag.remediations, dict(ag.latest)))
        if final:
            return


# -- the parent: no DuckDB ------------------------------------------------------------------------------------
def parent(argv: list[str]) -> None:
    _no_duckdb()
    from fleettool.agent import memory
    from fleettool.agent.config import Buffer
    from fleettool.agent.loop import Agent
    from fleettool.cli.agent_cmd import _build, _gpu_source, _selected
    from fleettool.cli.topology_opts import agent_topology, topology_files
    from fleettool.collectors import registry

    a = _args(argv)
    cfg = _config(a)
    kid = subprocess.Popen(
        [sys.executable, __file__, "child", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert kid.stdin is not None and kid.stdout is not None
    to_kid, from_kid = kid.stdin, kid.stdout
    known, resume = pickle.load(from_kid)
    source = _gpu_source(a.source, int(a.gpus), None, None, a.fake_costs)
    ccfg = registry.CollectorConfig(
        node=cfg.node,
        gpu_source=source,
        interval_s=cfg.interval_s,
        expected_gpus=None,
        known_gpus=known,
        kmsg=a.kmsg,
        dcgm_url=a.dcgm_exporter or "off",
        kmsg_resume=resume,
    )
    topo = agent_topology(cfg.node, topology_files(None), None, None, source)
    ag = Agent(cfg, _build(ccfg, _selected(None, None)), scheduler=_scheduler(a), topology=topo)
    topo.log = ag.log

    def remote_flush(final: bool = False) -> bool:
        urgent, ag._urgent = ag._urgent, False
        ag.flushing_since = ag.mono()
        with topo._lock:
            pending, topo._pending = topo._pending, []
        b = ag.buf
        try:
            _send(
                to_kid, (final, urgent, (b.samples, b.events, b.gpus, b.pods), pending, ag.stats.dropped_rows)
            )
            ok, stats, ag.open_alerts, ag.incidents, ag.remediations, latest = pickle.load(from_kid)
        finally:
            ag.flushing_since = None
        ag.latest.update({k: v for k, v in latest.items() if k[0].startswith("agent_store")})
        for f in (
            "flushes",
            "flushed_rows",
            "flush_failures",
            "urgent_flushes",
            "last_flush_error",
            "store_error",
        ):
            setattr(ag.stats, f, getattr(stats, f))
        if ok:
            ag.buf = Buffer()
            ag.dropped_at_last_flush = ag.stats.dropped_rows
        memory.trim()
        if not ok and urgent:
            ag._urgent = True
        return ok

    ag.flush = remote_flush  # type: ignore[method-assign]
    ag.install_signals()
    if a.metrics_port is not None:
        from fleettool.agent.health import liveness, readiness
        from fleettool.export.metrics_server import AgentMetrics, serve

        serve(
            int(a.metrics_port),
            a.metrics_addr,
            AgentMetrics(
                cfg.node,
                lambda: dict(ag.latest),
                lambda: dict(ag.event_counts),
                lambda: list(ag.open_alerts),
                lambda: dict(ag.gpus),
                lambda: dict(ag.incidents),
                lambda: dict(ag.remediations),
            ),
            {"/healthz": lambda: liveness(ag), "/readyz": lambda: readiness(ag)},
        )
    t0 = time.monotonic()
    stats = ag.run()
    to_kid.close()
    rc = kid.wait(30)
    print(
        f"fleettool agent: stopped after {stats.ticks} ticks; {stats.flushed_rows} rows in {stats.flushes} flushes "
        f"({stats.urgent_flushes} at once for events), {stats.flush_failures} failed flushes, "
        f"{stats.dropped_rows} rows dropped (buffer full) [writer process exit {rc}, {time.monotonic() - t0:.0f} s]",
        file=sys.stderr,
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "agent":
        parent(sys.argv[2:])
    else:
        raise SystemExit("usage: agent_writer_proc.py agent [--db=... --node=... ...]")
