"""Consumers' side: Prometheus /metrics."""
