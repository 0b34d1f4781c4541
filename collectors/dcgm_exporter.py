"""The dcgm-exporter collector: scrape NVIDIA's exporter (default http://localhost:9400/metrics) each tick.

The body is the Prometheus text exposition; it goes through the same series mapping as a recording
(collectors.series_map, in pure Python here: the agent loads no Arrow, and each series is mapped once over the
collector's scrapes) (DCGM_FI_* names and DCGM 4 aliases onto the store's metrics, not-supported sentinels dropped,
`Hostname`/`hostname`, MIG `GPU_I_ID`), stamped with the scrape time. Pod attribution labels
(namespace/pod/container) are kept as GPU-use intervals. A failed scrape raises: the agent marks the collector
down in its health metrics and tries again on the next tick.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from fleettool.collectors.base import Collected
from fleettool.collectors.registry import CollectorConfig
from fleettool.collectors.series_map import ScrapeMapper
from fleettool.model import PodUse
from fleettool.sources.base import SourceError

DEFAULT_URL = "http://localhost:9400/metrics"


class DcgmExporterCollector:
    id = "dcgm-exporter"

    def __init__(
        self,
        node: str,
        url: str = DEFAULT_URL,
        *,
        timeout_s: float = 2.0,
        every_s: float = 10.0,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.url = url
        self.timeout_s = timeout_s
        self.every_s = (
            every_s  # dcgm-exporter itself refreshes every 30 s by default; no point asking at 1 Hz
        )
        # the schedule runs on monotonic time: a wall clock stepped back an hour must not stop the scrapes for
        # an hour (the samples still carry the collection's wall-clock `now`)
        self.mono = mono
        self._last = -1e18
        self._reason: str | None = None
        self._inflight: str | None = None
        self.scrapes = 0
        self._mapper = ScrapeMapper(node, url)

    @property
    def reason(self) -> str | None:
        return self._reason

    def inflight(self) -> str | None:
        return self._inflight

    def start(self) -> bool:
        return True  # the exporter may start after us: every scrape is a fresh attempt

    def scrape(self) -> bytes:
        self._inflight = f"GET {self.url}"
        try:
            req = urllib.request.Request(self.url, headers={"Accept": "text/plain;version=0.0.4"})
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - URL from config
                return bytes(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise SourceError(f"dcgm-exporter {self.url}: {getattr(e, 'reason', e)}") from e
        finally:
            self._inflight = None

    def collect(self, now: float) -> Collected:
        t = self.mono()
        if t - self._last < self.every_s:
            return Collected()
        self._last = t
        try:
            body = self.scrape()
        except SourceError as e:
            if self.scrapes == 0:  # never reached: not deployed here (yet); say so, do not count as failing
                self._reason = str(e)
                return Collected()
            raise
        self._reason = None
        self.scrapes += 1
        return parse_scrape(body, self.node, now, source=self.url, mapper=self._mapper)

    def close(self) -> None:
        pass


def parse_scrape(
    body: bytes, node: str, now: float, *, source: str = "<scrape>", mapper: ScrapeMapper | None = None
) -> Collected:
    """One dcgm-exporter scrape -> samples (stamped `now` unless the lines carry times), GPUs and pod uses.
    A collector passes its own `mapper`, so each series is parsed and mapped once over its scrapes."""
    m = (mapper or ScrapeMapper(node, source)).map(body, now)
    pods = [PodUse(now, n, g, u, ns, pod, c) for (n, g, u, ns, pod, c) in m.pods]
    return Collected(samples=m.samples, gpus=m.gpus, pods=pods, errors=m.errors)


def from_config(cfg: CollectorConfig) -> DcgmExporterCollector | None:
    """The registry's factory: scrape `--dcgm-exporter URL` (None for off or empty)."""
    if not cfg.dcgm_url or cfg.dcgm_url == "off":
        return None
    return DcgmExporterCollector(cfg.node, cfg.dcgm_url)
