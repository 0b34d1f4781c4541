"""A stand-in dcgm-exporter for the agent benchmark: serves one recorded scrape on 127.0.0.1, as a process of
its own (so its CPU is not the agent's), with dcgm-exporter's content type.

The scrape is the last one in a recorded dcgm-exporter file of fixtures/ (default: the healthy 8-GPU scenario,
fixtures/scenarios/healthy-power-capped/dcgm-exporter.om.gz: 20 DCGM_FI_* fields per GPU, the exporter's label
set), its timestamps and `# EOF` dropped, as dcgm-exporter prints /metrics. The GPUs' labels are rewritten to
the node's own (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`), so
that NVML and the exporter name the same GPUs, as on a real node; `--gpus` keeps that many (the recording's
GPUs repeat past its count). bench/agent_overhead.py also passes NVML's readings (build_scrape's nvml_values):
a field that maps onto a metric NVML reads is served with NVML's value, so that the two sources agree as on a
real node (a counter that differed between them would look like resets and increases to the rules).

`--counters deploy` adds, for every GPU, the fields of deploy/kubernetes/fleettool-counters.csv that the
recording lacks (NVML's value where there is one, else a fixed plausible one): the scrape the DaemonSet's
dcgm-exporter would serve. The default `fixture` serves the recorded fields only.

  python bench/dcgm_stub.py --gpus 8 --node bench --port-file /tmp/dcgm.port      # serves until SIGTERM
  python bench/dcgm_stub.py --gpus 8 --node bench --print                         # prints the body
  python bench/dcgm_stub.py --body scrape.prom --port-file /tmp/dcgm.port          # serves a file as it is
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FIXTURE = ROOT / "fixtures" / "scenarios" / "healthy-power-capped" / "dcgm-exporter.om.gz"
COUNTERS_CSV = ROOT / "deploy" / "kubernetes" / "fleettool-counters.csv"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what dcgm-exporter (Prometheus' Go client) sends

# values for the counters CSV's fields that the recording lacks (--counters deploy): an idle, healthy H200
FILL: dict[str, str] = {
    "DCGM_FI_DEV_MAX_SM_CLOCK": "1980",
    "DCGM_FI_DEV_SLOWDOWN_TEMP": "87",
    "DCGM_FI_DEV_SHUTDOWN_TEMP": "92",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "700.000000",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "81234567890",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "0",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "0",
    "DCGM_FI_DEV_FB_USED": "512",
    "DCGM_FI_DEV_FB_TOTAL": "143771",
    "DCGM_FI_DEV_PSTATE": "0",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "0.000000",
    "DCGM_FI_PROF_SM_ACTIVE": "0.000000",
    "DCGM_FI_PROF_DRAM_ACTIVE": "0.000000",
    "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX": "8192",
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": "5",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "0",
}

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)(?:\s+(\S+))?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def gpu_identity(i: int) -> tuple[str, str]:
    """UUID and PCI bus id of GPU i as the fake source names them (sources/fake.py device_info)."""
    return f"GPU-fa4e0000-0000-4000-8000-{i:012x}", f"00000000:{0x18 + i * 0x10:02X}:00.0"


def _last_scrape(fixture: Path) -> tuple[list[str], dict[str, list[tuple[dict[str, str], str]]]]:
    """The recording's HELP/TYPE lines and, per family, the series of its last timestamp."""
    opener = gzip.open if fixture.suffix == ".gz" else open
    with opener(fixture, "rt") as f:  # type: ignore[operator]
        lines = f.read().splitlines()
    last: dict[tuple[str, str], tuple[float, dict[str, str], str]] = {}
    heads: list[str] = []
    order: list[str] = []
    for ln in lines:
        if ln.startswith("#"):
            if ln.startswith(("# HELP", "# TYPE")):
                heads.append(ln)
            continue
        m = _LINE.match(ln)
        if not m:
            continue
        name, labels_s, value, ts = m.groups()
        t = float(ts) if ts else 0.0
        key = (name, labels_s)
        if name not in order:
            order.append(name)
        if key not in last or t >= last[key][0]:
            last[key] = (t, dict(_LABEL.findall(labels_s)), value)
    tmax = max(t for t, _, _ in last.values())
    fams: dict[str, list[tuple[dict[str, str], str]]] = {n: [] for n in order}
    for (name, _), (t, labels, value) in last.items():
        if t == tmax:
            fams[name].append((labels, value))
    return heads, fams


def _counters_csv() -> list[tuple[str, str, str]]:
    out = []
    for ln in COUNTERS_CSV.read_text().splitlines():
        if not ln.strip() or ln.startswith("#"):
            continue
        field, typ, help_ = (p.strip() for p in ln.split(",", 2))
        if typ != "label":
            out.append((field, typ, help_))
    return out


def build_scrape(
    *,
    gpus: int,
    node: str,
    model: str = "NVIDIA H200",
    driver: str = "580.159.04",
    identities: list[tuple[str, str]] | None = None,
    fixture: Path = DEFAULT_FIXTURE,
    counters: str = "fixture",
    nvml_values: list[dict[str, float]] | None = None,
) -> str:
    """One /metrics body: the recording's last scrape for `gpus` GPUs named as this node's GPUs.

    nvml_values: per GPU, fleettool metric -> the value NVML (or the fake) reads; a DCGM field that maps onto
    such a metric (collectors.series) is served with that value, so that the two sources agree as they do on
    a real node (counters that differed would look like resets and increases to the rules)."""
    heads, fams = _last_scrape(fixture)
    mapped: dict[str, tuple[str, float]] = {}
    if nvml_values:
        from fleettool.metrics import map_dcgm_name

        names = set(fams) | ({f for f, _, _ in _counters_csv()} if counters == "deploy" else set())
        for name in names:
            hit = map_dcgm_name(name)
            if hit is not None and not hit[2]:
                mapped[name] = (hit[0], hit[1])

    def val(name: str, value: str, i: int) -> str:
        if name in mapped and nvml_values and i < len(nvml_values) and mapped[name][0] in nvml_values[i]:
            metric, scale = mapped[name]
            v = nvml_values[i][metric] / scale
            return str(int(v)) if float(v).is_integer() else f"{v:.6f}"
        return value

    ids = identities or [gpu_identity(i) for i in range(gpus)]
    head_of: dict[str, list[str]] = {}
    for h in heads:
        head_of.setdefault(h.split()[2], []).append(h)
    out: list[str] = []

    def series(name: str, labels: dict[str, str], value: str, i: int) -> str:
        lab = dict(labels)
        lab["gpu"] = str(i)
        lab["UUID"], lab["pci_bus_id"] = ids[i]
        lab["device"] = f"nvidia{i}"
        lab["modelName"] = model
        if "DCGM_FI_DRIVER_VERSION" in lab:
            lab["DCGM_FI_DRIVER_VERSION"] = driver
        if "Hostname" in lab or "hostname" not in lab:
            lab["Hostname"] = node
        body = ",".join(f'{k}="{v}"' for k, v in lab.items())
        return f"{name}{{{body}}} {value}"

    template: dict[str, str] = {}
    for name, rows in fams.items():
        if not rows:
            continue
        by_gpu = sorted(rows, key=lambda r: int(r[0].get("gpu", "0")))
        out.extend(sorted(head_of.get(name, []), key=lambda h: not h.startswith("# HELP")))
        for i in range(gpus):
            labels, value = by_gpu[i % len(by_gpu)]
            template = labels
            out.append(series(name, labels, val(name, value, i), i))
    if counters == "deploy":
        for field, typ, help_ in _counters_csv():
            if field in fams and fams[field]:
                continue
            out.append(f"# HELP {field} {help_}")
            out.append(f"# TYPE {field} {typ}")
            for i in range(gpus):
                out.append(series(field, template, val(field, FILL.get(field, "0"), i), i))
    return "\n".join(out) + "\n"


class _Handler(BaseHTTPRequestHandler):
    body = b""
    hits = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404)
            return
        type(self).hits += 1
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def serve(body: bytes, port: int, port_file: Path | None, stats_file: Path | None) -> None:
    _Handler.body = body
    srv = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    if port_file is not None:
        tmp = port_file.with_suffix(".tmp")
        tmp.write_text(str(srv.server_address[1]))
        os.replace(tmp, port_file)

    def stop(*_: object) -> None:
        if stats_file is not None:
            stats_file.write_text(json.dumps({"hits": _Handler.hits, "bytes": len(body)}))
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    srv.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--node", default="bench")
    ap.add_argument("--model", default="NVIDIA H200")
    ap.add_argument("--driver", default="580.159.04")
    ap.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    ap.add_argument("--counters", choices=["fixture", "deploy"], default="fixture")
    ap.add_argument(
        "--identities",
        type=Path,
        help="JSON [[uuid, pci_bus_id], ...] of the live GPUs (default: the fake's)",
    )
    ap.add_argument("--port", type=int, default=0, help="0: any free port (written to --port-file)")
    ap.add_argument("--port-file", type=Path)
    ap.add_argument("--stats-file", type=Path, help="written at SIGTERM: scrapes served, body size")
    ap.add_argument("--print", action="store_true", help="print the body and exit")
    ap.add_argument("--body", type=Path, help="serve this file as it is (made by build_scrape)")
    a = ap.parse_args()
    if a.body is not None:
        serve(a.body.read_bytes(), a.port, a.port_file, a.stats_file)
        return
    ids = [tuple(x) for x in json.loads(a.identities.read_text())] if a.identities else None
    body = build_scrape(
        gpus=a.gpus,
        node=a.node,
        model=a.model,
        driver=a.driver,
        identities=ids,  # type: ignore[arg-type]
        fixture=a.fixture,
        counters=a.counters,
    )
    if a.print:
        sys.stdout.write(body)
        return
    serve(body.encode(), a.port, a.port_file, a.stats_file)


if __name__ == "__main__":
    main()
