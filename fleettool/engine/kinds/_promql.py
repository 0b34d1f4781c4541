"""PromQL shared by the kinds, over the agent's /metrics names (fleettool_<metric>{hostname, gpu})."""

from __future__ import annotations

from typing import Any

from fleettool.metrics import prom_spec


def dur(s: float) -> str:
    """Seconds -> a Prometheus duration (the largest whole unit)."""
    s = int(round(s))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s and s % n == 0:
            return f"{s // n}{unit}"
    return f"{s}s"


def bits(expr: str, mask: int) -> str:
    """(x & mask) != 0 in PromQL, which has no bitwise operators: sum of per-bit tests floor(x / 2^b) % 2."""
    terms = [f"(floor({expr} / {1 << b}) % 2)" for b in range(64) if mask >> b & 1]
    return "(" + " + ".join(terms) + ") > 0"


def num(v: Any) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


def metric_name(metric: str) -> str:
    """A fleettool metric's name on /metrics."""
    return prom_spec(metric)[0]


def scaled(metric: str | None, v: Any) -> str:
    """A threshold in the rule's units -> the base units of the metric on /metrics."""
    return num(float(v) * (prom_spec(metric)[1] if metric else 1.0))
