"""One GPU, one identity everywhere (issue 29, item 5): node name, GPU index, UUID and PCI id (nvidia-smi's
`00000000:9A:00.0`) read the same from `alerts --json`, `gpus --json`, `events --json`, the TUI's alert detail,
the agent's /metrics, the exported Prometheus rules (under the real promtool, fed the /metrics series) and the
Parquet fleet export (`export --to`, `fleet alerts`).

The recording is fixtures/scenarios/dbe-remap-pending (dcgm-exporter's scrape of 8 H100s plus the kernel log of
gpu-12), replayed into a real store under another file name: GPU 4 has a DBE, XID 48/63 and a pending remap; the
kernel log names it by the short PCI key `0000:9a:00`, dcgm-exporter by `00000000:9A:00.0`."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleettool.export.metrics_server import AgentMetrics
from fleettool.model import GpuInfo
from fleettool.pipeline import AGENT_ALERT_FIELDS
from fleettool.store import Store
from fleettool.store.alerts import list_alerts
from tests.conftest import SCENARIOS, promtool_or_skip, run_cli

NODE, INDEX = "gpu-12", 4
UUID = "GPU-5ad6f96c-53eb-6679-a45b-ed495c744d40"
PCI = "00000000:9A:00.0"  # nvidia-smi's form of the kernel's 0000:9a:00
RULE = "GpuDoubleBitError"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("rec")
    for f in ("dcgm-exporter.om.gz", "kernel-gpu-12.log.gz"):  # arbitrary names: told by content
        shutil.copy(SCENARIOS / "dbe-remap-pending" / f, src / f"capture-{len(list(src.iterdir()))}.gz")
    p = tmp_path_factory.mktemp("store") / "fleet.duckdb"
    r = run_cli("replay", str(src), "--db", str(p), "-q")
    assert r.returncode == 0, r.stderr
    return p


def _json(*args: str) -> list[dict[str, object]]:
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    out: list[dict[str, object]] = json.loads(r.stdout)
    return out


def _alert(db: Path) -> dict[str, object]:
    (a,) = [a for a in _json("alerts", "--db", str(db), "--json") if a["rule"] == RULE]
    return a


def test_cli_json_alerts_gpus_and_events_agree(db: Path) -> None:
    a = _alert(db)
    assert (a["node"], a["gpu"], a["pci_bus_id"], a.get("uuid")) == (NODE, INDEX, PCI, UUID)
    (g,) = [g for g in _json("gpus", "--db", str(db), "--json") if g["gpu"] == INDEX]
    assert (g["node"], g["uuid"], g["pci_bus_id"]) == (NODE, UUID, PCI)
    xids = [e for e in _json("events", "--db", str(db), "--json", "--kind", "xid")]
    assert {(e["node"], e["gpu"], e["uuid"], e["pci_bus_id"]) for e in xids} == {(NODE, INDEX, UUID, PCI)}
    assert sorted(e["code"] for e in xids) == [48, 63]


def test_tui_alert_detail_names_the_same_gpu(db: Path) -> None:
    pytest.importorskip("textual")
    from textual.widgets import DataTable, Markdown, Static

    from fleettool.tui.app import FleetTui
    from fleettool.tui.screens import DetailScreen
    from fleettool.tui.source import Source

    seen: dict[str, str] = {}

    async def go() -> None:
        app = FleetTui(Source(db=db), refresh_s=60, first="alerts")
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#alerts", DataTable)
            for _ in range(100):
                await pilot.pause(0.05)
                if table.row_count:
                    break
            row = [i for i, r in enumerate(app.rows) if r["rule"] == RULE][0]
            table.move_cursor(row=row)
            await pilot.press("enter")
            for _ in range(100):
                await pilot.pause(0.05)
                if isinstance(app.screen, DetailScreen) and "UUID" in app.screen.query_one(Markdown).source:
                    break
            seen["summary"] = str(app.screen.query_one("#summary", Static).render())
            seen["runbook"] = app.screen.query_one("#runbook", Markdown).source

    asyncio.run(go())
    assert f"{NODE} gpu {INDEX}\n" in seen["summary"], seen["summary"]
    head = next(line for line in seen["runbook"].splitlines() if line.startswith("> **This alert:**"))
    assert head.startswith(f"> **This alert:** {RULE} on {NODE}, GPU {INDEX} (UUID {UUID}, PCI {PCI},"), head


def _metrics_text(db: Path) -> str:
    """/metrics as the agent renders it from what it holds: the latest sample per series, the inventory and the
    firing alerts, here read back from the replayed store."""
    with Store(db, read_only=True) as st:
        latest = {
            (m, g, u, s): v
            for m, g, u, s, v in st.rows(
                "SELECT metric, gpu, uuid, sub, arg_max(value, ts) FROM samples WHERE node = ? GROUP BY ALL",
                [NODE],
            )
        }
        counts = {
            (k, c): n
            for k, c, n in st.rows(
                "SELECT kind, code, count(*) FROM events WHERE node = ? GROUP BY ALL", [NODE]
            )
        }
        inv = {
            g: GpuInfo(NODE, g, u, p, m, d, s)
            for g, u, p, m, d, s in st.rows(
                "SELECT gpu, uuid, pci_bus_id, model, driver, serial FROM gpus WHERE node = ?", [NODE]
            )
        }
        firing = [{k: a[k] for k in AGENT_ALERT_FIELDS} for a in list_alerts(st, state="firing", node=NODE)]
    reg = CollectorRegistry()
    reg.register(AgentMetrics(NODE, lambda: latest, lambda: counts, lambda: firing, lambda: inv))
    return generate_latest(reg).decode()


def _series(text: str, name: str) -> list[dict[str, str]]:
    return [s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_metrics_labels_name_the_same_gpu(db: Path) -> None:
    text = _metrics_text(db)
    want = {"Hostname": NODE, "gpu": str(INDEX), "UUID": UUID, "pci_bus_id": PCI}
    for name in ("fleettool_ecc_dbe_volatile_total", "fleettool_gpu_info", "fleettool_alerts"):
        mine = [lab for lab in _series(text, name) if lab.get("gpu") == str(INDEX)]
        assert mine, f"{name}: no series of GPU {INDEX}"
        for lab in mine:
            assert {k: lab.get(k) for k in want} == want, (name, lab)
    assert {lab["rule"] for lab in _series(text, "fleettool_alerts")} >= {RULE}


def test_exported_prometheus_rule_fires_with_the_same_identity(db: Path, tmp_path: Path) -> None:
    promtool = promtool_or_skip()
    assert run_cli("rules", "export", "--prometheus", "-o", str(tmp_path / "rules.yml")).returncode == 0
    rule = next(
        r
        for g in yaml.safe_load((tmp_path / "rules.yml").read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == RULE
    )
    (series,) = [
        lab
        for lab in _series(_metrics_text(db), "fleettool_ecc_dbe_volatile_total")
        if lab.get("gpu") == str(INDEX)
    ]
    sel = (
        "fleettool_ecc_dbe_volatile_total{" + ",".join(f'{k}="{v}"' for k, v in sorted(series.items())) + "}"
    )
    values = {"gpu": series["gpu"], "Hostname": series["Hostname"]}
    summary = re.sub(
        r"\{\{ \$labels\.(\w+) \}\}", lambda m: values[m.group(1)], rule["annotations"]["summary"]
    )
    summary = summary.replace('{{ printf "%.6g" $value }}', "1")
    assert "{{" not in summary and f"GPU {INDEX} on {NODE}:" in summary
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": sel, "values": "1x5"}],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": RULE,
                        "exp_alerts": [
                            {
                                "exp_labels": {**series, **rule["labels"]},
                                "exp_annotations": {**rule["annotations"], "summary": summary},
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test))
    res = subprocess.run(
        [promtool, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_fleet_export_keeps_the_same_identity(db: Path, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    r = run_cli("export", "--db", str(db), "--to", str(fleet))
    assert r.returncode == 0, r.stderr
    from fleettool.fleet.location import open_location
    from fleettool.fleet.read import open_fleet

    with open_fleet(open_location(str(fleet))) as fl:
        gpus = fl.rows("SELECT node, uuid, pci_bus_id FROM gpus WHERE gpu = ?", [INDEX])
        xids = fl.rows("SELECT DISTINCT node, gpu, uuid, pci_bus_id FROM events WHERE kind = 'xid'")
    assert gpus == [(NODE, UUID, PCI)]
    assert xids == [(NODE, INDEX, UUID, PCI)]
    (a,) = [a for a in _json("fleet", "alerts", "--fleet", str(fleet), "--json") if a["rule"] == RULE]
    assert (a["node"], a["gpu"], a.get("pci_bus_id"), a.get("uuid")) == (NODE, INDEX, PCI, UUID)
