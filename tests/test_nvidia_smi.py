"""nvidia-smi -q text and -q -x XML: values per GPU across driver generations."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.formats.nvidia_smi import gpu_identity, gpu_samples, parse_text, parse_xml
from fleettool.recording.files import iter_lines, read_text
from tests.conftest import FIXTURES, run_cli

S = FIXTURES / "samples" / "nvidia-smi"
H200 = FIXTURES / "samples" / "h200-recording"


def test_h100_535_text() -> None:
    rep = parse_text(iter_lines(S / "nvidia-smi-q-h100x8-535.161.08.txt"))
    assert rep.driver == "535.161.08" and len(rep.gpus) == 8
    g = gpu_samples(rep.gpus[0])
    assert gpu_identity(rep.gpus[0])["uuid"] == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert g["clock_event_reasons"] == 0x88  # HW slowdown with power brake, as SOURCES.md says
    assert g["temp_margin_c"] == 56.0 and "temp_slowdown_c" not in g  # T.Limit values are margins
    assert g["pcie_replay_total"] == 67.0 and g["remap_bank_max"] == 2560.0 and g["power_limit_w"] == 700.0


def test_t4_530_throttle_reasons_and_retired_pages() -> None:
    rep = parse_text(iter_lines(S / "nvidia-smi-q-t4-530.30.02.txt"))
    t4 = [g for g in rep.gpus if gpu_identity(g)["model"] == "Tesla T4"][0]
    v = gpu_samples(t4)
    assert (
        v["clock_event_reasons"] == 0x1 and v["temp_slowdown_c"] == 93.0 and v["retired_pages_pending"] == 0.0
    )
    assert "remap_pending" not in v  # Remapped Rows : N/A


def test_excerpts() -> None:
    sram = gpu_samples(parse_text(iter_lines(S / "nvidia-smi-q-ecc-sram-uncorrectable-excerpt.txt")).gpus[0])
    assert sram["ecc_dbe_volatile"] == 1.0 and sram["ecc_dbe_aggregate"] == 5.0
    ret = gpu_samples(parse_text(iter_lines(S / "nvidia-smi-q-retired-pages-excerpt.txt")).gpus[0])
    assert ret == {"retired_pages_sbe": 2.0, "retired_pages_dbe": 0.0, "retired_pages_pending": 1.0}
    throttle = parse_text(iter_lines(S / "nvidia-smi-q-clocks-throttle-reasons-excerpts.txt")).gpus
    assert gpu_samples(throttle[0])["clock_event_reasons"] == 0x1  # "Clocks Throttle Reasons", Idle active


def test_h200_text_and_xml_agree() -> None:
    t = parse_text(iter_lines(H200 / "nvidia-smi-q.txt"))
    x = parse_xml(read_text(H200 / "nvidia-smi-q.xml"))
    assert t.driver == x.driver == "580.159.04"
    tv, xv = gpu_samples(t.gpus[0]), gpu_samples(x.gpus[0])
    for k in (
        "gpu_temp_c",
        "temp_margin_c",
        "power_limit_w",
        "pcie_link_width_max",
        "ecc_dbe_aggregate",
        "remap_pending",
    ):
        assert tv[k] == xv[k], k
    assert gpu_identity(t.gpus[0]) == gpu_identity(x.gpus[0])


def test_replay_stores_samples_and_inventory(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    rc = run_cli("replay", str(S / "nvidia-smi-q-h100x8-535.161.08.txt"), "--db", str(db), "--node", "h100-a")
    assert rc.returncode == 0, rc.stderr
    gpus = json.loads(run_cli("gpus", "--db", str(db), "--json").stdout)
    assert len(gpus) == 8 and gpus[0]["node"] == "h100-a" and gpus[0]["driver"] == "535.161.08"
    table = run_cli("gpus", "--db", str(db)).stdout.splitlines()
    assert table[0].split()[-1] == "SERIAL" and table[1].split()[-1] == gpus[0]["serial"] != ""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=30))
def test_fuzz_text(lines: list[str]) -> None:
    for g in parse_text(lines).gpus:
        gpu_samples(g)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_xml(text: str) -> None:
    for g in parse_xml("<nvidia_smi_log><gpu id='0:1:2'>" + text).gpus + parse_xml(text).gpus:
        gpu_samples(g)
