"""Collectors: one module per source of telemetry, each registered by its kebab-case id in `registry`.

A collector is started once, asked to `collect(now)` on every agent tick, and closed. It returns samples,
events and GPU inventory; the agent (not the collector) times it, guards it with a watchdog and reports its
health as samples (agent_collector_up / _hung / _duration_s with sub=collector=ID). `registry` holds every
collector's name, default and factory, and makes the `--collector` / `--no-collector` flags from them.
"""

from __future__ import annotations

from fleettool.collectors.base import Collected, Collector
from fleettool.collectors.registry import CollectorConfig, register_collector

__all__ = ["Collected", "Collector", "CollectorConfig", "register_collector"]
