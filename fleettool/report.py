"""What a store holds, summarised per GPU: the figures an SRE looks at first (peak temperature and power,
clock-event reasons and how long each was active, counters that moved, events by kind and code).

Reads the store only; used by `fleettool replay` and `fleettool demo` until the rules engine turns the same
history into alerts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleettool.metrics import CLOCK_EVENT_BITS, CLOCK_EVENT_FINDINGS
from fleettool.store import Store

COUNTERS = (
    "ecc_dbe_volatile",
    "ecc_sbe_volatile",
    "remap_uncorrectable_rows",
    "remap_correctable_rows",
    "pcie_replay_total",
    "nvlink_crc_flit_errors_total",
)
FLAGS = ("remap_pending", "remap_failure")


@dataclass
class GpuSummary:
    node: str
    gpu: int | None
    uuid: str | None
    model: str | None = None
    samples: int = 0
    t_first: Any = None
    t_last: Any = None
    max_temp_c: float | None = None
    max_power_w: float | None = None
    power_limit_w: float | None = None
    min_sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    pcie_width: tuple[float, float] | None = None  # (min current, max capability)
    reasons_s: dict[str, float] = field(default_factory=dict)  # reason -> seconds active (approx.)
    counter_increase: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)

    def findings(self) -> list[str]:
        out = []
        for name, secs in self.reasons_s.items():
            bit = next((b for b, n in CLOCK_EVENT_BITS.items() if n == name), 0)
            if bit & CLOCK_EVENT_FINDINGS and secs > 0:
                out.append(f"{name} for {secs:.0f}s")
        for c, inc in self.counter_increase.items():
            if inc > 0:
                out.append(f"{c} +{inc:g}")
        out.extend(self.flags)
        if self.pcie_width and self.pcie_width[0] < self.pcie_width[1]:
            out.append(f"PCIe width x{self.pcie_width[0]:g} of x{self.pcie_width[1]:g}")
        for k, n in self.events.items():
            if k.startswith(("xid", "fell-off-bus", "nvml-error", "sxid")):
                out.append(f"{n}x {k}")
        return out


def summarize(store: Store) -> list[GpuSummary]:
    base = store.query(
        """SELECT node, gpu, any_value(uuid) AS uuid, count(*) AS n, min(ts) AS t0, max(ts) AS t1,
                  max(value) FILTER (metric = 'gpu_temp_c') AS tmax,
                  max(value) FILTER (metric = 'power_w') AS pmax,
                  max(value) FILTER (metric = 'power_limit_w') AS plim,
                  min(value) FILTER (metric = 'sm_clock_mhz') AS cmin,
                  max(value) FILTER (metric = 'sm_clock_mhz') AS cmax,
                  min(value) FILTER (metric = 'pcie_link_width') AS wmin,
                  max(value) FILTER (metric = 'pcie_link_width_max') AS wmax
           FROM samples WHERE gpu IS NOT NULL GROUP BY node, gpu ORDER BY node, gpu"""
    )
    out: dict[tuple[str, int | None], GpuSummary] = {}
    for r in base:
        s = GpuSummary(r["node"], r["gpu"], r["uuid"], samples=r["n"], t_first=r["t0"], t_last=r["t1"])
        s.max_temp_c, s.max_power_w, s.power_limit_w = r["tmax"], r["pmax"], r["plim"]
        s.min_sm_clock_mhz, s.max_sm_clock_mhz = r["cmin"], r["cmax"]
        if r["wmin"] is not None and r["wmax"] is not None:
            s.pcie_width = (r["wmin"], r["wmax"])
        out[(r["node"], r["gpu"])] = s
    for r in store.query("SELECT node, gpu, any_value(model) AS model FROM gpus GROUP BY ALL"):
        if (r["node"], r["gpu"]) in out:
            out[(r["node"], r["gpu"])].model = r["model"]
    # clock-event reasons: time each bit was set, from the gap to the next sample of the same series
    reasons = store.query(
        """WITH r AS (
             SELECT node, gpu, value::BIGINT AS mask,
                    epoch(lead(ts) OVER (PARTITION BY node, gpu ORDER BY ts)) - epoch(ts) AS dt
             FROM samples WHERE metric = 'clock_event_reasons')
           SELECT node, gpu, mask, sum(least(coalesce(dt, 0), 300)) AS secs FROM r GROUP BY ALL"""
    )
    for r in reasons:
        hit = out.get((r["node"], r["gpu"]))
        if hit is None:
            continue
        for bit, name in CLOCK_EVENT_BITS.items():
            if int(r["mask"]) & bit:
                hit.reasons_s[name] = hit.reasons_s.get(name, 0.0) + float(r["secs"] or 0.0)
    ph = ", ".join(f"'{c}'" for c in COUNTERS + FLAGS)
    for r in store.query(
        f"""SELECT node, gpu, metric, arg_max(value, ts) - arg_min(value, ts) AS inc, max(value) AS vmax
            FROM samples WHERE metric IN ({ph}) AND gpu IS NOT NULL GROUP BY ALL"""
    ):
        hit = out.get((r["node"], r["gpu"]))
        if hit is None:
            continue
        if r["metric"] in FLAGS:
            if r["vmax"] and r["vmax"] > 0:
                hit.flags.append(r["metric"])
        else:
            hit.counter_increase[r["metric"]] = float(r["inc"] or 0.0)
    for r in store.query("SELECT node, gpu, kind, code, count(*) AS n FROM events GROUP BY ALL"):
        hit = out.get((r["node"], r["gpu"]))
        if hit is None:
            continue
        key = r["kind"] + (f" {r['code']}" if r["code"] is not None else "")
        hit.events[key] = hit.events.get(key, 0) + int(r["n"])
    return list(out.values())


def render_text(summaries: list[GpuSummary]) -> str:
    lines = []
    for s in summaries:
        span = ""
        if s.t_first is not None:
            same_day = s.t_last is None or s.t_last.date() == s.t_first.date()
            span = f"{s.t_first:%Y-%m-%d %H:%M:%S} .. {s.t_last:{'%H:%M:%S' if same_day else '%Y-%m-%d %H:%M:%S'}}Z"
        head = f"{s.node} gpu {s.gpu} {s.model or ''} {s.uuid or ''}".rstrip()
        lines.append(head)
        figs = []
        if s.max_temp_c is not None:
            figs.append(f"max {s.max_temp_c:.0f} C")
        if s.max_power_w is not None:
            figs.append(
                f"max {s.max_power_w:.0f} W" + (f" of {s.power_limit_w:.0f} W" if s.power_limit_w else "")
            )
        if s.min_sm_clock_mhz is not None:
            figs.append(f"SM {s.min_sm_clock_mhz:.0f}-{s.max_sm_clock_mhz:.0f} MHz")
        lines.append(f"  {s.samples} samples {span}" + ("; " + ", ".join(figs) if figs else ""))
        normal = [
            f"{k} {v:.0f}s" for k, v in s.reasons_s.items() if k in ("sw_power_cap", "gpu_idle") and v > 0
        ]
        if normal:
            lines.append("  normal: " + ", ".join(normal))
        f = s.findings()
        lines.append("  findings: " + ("; ".join(f) if f else "none"))
    return "\n".join(lines)
