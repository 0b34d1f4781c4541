"""Real `dcgmi dmon` and `dcgmi health -c` outputs (fixtures/samples/dcgmi/SOURCES.md) replayed end to end under an
arbitrary name (`paste.txt`): what was stored, and what was not. Each shows a shape the constructed samples did not:
dmon's ECC columns named only by their short names, and a health incident whose message carries DCGM's next step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleettool.formats.dcgmi_codes import match_errors
from tests.test_dcgmi import DCGMI, T0, firing, query, replay

DMON_2080 = DCGMI / "dcgmi-dmon-e-203-204-155-150-310-311-252-rtx2080ti-3.3.5.txt"
DMON_L4 = DCGMI / "dcgmi-dmon-e-203-204-252-l4-4.6.1.txt"
HEALTH_L4 = DCGMI / "dcgmi-health-c-l4-power-warning-4.6.1.txt"


def by_metric(db: Path) -> dict[str, tuple[int, float, float, float]]:
    rows = query(
        db,
        "SELECT metric, count(*) AS n, min(epoch(ts)) AS t0, max(epoch(ts)) AS t1, max(value) AS vmax "
        "FROM samples WHERE node = 'gpu-17' AND gpu = 0 GROUP BY metric",
    )
    return {r["metric"]: (r["n"], r["t0"], r["t1"], r["vmax"]) for r in rows}


def test_real_dmon_without_its_command_line_stores_every_column_ecc_included(tmp_path: Path) -> None:
    # no `dcgmi dmon -e ...` line: each column is known by its short name only; MCUTL, ESVTL and EDVTL were
    # "not stored (field not known)", so a volatile DBE count in that column would have been lost
    doc, db = replay(tmp_path, DMON_2080)
    (f,) = doc["files"]
    assert not [n for n in f["notes"] if "not stored" in n], f["notes"]
    got = by_metric(db)
    assert set(got) >= {"gpu_util_pct", "mem_util_pct", "power_w", "gpu_temp_c", "ecc_sbe_volatile"}
    assert got["ecc_dbe_volatile"] == (5, T0, T0 + 4, 0)  # 5 rounds of one GPU, dmon's default 1 s apart
    assert got["power_w"][3] == pytest.approx(20.986)
    assert got["gpu_temp_c"][3] == 22
    assert firing(doc) == []  # all counts 0: nothing to page on


def test_real_dmon_with_its_prompt_line_takes_the_field_ids_from_it(tmp_path: Path) -> None:
    doc, db = replay(tmp_path, DMON_L4)
    got = by_metric(db)
    assert got["gpu_util_pct"] == (5, T0, T0 + 4, 100)
    assert got["mem_util_pct"][3] == 69
    assert got["fb_used_bytes"][3] == 7532 * 1024 * 1024
    assert not [n for n in doc["files"][0]["notes"] if "not stored" in n]


def test_real_health_power_warning_is_one_incident_with_its_code_and_next_step(tmp_path: Path) -> None:
    doc, db = replay(tmp_path, HEALTH_L4)
    evs = query(db, "SELECT gpu, kind, code, message, detail::VARCHAR AS detail, epoch(ts) AS t FROM events")
    # one incident, not the message and its advice as two, and DCGM_FR_CLOCKS_EVENT_POWER (12), not no code
    assert [(e["gpu"], e["kind"], e["code"], e["t"]) for e in evs] == [(0, "dcgm-health-warn", 12, T0)]
    assert evs[0]["message"] == (
        "DCGM health Warning: Power system: Detected clocks event due to power violation in GPU 0. "
        "Monitor the power conditions. This GPU can still perform workload (DCGM_FR_CLOCKS_EVENT_POWER)"
    )
    assert json.loads(evs[0]["detail"])["system"] == "Power system"
    assert firing(doc) == []  # a Warning does not page


def test_a_message_and_its_next_step_match_as_one() -> None:
    text = (
        "Detected clocks event due to power violation in GPU 0. Monitor the power conditions. "
        "This GPU can still perform workload."
    )
    (m,) = match_errors(text)
    assert m.error is not None and (m.error.code, m.error.name) == (12, "DCGM_FR_CLOCKS_EVENT_POWER")
    assert m.args == ("0",)
