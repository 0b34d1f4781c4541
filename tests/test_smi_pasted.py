"""nvidia-smi -q text as people paste it (issue 29): prompt lines, -d sections without the banner, annotations after
a value, elisions, Markdown fences, odd indentation and newer drivers' keys and widths, each from a real paste
(fixtures/formats/nvidia-smi/SOURCES.md), replayed end to end under an arbitrary file name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.formats.errors import ParseIssue
from fleettool.formats.nvidia_smi import gpu_samples, parse_text
from fleettool.formats.nvidia_smi_paste import prompt, sniff, strip_annotation, xml_document
from fleettool.model import canonical_pci_bus_id
from fleettool.recording.identify import identify_why
from fleettool.store import Store
from tests.conftest import FIXTURES, run_cli

P = FIXTURES / "formats" / "nvidia-smi"
AT = "2026-08-10T15:40:00Z"  # the time of the pastes that carry no Timestamp

# file -> (node, gpu, PCI id, samples that must be stored, the rule that must fire)
SHAPES = {
    "prompt-ecc-blackwell.txt": (
        "gpu-node-a",
        1,
        None,
        {"ecc_dbe_volatile": 2.0, "ecc_dbe_aggregate": 2.0, "ecc_sbe_volatile": 0.0, "ecc_mode": 1.0},
        "GpuDoubleBitError",
    ),
    "prompt-row-remapper-no-banner.txt": (
        "gpu-node-a",
        1,
        "00000000:55:00.0",
        {
            "remap_pending": 1.0,
            "remap_uncorrectable_rows": 1.0,
            "remap_failure": 0.0,
            "remap_bank_max": 511.0,
        },
        "GpuRowRemapPending",
    ),
    "annotated-ecc-row-remapper.txt": (
        "given-node",
        0,
        "00000000:52:00.0",
        {"remap_pending": 1.0, "remap_uncorrectable_rows": 1.0, "remap_bank_max": 2559.0},
        "GpuRowRemapPending",
    ),
    "excerpt-elided-no-banner.txt": (
        "given-node",
        0,
        "00000000:10:1C.0",
        {
            "remap_pending": 1.0,
            "remap_correctable_rows": 1.0,
            "ecc_sbe_volatile": 177.0,
            "ecc_dbe_volatile": 0.0,
        },
        "GpuRowRemapPending",
    ),
    "relevant-fields-no-section-head.txt": (
        "given-node",
        0,
        None,
        {
            "remap_pending": 1.0,
            "remap_correctable_rows": 12.0,
            "remap_uncorrectable_rows": 0.0,
            "remap_failure": 0.0,
        },
        "GpuRowRemapPending",
    ),
    "indented-remapped-rows.txt": (
        "given-node",
        0,
        None,
        {"remap_pending": 1.0, "remap_uncorrectable_rows": 4.0, "remap_correctable_rows": 0.0},
        "GpuRowRemapPending",
    ),
}


def _replay(tmp_path: Path, src: Path, *extra: str) -> tuple[Path, dict[str, Any]]:
    paste = tmp_path / "paste.txt"
    shutil.copyfile(src, paste)
    db = tmp_path / "t.duckdb"
    rc = run_cli("replay", str(paste), "--db", str(db), "--node", "given-node", "--at", AT, "--json", *extra)
    assert rc.returncode == 0, rc.stderr
    return db, json.loads(rc.stdout)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_pasted_shape_replays_to_its_samples_and_alert(tmp_path: Path, name: str) -> None:
    node, gpu, pci, want, rule = SHAPES[name]
    db, out = _replay(tmp_path, P / name)
    (f,) = out["files"]
    assert (f["format"], f["status"], f["issues"], f["nodes"]) == ("nvidia-smi-text", "read", 0, [node]), f
    if node != "given-node":  # the file's own host wins over --node, and the replay says so
        assert f"the prompt line names host {node}: stored as {node}, not --node given-node" in f["notes"]
    with Store(db) as s:
        rows = s.query("SELECT node, gpu, metric, value FROM samples")
        gpus = s.query("SELECT node, gpu, pci_bus_id FROM gpus")
    # one GPU: no phantom one from a fence, a comment or an elision
    assert {(r["node"], r["gpu"]) for r in rows} == {(node, gpu)}
    got = {r["metric"]: r["value"] for r in rows}
    assert {m: got.get(m) for m in want} == want
    if pci is not None:
        assert gpus == [{"node": node, "gpu": gpu, "pci_bus_id": canonical_pci_bus_id(pci)}]
    alerts = json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)
    assert [(a["rule"], a["node"], a["gpu"], a["state"]) for a in alerts] == [(rule, node, gpu, "firing")]


def test_the_silent_miss_fires_and_ecc_unknown_error_is_no_value(tmp_path: Path) -> None:
    """`Pending : Yes  <===` was read as 8 samples, 'findings: none', 'alerts: none': remap_pending is now stored,
    and the `Unknown Error` / `N/A` values beside it are nvidia-smi's words for no value, not unreadable ones."""
    db, out = _replay(tmp_path, P / "annotated-ecc-row-remapper.txt")
    assert out["gpus"][0]["findings"] == ["remap_pending"] and out["files"][0]["first_issue"] is None
    assert out["files"][0]["notes"] == [
        f"GPU {canonical_pci_bus_id('00000000:52:00.0')}: nvidia-smi printed Unknown Error for ecc_mode/current, ecc_mode/pending"
        " (NVML could not read them; nothing stored for them)"
    ]
    with Store(db) as s:
        metrics = {r["metric"] for r in s.query("SELECT metric FROM samples")}
    assert not {m for m in metrics if m.startswith("ecc_")}  # ECC Mode: Unknown Error, every counter N/A
    assert [a["summary"] for a in out["alerts"]] == [
        "GPU 0 on given-node: a row remap is pending; it takes effect at the next GPU reset"
    ]


def test_both_pastes_of_one_host_are_one_gpu(tmp_path: Path) -> None:
    """The ECC excerpt (no GPU header) and the ROW_REMAPPER one (GPU 00000000:55:00.0) of `-i 1` on gpu-node-a,
    saved under any names in one directory, are the same GPU: one memory incident, the DBE's alert with the
    pending remap in it."""
    rec = tmp_path / "rec"
    rec.mkdir()
    shutil.copyfile(P / "prompt-ecc-blackwell.txt", rec / "a.txt")
    shutil.copyfile(P / "prompt-row-remapper-no-banner.txt", rec / "b.log")
    db = tmp_path / "t.duckdb"
    rc = run_cli("replay", str(rec), "--db", str(db), "--at", AT, "--json")
    assert rc.returncode == 0, rc.stderr
    out = json.loads(rc.stdout)
    assert [(g["node"], g["gpu"]) for g in out["gpus"]] == [("gpu-node-a", 1)]
    assert [(a["category"], a["gpu"]) for a in out["alerts"]] == [("ecc", 1)]
    assert out["alerts"][0]["summary"].endswith("(with GpuRowRemapPending)")


def _with_value(tmp_path: Path, old: str, new: str) -> tuple[Path, int]:
    text = (P / "annotated-ecc-row-remapper.txt").read_text()
    assert old in text
    lines = text.replace(old, new).splitlines()
    lineno = next(i for i, ln in enumerate(lines, 1) if new in ln)
    bad = tmp_path / "paste.txt"
    bad.write_text("\n".join(lines) + "\n")
    return bad, lineno


def test_a_value_that_cannot_be_read_is_a_file_line_issue_and_strict_fails(tmp_path: Path) -> None:
    bad, lineno = _with_value(tmp_path, "Yes                      <===", "Ja")
    db = tmp_path / "t.duckdb"
    rc = run_cli("replay", str(bad), "--db", str(db), "--node", "n1", "--json")
    assert rc.returncode == 0, rc.stderr
    (f,) = json.loads(rc.stdout)["files"]
    assert f["issues"] == 1 and f["first_issue"].startswith(f"{bad}:{lineno}: ")
    assert "remapped_rows/pending = 'Ja'" in f["first_issue"] and "remap_pending" in f["first_issue"]
    strict = run_cli("replay", str(bad), "--db", str(tmp_path / "s.duckdb"), "--node", "n1", "--strict")
    assert strict.returncode == 3
    assert f"{bad}:{lineno}:" in strict.stderr and "remapped_rows/pending" in strict.stderr


def test_an_unreadable_clock_event_reason_is_an_issue_not_not_active() -> None:
    lines = ["GPU 00000000:19:00.0", "    Clocks Event Reasons", "        HW Slowdown          : Actve"]
    issues: list[ParseIssue] = []
    assert "clock_event_reasons" not in gpu_samples(parse_text(lines).gpus[0], issues, "p.txt")
    assert [(i.path, i.line) for i in issues] == [("p.txt", 3)]


def test_prompt_lines() -> None:
    p = prompt("my-user@gpu-node-a:~$ nvidia-smi -i 1 -q -d ECC")
    assert p is not None and (p.host, p.gpus, p.query) == ("gpu-node-a", (1,), True)
    p = prompt("[root@dgx-07 ~]# sudo nvidia-smi -q --id=0,3")
    assert p is not None and (p.host, p.gpus, p.query) == ("dgx-07", (0, 3), True)
    p = prompt("# nvidia-smi -q -d ECC,ROW_REMAPPER -i 52:00.0")
    assert p is not None and (p.host, p.gpus, p.query) == (None, (), True)
    p = prompt("(base) alice@node3:/data$ nvidia-smi --query-gpu=name --format=csv")
    assert p is not None and (p.host, p.query) == ("node3", False)
    assert prompt("    Pending                           : Yes") is None
    assert prompt("Driver Version                            : 550.90.07") is None


def test_annotations() -> None:
    assert strip_annotation("Yes                      <===") == "Yes"
    assert strip_annotation("No        # <- the terminal flag") == "No"
    assert strip_annotation("1 bank(s)  <-- this one") == "1 bank(s)"
    assert strip_annotation("00000000:52:00.0") == "00000000:52:00.0"
    assert strip_annotation("NVIDIA A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"


def test_identify_says_what_the_paste_looks_like(tmp_path: Path) -> None:
    paste = tmp_path / "paste.txt"
    shutil.copyfile(P / "prompt-ecc-blackwell.txt", paste)
    ident = identify_why(paste)
    assert ident.format == "nvidia-smi-text"
    assert ident.shape == "nvidia-smi -q (pasted: Markdown fence, prompt line, no banner)"


def test_a_write_up_around_a_paste_stays_documentation() -> None:
    """The paste inside a write-up's prose is not a dump: the file stays what it is (the sniffer wants most lines
    to be nvidia-smi's own)."""
    prose = [
        "Here we can see that Xid 63 corresponds to an ECC page retirement or row remapping recording event,",
        "which may have three causes: a hardware error, a driver error or a corrupted framebuffer in the GPU.",
        "This error means that one of the memory rows is malfunctioning and will be replaced at the next reset.",
    ] * 4
    paste = (P / "excerpt-elided-no-banner.txt").read_text().splitlines()
    assert sniff(paste) is not None
    assert sniff(prose[:6] + paste + prose) is None


def test_xml_pasted_after_a_prompt_line_in_a_fence(tmp_path: Path) -> None:
    """`-q -x` pasted as people paste it (the real H200 dump, after a prompt line, inside a fence): the document is
    read, the node is the prompt's host; it was one malformed line and nothing stored."""
    xml = (FIXTURES / "samples" / "h200-recording" / "nvidia-smi-q.xml").read_text()
    paste = tmp_path / "wrapped"
    paste.write_text("```console\nroot@h200-node:~# nvidia-smi -q -x\n" + xml + "```\n")
    db, out = _replay(tmp_path, paste)
    (f,) = out["files"]
    assert (f["format"], f["status"], f["issues"], f["nodes"]) == (
        "nvidia-smi-xml",
        "read",
        0,
        ["h200-node"],
    ), f
    with Store(db) as s:
        assert s.query("SELECT node, gpu, model FROM gpus") == [
            {"node": "h200-node", "gpu": 0, "model": "NVIDIA H200"}
        ]
        assert s.scalar("SELECT count(*) FROM samples WHERE node = 'h200-node'") == 30


@pytest.mark.parametrize(
    ("name", "want", "rules"),
    [
        ("nvidia-smi-q-ecc-sram-uncorrectable-excerpt.txt", {"ecc_dbe_volatile": 1.0}, ["GpuDoubleBitError"]),
        (
            "nvidia-smi-q-retired-pages-excerpt.txt",
            {"retired_pages_pending": 1.0, "retired_pages_sbe": 2.0},
            [],
        ),
    ],
)
def test_the_older_excerpts_replay_too(
    tmp_path: Path, name: str, want: dict[str, float], rules: list[str]
) -> None:
    """The excerpts fixtures/samples/nvidia-smi held for the parser alone (skipped by replay: 'not a format
    fleettool reads') are read end to end: an indented block with no banner and no GPU header."""
    db, out = _replay(tmp_path, FIXTURES / "samples" / "nvidia-smi" / name)
    assert out["files"][0]["shape"] == "nvidia-smi -q (pasted: no banner)"
    with Store(db) as s:
        got = {r["metric"]: r["value"] for r in s.query("SELECT metric, value FROM samples")}
    assert {m: got.get(m) for m in want} == want
    assert [a["rule"] for a in json.loads(run_cli("alerts", "--db", str(db), "--json").stdout)] == rules


def test_a_block_with_no_reading_in_it_says_so_and_exits_3(tmp_path: Path) -> None:
    """Without `Remapping Failure Occurred`, the head-less block's keys belong to no section fleettool reads: the
    replay says which value of which line it could not place and exits 3; it was "0 samples", "alerts: none", 0."""
    text = (P / "relevant-fields-no-section-head.txt").read_text()
    lines = [ln for ln in text.splitlines() if "Remapping Failure Occurred" not in ln]
    paste = tmp_path / "paste.txt"
    paste.write_text("\n".join(lines) + "\n")
    rc = run_cli("replay", str(paste), "--db", str(tmp_path / "t.duckdb"), "--node", "n1")
    assert rc.returncode == 3, rc.stdout
    assert (
        "GPU index 0: 6 values, none a reading fleettool stores (the first: pending at line 8): not stored"
        in (rc.stderr)
    )


_PIECES = st.sampled_from(
    [
        "```",
        "$ nvidia-smi -q -i 1",
        "GPU 00000000:55:00.0",
        "    Remapped Rows",
        "        Pending : Yes  <===",
        "[...]",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=60)), max_size=25))
def test_fuzz_pasted_lines(lines: list[str]) -> None:
    """Any mix of paste lines and junk: sniffed, parsed and judged without an exception; every issue names a line
    of the input."""
    sniff(lines)
    for ln in lines:
        prompt(ln)
        strip_annotation(ln)
    rep = parse_text(lines, path="p")
    issues: list[ParseIssue] = []
    for g in rep.gpus:
        gpu_samples(g, issues, "p")
    assert all(0 <= i.line <= len(lines) for i in rep.issues + issues)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_xml_document(text: str) -> None:
    """The document found in any text is a piece of it, with the count of the lines before it."""
    doc, before, _ = xml_document(text)
    assert doc in text
    assert before == text[: text.index(doc)].count("\n")
