"""Kernel-log parser: every line form of fixtures/samples/kmsg, checked value by value; fuzzed for invariants
(records <= lines, times finite and in range), not just for not raising."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleettool.formats.kmsg import KernelLogParser, KernelRecord, parse_kernel_log
from fleettool.formats.kmsg_entries import parse_journal_entry, parse_kmsg_record
from fleettool.formats.kmsg_prefix import month_number, parse_iso
from tests.conftest import FIXTURES
from tests.kmsg_cases import CASES, ts

SAMPLES = FIXTURES / "samples" / "kmsg" / "xid-lines.txt"


def one(line: str, **kw: object):  # type: ignore[no-untyped-def]
    recs = parse_kernel_log([line], **kw)  # type: ignore[arg-type]
    assert len(recs) == 1, f"expected one record from {line!r}, got {recs}"
    return recs[0]


@pytest.mark.parametrize(("line", "kind", "code", "pci", "when", "host", "detail"), CASES)
def test_line_forms(
    line: str,
    kind: str,
    code: int | None,
    pci: str | None,
    when: float | None,
    host: str | None,
    detail: dict[str, object],
) -> None:
    rec = one(line, year=2024)
    assert rec.kind == kind
    assert rec.code == code
    assert rec.pci_bus_id == pci
    if when is None:
        assert rec.ts is None
    else:
        assert rec.ts == pytest.approx(when, abs=1e-6)
    assert rec.host == host
    for k, v in detail.items():
        assert rec.detail.get(k) == v, (k, rec.detail)


CODES_IN_SAMPLES = [13, 31, 32, 43, 63, 64, 69, 74, 79, 94, 95, 109, 119, 120, 137, 144, 145, 149, 154]


def test_every_sample_line_is_one_xid_event() -> None:
    lines = SAMPLES.read_text().splitlines()
    recs = parse_kernel_log(lines, year=2024)
    assert len(recs) == len([ln for ln in lines if ln.strip()]) == 61
    assert all(r.kind == "xid" for r in recs)
    codes = sorted({r.code for r in recs if r.code is not None})
    assert codes == CODES_IN_SAMPLES
    assert sum(1 for r in recs if r.code == 119) == 10
    domains = {r.pci_bus_id.split(":")[0] for r in recs if r.pci_bus_id}
    assert {"0000", "0008", "0009", "0018", "0019", "000f", "0002", "0003"} <= domains


def test_multiline_fallen_off_the_bus_and_serial_follow_their_first_line() -> None:
    recs = parse_kernel_log(
        [
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
            "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
            "               NVRM: fallen off the bus and is not responding to commands.",
            "NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
            "NVRM: GPU Board Serial Number: 1650124014249",
        ]
    )
    assert [r.kind for r in recs] == ["fell-off-bus", "gpu-announce", "gpu-announce"]
    assert recs[0].pci_bus_id == "0000:b3:00"
    assert recs[2].serial == "1650124014249" and recs[2].uuid == "GPU-509665ad-b600-ac93-3616-d754b23d636d"


def test_other_kernel_lines_are_not_gpu_events_even_on_a_gpu_bus() -> None:
    lines = [
        "2026-11-30T00:08:03+0000 gpu-30 kernel: mlx5_core 0000:ab:00.1: mlx5e_ethtool_set_link_ksettings: link up",
        "2026-11-30T00:44:29+0000 gpu-03 kernel: EXT4-fs (nvme0n1p2): re-mounted. Opts: (null).",
        "[  5.1] pci 0000:ab:00.0: [10de:2335] type 00 class 0x030200",
        "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context",
    ]
    recs = parse_kernel_log(lines)
    # only the NIC driver's line is a record, and a NIC one (formats/nic_lines.py): its PCI function kept, no GPU
    assert [(r.kind, r.pci_bus_id, r.code, r.uuid) for r in recs] == [("nic", "0000:ab:00.1", None, None)]


def test_uptime_lines_take_wall_time_from_a_line_that_carries_both() -> None:
    p = KernelLogParser(year=2024)
    a = p.feed("May 6 00:38:27 alex kernel: [ 4909.922970] NVRM: Xid (0000:01:00): 13, x")
    b = p.feed("[ 4919.922970] NVRM: Xid (PCI:0000:01:00): 31, y")
    assert a is not None and b is not None and b.ts == pytest.approx(a.ts + 10.0)  # type: ignore[operator]
    c = p.feed("[    3.000000] NVRM: Xid (PCI:0000:01:00): 31, after a reboot")
    assert c is not None and c.ts is None  # uptime went back: the old boot time no longer holds


def test_syslog_year_rolls_over_at_new_year() -> None:
    recs = parse_kernel_log(
        [
            "Dec 31 23:59:59 h kernel: NVRM: Xid (PCI:0000:01:00): 13, a",
            "Jan  1 00:00:01 h kernel: NVRM: Xid (PCI:0000:01:00): 13, b",
        ],
        year=2025,
    )
    assert recs[1].ts == ts(2026, 1, 1, 0, 0, 1)


def test_month_names_and_iso() -> None:
    assert month_number("kwi") == 4 and month_number("Mär") == 3 and month_number("déc.") == 12
    assert month_number("4月") == 4 and month_number("xyz") is None
    assert parse_iso("2026-11-30T00:16:39+0000") == ts(2026, 11, 30, 0, 16, 39)
    assert parse_iso("2025-01-21T05:41:44,5+01:00") == ts(2025, 1, 21, 4, 41, 44) + 0.5


def test_dev_kmsg_records() -> None:
    assert parse_kmsg_record("4,1234,5678901,-;NVRM: Xid (PCI:0000:01:00): 79, x") == (
        4,
        1234,
        5678901,
        "NVRM: Xid (PCI:0000:01:00): 79, x",
    )
    assert parse_kmsg_record(" SUBSYSTEM=pci") is None
    assert parse_kmsg_record("garbage") is None


def assert_invariants(lines: list[str], recs: list[KernelRecord]) -> None:
    """What every parse must hold, whatever the input: at most one record per line, each naming a line that
    was fed and carrying it; times finite and in range (wall 1970..2200, uptime >= 0); a known kind."""
    assert len(recs) <= len(lines)
    assert [r.lineno for r in recs] == sorted({r.lineno for r in recs})
    for r in recs:
        assert 1 <= r.lineno <= len(lines)
        assert r.kind in (
            "xid",
            "sxid",
            "fell-off-bus",
            "gsp-timeout",
            "gsp-rate-limit",
            "gpu-announce",
            "boot",
        )
        if r.ts is not None:
            assert math.isfinite(r.ts) and 0 <= r.ts < 7258118400
        if r.uptime is not None:
            assert math.isfinite(r.uptime) and r.uptime >= 0
        if r.kind in ("xid", "sxid"):
            assert r.code is not None and r.code >= 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=20))
def test_fuzz_invariants_any_text(lines: list[str]) -> None:
    assert_invariants(lines, parse_kernel_log(lines, year=2024))


_PREFIXES = st.sampled_from(
    [
        "",
        "[ 12.5] ",
        "[99999999999999999999999999999999999.5] ",
        "[Fri Aug 30 11:43:09 2024] ",
        "[Fri Feb 31 99:99:99 0000] ",
        "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 ",
        "kern  :warn  : 9999-99-99T99:99:99,9999999999999999999999999+99:99 ",
        "Dec  2 11:38:47 worker4 kernel: ",
        "Dec 32 25:61:61 worker4 kernel: [  219.470994] ",
        "2026-12-02T11:38:47.548779+00:00 worker4 kernel: ",
        "192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: ",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            _PREFIXES,
            st.text(alphabet="NVRM: Xid(PCI0123456789abcdef,)-[]. pidname=<>'GUkernlSnvswitch", max_size=120),
        ),
        max_size=12,
    )
)
def test_fuzz_invariants_xid_like(parts: list[tuple[str, str]]) -> None:
    lines = [p + "NVRM: " + b for p, b in parts] + [p + "nvidia-nvswitch0: SXid (" + b for p, b in parts]
    recs = parse_kernel_log(lines, year=2024)
    assert_invariants(lines, recs)
    assert sum(1 for r in recs if r.kind in ("xid", "sxid")) <= len(lines)


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=120),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
)
def test_fuzz_feed_message_keeps_times_finite(msg: str, ts: float | None, up: float | None) -> None:
    p = KernelLogParser()
    lines = ["NVRM: Xid (PCI:0000:01:00): 79, " + msg, msg]
    recs = [r for r in (p.feed_message(m, ts=ts, uptime=up, host="h") for m in lines) if r is not None]
    assert_invariants(lines, recs)
    assert recs and recs[0].code == 79 and recs[0].host == "h"


def test_absurd_stamps_leave_the_line_without_a_time_not_without_its_record() -> None:
    recs = parse_kernel_log(
        [
            "[" + "9" * 400 + ".5] NVRM: Xid (PCI:0000:01:00): 79, a",
            "kern  :warn  : 2025-01-21T04:41:44," + "9" * 5000 + "+00:00 NVRM: Xid (PCI:0000:01:00): 79, b",
        ]
    )
    assert [r.code for r in recs] == [79, 79]
    assert recs[0].ts is None and recs[0].uptime is None
    assert recs[1].ts == pytest.approx(ts(2025, 1, 21, 4, 41, 44) + 0.999999999)


def test_feed_message_takes_the_given_time_and_host() -> None:
    p = KernelLogParser()
    a = p.feed_message(
        "NVRM: Xid (PCI:0000:91:00): 79, GPU has fallen off the bus.", ts=1.5e9, uptime=20.0, host="n1"
    )
    assert a is not None and (a.ts, a.uptime, a.host, a.code, a.pci_bus_id) == (
        1.5e9,
        20.0,
        "n1",
        79,
        "0000:91:00",
    )
    b = p.feed_message("NVRM: Xid (PCI:0000:91:00): 13, x", ts=None, uptime=30.0, host=None)
    assert b is not None and b.ts == 1.5e9 + 10.0  # the boot time learnt from the first applies
    c = KernelLogParser().feed_message("NVRM: Xid (PCI:0000:91:00): 13, x", ts=None, uptime=30.0, host=None)
    assert c is not None and c.ts is None and c.uptime == 30.0  # a /dev/kmsg record alone: boot-relative
    assert p.feed_message("EXT4-fs (nvme0n1p2): re-mounted.", ts=1.5e9, uptime=1.0, host="n1") is None


def test_journal_entries() -> None:
    line = (
        '{"__REALTIME_TIMESTAMP":"1764675527548779","__MONOTONIC_TIMESTAMP":"226137092",'
        '"_SOURCE_MONOTONIC_TIMESTAMP":"226135892","_HOSTNAME":"worker4","_TRANSPORT":"kernel",'
        '"MESSAGE":"NVRM: Xid (PCI:0000:91:00): 79, x"}'
    )
    assert parse_journal_entry(line) == (
        "NVRM: Xid (PCI:0000:91:00): 79, x",
        1764675527.548779,
        226.135892,
        "worker4",
    )
    as_bytes = '{"MESSAGE":[78,86,82,77,58,32,255],"__REALTIME_TIMESTAMP":"x"}'
    assert parse_journal_entry(as_bytes) == ("NVRM: \ufffd", None, None, None)
    assert parse_journal_entry('{"MESSAGE": 5}') is None
    assert parse_journal_entry("[1.0] NVRM: not json") is None
    huge = '{"MESSAGE":"m","__REALTIME_TIMESTAMP":"99999999999999999999999999"}'
    assert parse_journal_entry(huge) == ("m", None, None, None)


def test_repeated_xid_text_parses_the_same_with_its_own_time() -> None:
    body = "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, name=a b, Contained: CE User Channel (0x9)."
    recs = parse_kernel_log([f"[{10 + i}.5] {body}" for i in range(5)])
    assert [r.uptime for r in recs] == [10.5, 11.5, 12.5, 13.5, 14.5]
    assert all(r.detail["uptime"] == r.uptime for r in recs)
    first = {k: v for k, v in recs[0].detail.items() if k != "uptime"}
    assert all({k: v for k, v in r.detail.items() if k != "uptime"} == first for r in recs)
    assert first == {"gpu_instance": 5, "pid": 7194, "process": "a b"}
    recs[0].detail["pid"] = 1  # a caller changing one record must not change the next
    assert parse_kernel_log([body])[0].detail["pid"] == 7194


def test_iso_stamps_of_days_that_do_not_exist_are_no_time() -> None:
    assert parse_iso("2024-02-30T00:00:00Z") is None  # not 1 March
    assert parse_iso("kern  :warn  : 2024-02-29T00:00:00,5+00:00 NVRM: x") == ts(2024, 2, 29, 0, 0, 0) + 0.5
    (rec,) = parse_kernel_log(
        ["kern  :warn  : 2024-02-30T00:00:00,1+00:00 NVRM: Xid (PCI:0000:01:00): 79, x"]
    )
    assert rec.code == 79 and rec.ts is None
