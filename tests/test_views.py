"""The triage views as plain data: a runbook comes filled in for the alert it is shown with (node, GPU, PCI id
for lspci), headed by which GPU and what the evidence found; placeholders nothing can fill stay for the reader."""

from __future__ import annotations

from pathlib import Path

from fleettool.store import Store
from fleettool.views import alert_detail, render_runbook
from tests.conftest import SCENARIOS, run_cli


def test_the_runbook_is_filled_in_for_the_alert(tmp_path: Path) -> None:
    db = tmp_path / "v.duckdb"
    assert run_cli("replay", str(SCENARIOS / "dbe-remap-pending"), "--db", str(db), "-q").returncode == 0
    with Store(db, read_only=True) as st:
        aid = st.scalar("SELECT alert_id FROM alerts WHERE rule = 'GpuDoubleBitError'")
        d = alert_detail(st, aid)
    assert d is not None
    text = d["runbook_text"]
    assert "<node>" not in text and "<gpu>" not in text
    assert "nvidia-smi -i 4 -r" in text and "kubectl cordon gpu-12" in text
    assert text.startswith("---\nalert: GpuDoubleBitError")  # the front matter stays first
    head = text.split("# ", 1)[0]
    assert "**This alert:** GpuDoubleBitError on gpu-12, GPU 4" in head
    assert "UUID GPU-5ad6f96c" in head and "PCI 00000000:9A:00.0" in head
    assert "XID 48" in head  # the evidence's findings


def test_unknown_values_leave_their_placeholders() -> None:
    text = "# x\n\n`lspci -vvv -s <bus>` on <node>, GPU <gpu>, job <job>\n"
    out = render_runbook(text, {"rule": "NodeMissingGpus", "node": "n1", "gpu": None}, None)
    assert "on n1, GPU <gpu>, job <job>" in out and "-s <bus>" in out
    out = render_runbook(text, {"rule": "R", "node": "n1", "gpu": 2}, {"pci_bus_id": "0000:18:00"})
    assert "lspci -vvv -s 0000:18:00" in out and "GPU 2, job <job>" in out


def test_evidence_shows_the_category_s_series_and_a_silent_gpu_is_stale(tmp_path: Path) -> None:
    from fleettool.views import node_view

    db = tmp_path / "s.duckdb"
    for sc in ("thermal-throttle", "gpu-fell-off-bus"):
        assert run_cli("replay", str(SCENARIOS / sc), "--db", str(db), "-q").returncode == 0
    with Store(db, read_only=True) as st:
        aid = st.scalar("SELECT alert_id FROM alerts WHERE node = 'gpu-07'")
        d = alert_detail(st, aid)
        v = node_view(st, "gpu-21")
    assert d is not None and d["category"] == "thermal"
    # judged on the clock-event reasons; the temperature and clocks are what explain it
    assert {"clock_event_reasons", "gpu_temp_c", "sm_clock_mhz"} <= set(d["series"])
    assert max(d["series"]["gpu_temp_c"]) >= 85
    stale = {g["gpu"]: g["stale_s"] for g in v["gpus"]}
    assert stale[3] is not None and stale[3] >= 600  # GPU 3 fell off the bus: its last readings are old
    assert all(s is None for g, s in stale.items() if g != 3)
    assert d["series_stale"] == {}  # gpu-07's series run to the node's newest reading


def test_a_series_that_stops_while_the_node_goes_on_is_marked_stale_in_the_evidence(tmp_path: Path) -> None:
    db = tmp_path / "b.duckdb"
    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q").returncode == 0
    with Store(db, read_only=True) as st:
        aid = st.scalar(
            "SELECT alert_id FROM alerts WHERE node = 'gpu-21' AND gpu = 3 ORDER BY first_seen LIMIT 1"
        )
        d = alert_detail(st, aid)
        newest = st.scalar("SELECT epoch(max(ts)) FROM samples WHERE node = 'gpu-21'")
        last_temp = st.scalar(
            "SELECT epoch(max(ts)) FROM samples WHERE node = 'gpu-21' AND gpu = 3 AND metric = 'gpu_temp_c'"
        )
    assert d is not None and d["series"], d
    # GPU 3's readings stop at the fall; the node's other GPUs go on, so what it last read is marked stale
    assert d["series_stale"].get("gpu_temp_c") == float(newest) - float(last_temp) >= 60
