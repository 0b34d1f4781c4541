"""fleettool.units: the one grammar for durations, sizes and ISO times."""

from __future__ import annotations

import calendar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleettool.units import parse_duration, parse_iso, parse_size


@pytest.mark.parametrize(
    ("text", "secs"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("1.5", 1.5),
        ("90s", 90.0),
        ("250ms", 0.25),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        ("2w", 1209600.0),
        (" 10s ", 10.0),
        ("1.5h", 5400.0),
    ],
)
def test_durations(text: str | float, secs: float) -> None:
    assert parse_duration(text) == pytest.approx(secs)


@pytest.mark.parametrize("text", ["", "s", "5x", "-5s", "-5", "1h 30m", "nan", "inf", "5m-", True])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("65536", 65536),
        ("1K", 1024),
        ("512M", 512 << 20),
        ("2G", 2 << 30),
        ("2GiB", 2 << 30),
        ("8g", 8 << 30),
        ("1.5K", 1536),
        ("4MB", 4 << 20),
        (7, 7),
    ],
)
def test_sizes(text: str | int, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", " ", "M", "12X", "-1M", "1..5G", -3])
def test_bad_sizes(text: str | int) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "unix"),
    [
        ("2026-12-02T14:40:00Z", calendar.timegm((2026, 12, 2, 14, 40, 0))),
        ("2026-12-02T14:40:00", calendar.timegm((2026, 12, 2, 14, 40, 0))),
        ("2026-12-02 14:40", calendar.timegm((2026, 12, 2, 14, 40, 0))),
        ("2026-12-02", calendar.timegm((2026, 12, 2, 0, 0, 0))),
        ("2025-01-21T04:41:44,283302+00:00", calendar.timegm((2025, 1, 21, 4, 41, 44)) + 0.283302),
        ("2026-04-22T21:30:51.870495804Z", calendar.timegm((2026, 4, 22, 21, 30, 51)) + 0.870495804),
        ("2026-11-30T00:16:39+0000", calendar.timegm((2026, 11, 30, 0, 16, 39))),
        ("2026-11-30T02:16:39+02", calendar.timegm((2026, 11, 30, 0, 16, 39))),
        ("2026-11-29T19:16:39-05:00", calendar.timegm((2026, 11, 30, 0, 16, 39))),
        ("2024-02-29T00:00:00Z", calendar.timegm((2024, 2, 29, 0, 0, 0))),
    ],
)
def test_iso(text: str, unix: float) -> None:
    assert parse_iso(text) == pytest.approx(unix, abs=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "2024-02-30T00:00:00Z",
        "2023-02-29",
        "2026-13-01",
        "2026-12-02T25:00:00Z",
        "2026-12-02T14:40:00+25:00",
        "yesterday",
        "",
        "2026-12-02T14:40:00Zjunk",
    ],
)
def test_bad_iso(text: str) -> None:
    with pytest.raises(ValueError, match="not"):
        parse_iso(text)


@given(st.integers(min_value=0, max_value=10**7), st.sampled_from(["ms", "s", "m", "h", "d", "w"]))
def test_duration_parts_add_up(n: int, unit: str) -> None:
    one = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]
    assert parse_duration(f"{n}{unit}1s") == pytest.approx(n * one + 1)


@pytest.mark.parametrize(
    ("secs", "text"),
    [
        (0, "0s"),
        (45, "45s"),
        (60, "1.0m"),
        (125, "2.1m"),
        (3600, "1.0h"),
        (9.5 * 86400, "9.5d"),
        (3.144e7, "364d"),
        (None, "-"),
        (-120, "-2.0m"),
    ],
)
def test_human_durations(secs: float | None, text: str) -> None:
    from fleettool.units import human_duration

    assert human_duration(secs) == text


def test_percent_reads_as_a_person_reads_availability() -> None:
    from fleettool.units import days, percent

    assert [percent(x) for x in (0.976852, 1, 1.0, 0, 0.5, 0.99999, 0.999999999, None)] == [
        "97.69%", "100%", "100%", "0%", "50.00%", "99.999%", "99.9999999%", "-",
    ]  # fmt: skip
    assert [days(x) for x in (239.0273, 0.8496, 5.535, None)] == ["239d", "20h", "5.5d", "-"]
