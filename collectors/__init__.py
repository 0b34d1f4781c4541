"""Collectors: one module per source of telemetry, listed in BUILTIN by their kebab-case ids.

A collector is started once, asked to `collect(now)` on every agent tick, and closed. It returns samples,
events and GPU inventory; the agent (not the collector) times it, guards it with a watchdog and reports its
health as samples (agent_collector_up / _hung / _duration_s with sub=collector=ID).
"""

from __future__ import annotations

from fleettool.collectors.base import Collected, Collector

BUILTIN = ["nvml", "kmsg", "dcgm-exporter"]

__all__ = ["BUILTIN", "Collected", "Collector"]
