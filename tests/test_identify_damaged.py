"""Damaged and hostile recording files: cut gzip, OpenMetrics without # EOF, nvidia-smi XML and nccl-tests tables
cut short are read as partial with what they kept; gzip and XML bombs are refused; corrupt gzip is named; and
any bytes at all are either read or skipped with a reason (fuzzed). End to end through `fleettool replay`.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store
from tests.conftest import SCENARIOS, run_cli
from tests.identify_helpers import KMSG, SAMPLES, replay_json


def gz_cut(src: bytes, frac: float) -> bytes:
    z = gzip.compress(src)
    return z[: int(len(z) * frac)]


def test_truncated_gzip_is_partial_with_what_it_kept(tmp_path: Path) -> None:
    text = (KMSG / "kern.log-rfc3339").read_bytes() * 2000
    f = tmp_path / "kern.log.gz"
    f.write_bytes(gz_cut(text, 0.6))
    out = replay_json(f, tmp_path / "t.duckdb")
    (rep,) = out["files"]
    assert rep["status"] == "partial" and rep["events"] > 0
    assert rep["partial"][0].startswith("gzip stream cut short after")
    r = run_cli("replay", str(f), "--db", str(tmp_path / "u.duckdb"), "--strict")
    assert r.returncode == 3 and "gzip stream cut short" in r.stderr


def test_openmetrics_without_eof_is_partial(tmp_path: Path) -> None:
    body = gzip.decompress((SCENARIOS / "app-xid" / "dcgm-exporter.om.gz").read_bytes())
    cut = body[: body.index(b"\n", len(body) // 2) + 1]
    f = tmp_path / "scrape"
    f.write_bytes(cut)
    out = replay_json(f, tmp_path / "t.duckdb")
    (rep,) = out["files"]
    assert rep["status"] == "partial" and rep["rows"] > 1000
    assert rep["partial"] == [
        f"no '# EOF' (cut short?): kept {rep['rows']} samples up to the last whole line"
    ]


def test_truncated_nvidia_smi_xml_keeps_its_whole_gpus(tmp_path: Path) -> None:
    xml = (SAMPLES / "h200-recording" / "nvidia-smi-q.xml").read_text()
    start, end = xml.index("<gpu "), xml.index("</gpu>") + len("</gpu>")
    gpu = xml[start:end]
    two = xml[:end] + "\n" + gpu.replace("00000000:00:06.0", "00000000:00:07.0") + xml[end:]
    f = tmp_path / "smi"
    f.write_text(two[: two.rindex("<gpu ") + len(gpu) // 2])
    out = replay_json(f, tmp_path / "t.duckdb", "--node", "h200")
    (rep,) = out["files"]
    assert rep["status"] == "partial" and rep["rows"] > 0
    assert "XML cut short" in rep["partial"][0] and "kept 1 complete <gpu> sections" in rep["partial"][0]


def test_nccl_table_cut_before_its_footer_is_partial(tmp_path: Path) -> None:
    text = (SAMPLES / "nccl-tests" / "nccl-tests-2.19.6-h200x1.txt").read_text()
    f = tmp_path / "job.out"
    f.write_text(text[: text.index("# Out of bounds")])
    out = replay_json(f, tmp_path / "t.duckdb")
    (rep,) = out["files"]
    assert rep["status"] == "partial" and rep["runs"] == 1
    assert "cut before its footer" in rep["partial"][0]


# -- hostile inputs: bounded reads --------------------------------------------------------------------------
def test_gzip_bomb_is_refused_past_the_cap(tmp_path: Path) -> None:
    line = b"[    1.000000] " + b"x" * 1000 + b"\n"
    member = gzip.compress(line * (16 << 10), compresslevel=9)  # 16 MiB of dmesg lines in ~50 KiB
    f = tmp_path / "kern.log.gz"
    f.write_bytes(member * 8)  # 128 MiB decompressed from a few hundred KiB
    r = run_cli("replay", str(f), "--db", str(tmp_path / "t.duckdb"), "--max-file-size", "64M", "--json")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert (
        f"fleettool: {f}: decompresses to more than 64 MiB (a gzip bomb?); refused, nothing stored"
        in r.stderr
    )
    assert json.loads(r.stdout)["files"][0]["status"] == "failed"


def test_xml_bomb_is_refused_without_expansion(tmp_path: Path) -> None:
    lol = ['<!ENTITY l0 "lol">'] + [
        f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10}">' for i in range(1, 10)
    ]
    doc = f'<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n{"".join(lol)}\n]>\n<nvidia_smi_log><gpu id="0">&l9;</gpu></nvidia_smi_log>\n'
    f = tmp_path / "smi.xml"
    f.write_text(doc)
    r = run_cli("replay", str(f), "--db", str(tmp_path / "t.duckdb"))
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert r.stderr == (
        f"fleettool: {f}: XML declares entities (<!ENTITY>); nvidia-smi never does: refused, not expanded\n"
    )


def test_corrupt_gzip_is_named(tmp_path: Path) -> None:
    z = bytearray(gzip.compress((KMSG / "kern.log-rfc3339").read_bytes() * 500))
    z[len(z) // 2 : len(z) // 2 + 64] = b"\xff" * 64
    f = tmp_path / "k.gz"
    f.write_bytes(bytes(z))
    out = replay_json(f, tmp_path / "t.duckdb")
    assert out["files"][0]["status"] == "partial" and "corrupt gzip data" in out["files"][0]["partial"][0]


# -- fuzz: whatever the bytes, each file is read or skipped with a reason ----------------------------------
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.text(max_size=300).map(str.encode),
            st.sampled_from(
                [
                    (KMSG / "dmesg.txt").read_bytes()[:200],
                    b"# TYPE x gauge\nx 1\n",
                    b'{"MESSAGE": "NVRM: Xid (PCI:0000:01:00): 79, x", "__REALTIME_TIMESTAMP": "9e99"}\n',
                    b"6,1,99999999999999999999999,-;NVRM: Xid (PCI:0000:01:00): 79, x\n",
                    b"[99999999999999999999999999.5] NVRM: Xid (PCI:0000:01:00): 79, x\n",
                ]
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)
def test_fuzz_every_file_is_read_or_skipped_with_a_reason(
    tmp_path_factory, blobs: list[bytes], gz: bool
) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("fuzz")
    for i, b in enumerate(blobs):
        (d / f"f{i}").write_bytes(zlib.compress(b) if gz and i == 0 else b)
    with Store(":memory:") as s:
        reps = ingest(s, d, IngestOptions(quiet=True))
        ts = s.query("SELECT epoch_us(ts) / 1e6 AS t FROM events WHERE ts IS NOT NULL")
    assert len(reps) == len(blobs)
    for r in reps:
        assert r.status in ("read", "partial", "skipped", "failed", "ignored")
        if r.status in ("skipped", "failed", "ignored"):
            assert r.skipped, r
        if r.status == "partial":
            assert r.partial
    assert all(0 <= row["t"] < 7258118400 for row in ts)
