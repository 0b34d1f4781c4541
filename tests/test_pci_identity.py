"""One PCI id format out, any in (issue 29): every output (events, gpus, alerts, /metrics labels) gives a GPU's
PCI id as nvidia-smi prints it, `00000000:48:00.0`, whichever form came in (the kernel's `0000:48:00`, NVML's,
`PCI:...`, any case); a store written before holds the short key and reads, and is migrated, in the new form; an
alert of a GPU known only by its PCI id carries it (`"gpu": null` and `"pci_bus_id"`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleettool.export.metrics_server import dcgm_pci_bus_id
from fleettool.model import Event, GpuInfo, canonical_pci_bus_id
from fleettool.store import Store
from tests.conftest import run_cli


@pytest.mark.parametrize(
    "given, want",
    [
        ("0000:48:00", "00000000:48:00.0"),  # the kernel's XID line
        ("0000:48:00.0", "00000000:48:00.0"),  # lspci -D, the AER lines
        ("00000000:48:00.0", "00000000:48:00.0"),  # nvidia-smi, NVML, dcgm-exporter
        ("PCI:0000:48:00", "00000000:48:00.0"),  # as the XID line writes it
        ("pci:0000:4a:00", "00000000:4A:00.0"),
        ("00000000:4a:00.0", "00000000:4A:00.0"),
        ("4A:00.0", "00000000:4A:00.0"),  # lspci without the domain
        ("0001:c1:00.1", "00000001:C1:00.1"),  # another domain, another function kept
        (" 0000:1b:00 ", "00000000:1B:00.0"),
        ("not-a-pci-id", "not-a-pci-id"),  # no PCI id: kept as given, never made up
        ("", None),
        (None, None),
    ],
)
def test_every_form_in_one_form_out(given: str | None, want: str | None) -> None:
    assert canonical_pci_bus_id(given) == want
    if want and given and want != given.strip():
        assert canonical_pci_bus_id(want) == want  # idempotent
        assert dcgm_pci_bus_id(given.strip()) == want  # /metrics labels agree


def test_a_dmesg_gpu_known_only_by_pci_id_is_one_form_in_events_alerts_and_gpus(tmp_path: Path) -> None:
    log = tmp_path / "any-name.txt"
    log.write_text(
        "[Sat Nov 29 10:01:02 2026] NVRM: Xid (PCI:0000:91:00): 79, pid=0, name=python, GPU has fallen off the bus.\n"
        "[Sat Nov 29 10:01:05 2026] NVRM: GPU at PCI:0000:91:00: GPU-c5a4b1a8-1a0c-5a0a-0b3c-1c5f2a4b9d01\n"
    )
    db = tmp_path / "d.duckdb"
    assert run_cli("replay", str(log), "--db", str(db), "--node", "gpu-50", "-q").returncode == 0
    (a,) = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert a["gpu"] is None and a["pci_bus_id"] == "00000000:91:00.0", a
    assert "GPU at 00000000:91:00.0 on gpu-50" in a["summary"]
    evs = json.loads(run_cli("events", "--db", str(db), "--json").stdout)
    assert {e["pci_bus_id"] for e in evs} == {"00000000:91:00.0"}
    gpus = json.loads(run_cli("gpus", "--db", str(db), "--json").stdout)
    assert [g["pci_bus_id"] for g in gpus] == ["00000000:91:00.0"]
    table = run_cli("events", "--db", str(db)).stdout
    assert "00000000:91:00.0" in table and "0000:91:00 " not in table


def test_an_alert_of_an_indexed_gpu_carries_its_inventory_pci_id(tmp_path: Path) -> None:
    db = tmp_path / "i.duckdb"
    with Store(db) as st:
        st.upsert_gpus([GpuInfo("gpu-7", 2, "GPU-x", "0000:1a:00", "NVIDIA H200")], 1.0)
        st.con.execute(
            "INSERT INTO alerts VALUES ('a1', 'GpuXid', 'xid', 'critical', 'gpu-7', 2, NULL, 'reset-gpu', "
            "'firing', '2026-01-01', '2026-01-01', 's', 'runbooks/gpu-xid.md', '{\"incident\": \"xid\"}')"
        )
    (a,) = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert (a["gpu"], a["pci_bus_id"]) == (2, "00000000:1A:00.0")


def test_a_store_holding_the_short_form_reads_and_migrates_to_nvidia_smis(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    with Store(db) as st:  # rows as fleettool wrote them before: the short key, straight into the tables
        st.con.execute(
            "INSERT INTO events (ts, node, gpu, pci_bus_id, kind, code, message) "
            "VALUES ('2026-01-01', 'gpu-1', NULL, '0000:18:00', 'xid', 79, 'GPU has fallen off the bus')"
        )
        st.con.execute(
            "INSERT INTO gpus (node, gpu, uuid, pci_bus_id) VALUES ('gpu-1', 0, 'GPU-a', '0000:2a:00')"
        )
        st.con.execute(
            "INSERT INTO alerts VALUES ('a1', 'GpuXid', 'xid', 'critical', 'gpu-1', NULL, NULL, 'reset-gpu', "
            "'firing', '2026-01-01', '2026-01-01', 's', 'runbooks/gpu-xid.md', '{\"incident\": \"xid@0000:18:00\"}')"
        )
    # read-only (not yet migrated): the outputs are in nvidia-smi's form all the same
    (e,) = json.loads(run_cli("events", "--db", str(db), "--json").stdout)
    assert e["pci_bus_id"] == "00000000:18:00.0"
    (g,) = json.loads(run_cli("gpus", "--db", str(db), "--json").stdout)
    assert g["pci_bus_id"] == "00000000:2A:00.0"
    (a,) = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert (a["gpu"], a["pci_bus_id"]) == (None, "00000000:18:00.0")
    with Store(db) as st:  # the next read-write open migrates the rows themselves
        assert st.rows("SELECT pci_bus_id FROM events UNION ALL SELECT pci_bus_id FROM gpus") == [
            ("00000000:18:00.0",),
            ("00000000:2A:00.0",),
        ]
        st.write_events([Event(2.0, "gpu-1", "xid", "x", code=13, pci_bus_id="PCI:0000:18:00")])
        st.upsert_gpus([GpuInfo("gpu-1", None, "GPU-a", "0000:2A:00.0")], 3.0)  # one GPU, not a second row
        assert st.scalar("SELECT count(DISTINCT pci_bus_id) FROM events") == 1
        assert st.rows("SELECT gpu, pci_bus_id FROM gpus") == [(0, "00000000:2A:00.0")]
