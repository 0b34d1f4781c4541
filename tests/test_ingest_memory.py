"""A kernel log streams into the store in bounded chunks (issue 30, "a 170k-line storm replays in at most 250 MiB"):
its events are converted, checked for duplicates and inserted EVENTS_PER_CHUNK at a time, never the whole file at
once (one 48.6k-line storm file peaked at 266 MiB in the single INSERT of all its rows). Chunks change nothing that
is stored: the same events table, row for row and in order, the same GPUs and the same counts as reading the file
in one piece, with lines twice in one file, lines already stored from another file (timed and boot-relative),
SXid follow-on lines that fold into a first line in an earlier chunk, and announcements after the events they name.

The peak memory itself is measured by bench/noise/run.py (teardown-storm) and bench/xid_storm_memory.py, not here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleettool.ingest import read_kernel
from fleettool.ingest.report import IngestOptions
from fleettool.ingest.run import ingest
from fleettool.store import Store

SXID = Path(__file__).parent.parent / "fixtures" / "formats" / "kmsg" / "sxid-follow-on.txt"  # a real capture
PCIS = ["0008:01:00", "0009:01:00", "0018:01:00", "0019:01:00"]
UUIDS = [
    "GPU-260eb7e2-b62c-ca9d-8303-54124a538ae1",
    "GPU-117bd4d8-867f-8d72-9a8c-0b36c789275c",
    "GPU-1aa2d00c-af46-cfdf-52bc-df9a4afdc6bd",
    "GPU-3c5e0f4a-1b2d-4e6f-8a9b-0c1d2e3f4a5b",
]


def _journal(node: str, n: int) -> list[str]:
    """`journalctl -k -o short-iso` lines of a teardown storm: n XID 45s, three a second, every 10th line
    printed twice in its second, the GPUs announced (with a serial line) only after their first XIDs."""
    out: list[str] = []
    for i in range(n):
        stamp = f"2026-11-02T00:{i // 180:02d}:{i // 3 % 60:02d}+0000 {node} kernel: "
        line = stamp + f"NVRM: Xid (PCI:{PCIS[i % 4]}): 45, pid={1000 + i}, name=python3, Ch {i % 64:08x}"
        out.append(line)
        if i % 10 == 0:
            out.append(line)
        if i == n // 2:
            for pci, uuid in zip(PCIS, UUIDS, strict=True):
                out.append(stamp + f"NVRM: GPU at PCI:{pci}: {uuid}")
                out.append(stamp + f"NVRM: GPU Board Serial Number: 1652{pci[:4]}01")
    return out


def _dmesg() -> list[str]:
    """Plain `dmesg` (uptimes only: stored boot-relative), the real SXid capture's lines spread among XIDs so
    that a first line and its follow-on lines fall in different chunks."""
    sx = SXID.read_text().splitlines()
    out: list[str] = []
    for i in range(120):
        out.append(f"[{6781700 + i}.000100] NVRM: Xid (PCI:0000:91:00): 13, Graphics Exception: ESR 0x{i:x}")
        if i % 12 == 5:
            out.append(sx[(i // 12) % len(sx)])
    # a first line whose follow-on comes 70 lines later: the collector lets the SXid go 64 lines on, so the
    # follow-on is not in its event (an event converted at its chunk's end instead would take it)
    out.append(sx[2])
    out.extend(
        f"[{6781900 + i}.000100] NVRM: Xid (PCI:0000:91:00): 13, Graphics Exception: late" for i in range(70)
    )
    out.append(sx[4])
    return out + sx


def _recording(root: Path) -> Path:
    rec = root / "rec"
    rec.mkdir()
    storm = _journal("gb-001", 900)
    (rec / "a-kernel.log").write_text("\n".join(storm) + "\n")
    (rec / "b-dmesg.txt").write_text("\n".join(_dmesg()) + "\n")
    (rec / "c-kern-copy.log").write_text("\n".join(storm[100:400]) + "\n")  # the same lines from another file
    (rec / "d-dmesg-again.txt").write_text("\n".join(_dmesg()[:80]) + "\n")  # boot-relative lines again
    return rec


def _replay(
    root: Path, rec: Path, name: str
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[Any]]:
    """Read `rec` into a fresh store: the events (every column, in rowid order), the GPUs, each file's counts."""
    with Store(root / f"{name}.duckdb") as store:
        reports = ingest(store, rec, IngestOptions(node="gb-001"))
        events = store.rows(
            "SELECT ts, node, gpu, uuid, pci_bus_id, kind, code, message, raw, source, CAST(detail AS VARCHAR) "
            "FROM events ORDER BY rowid"
        )
        gpus = store.rows("SELECT node, gpu, uuid, pci_bus_id, serial FROM gpus ORDER BY ALL")
    counts = [
        (
            Path(r.path).name,
            r.events,
            r.duplicates,
            r.identities,
            r.boot_relative,
            r.untimed,
            r.t_min,
            r.t_max,
        )
        for r in reports
    ]
    return events, gpus, counts


def test_a_kernel_log_is_inserted_in_chunks_no_larger_than_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "kernel.log").write_text("\n".join(_journal("gb-001", 900)) + "\n")
    monkeypatch.setattr(read_kernel, "EVENTS_PER_CHUNK", 64, raising=False)
    sizes: list[int] = []
    with Store(tmp_path / "s.duckdb") as store:
        write = store.write_events

        def counted(events: Any) -> int:  # the real insert, its size noted
            evs = list(events)
            sizes.append(len(evs))
            return write(evs)

        monkeypatch.setattr(store, "write_events", counted)
        (rep,) = ingest(store, rec, IngestOptions())
        stored = store.scalar("SELECT count(*) FROM events")
    assert rep.events == stored == 990  # 900 lines and the 90 printed twice in their second
    assert sum(sizes) == 990 and max(sizes) <= 64, sizes


def test_chunks_store_exactly_what_one_pass_over_each_file_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _recording(tmp_path)
    monkeypatch.setattr(read_kernel, "EVENTS_PER_CHUNK", 10**9, raising=False)
    whole = _replay(tmp_path, rec, "whole")
    for size in (7, 64):
        monkeypatch.setattr(read_kernel, "EVENTS_PER_CHUNK", size)
        assert _replay(tmp_path, rec, f"chunks{size}") == whole, size
    events, gpus, counts = whole
    by_file = {c[0]: c for c in counts}
    # what the fixture holds: the copy and the second dmesg add nothing, the lines twice in a file stay twice
    assert by_file["a-kernel.log"][1:4] == (990, 0, 4)
    assert by_file["c-kern-copy.log"][1:3] == (0, 300)  # storm lines 100-399, each already stored
    again_xids = sum(" NVRM: Xid " in ln for ln in _dmesg()[:80])
    assert by_file["d-dmesg-again.txt"][2] >= again_xids > 0  # its boot-relative XIDs were all stored by b
    sxids = [e for e in events if e[5] == "sxid"]
    assert any('"sxid_lines":2' in (e[10] or "").replace(" ", "") for e in sxids)  # a follow-on folded
    xids = [e for e in events if e[5] == "xid" and e[1] == "gb-001" and e[4] is not None and e[0] is not None]
    assert xids and all(e[3] is not None for e in xids)  # every XID has the UUID announced later in its file
    assert len(gpus) == 4
