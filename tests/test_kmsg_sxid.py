"""One NVSwitch SXid error is one event: the driver prints its first line (severity, link, text) and then
`Severity ...` and `Data {...}` follow-on lines with the same switch and code, interleaved with other switches'
lines (fixtures/formats/kmsg/sxid-follow-on.txt, a real capture). The follow-on lines fold into the first line's
event, whose severity is the first line's, so a fatal SXid pages as critical."""

from __future__ import annotations

from pathlib import Path

from fleettool.collectors.base import Collected
from fleettool.collectors.kmsg import kernel_events
from fleettool.engine.rules import load_rules
from fleettool.formats.kmsg import KernelLogParser
from fleettool.pipeline import Pipeline
from fleettool.store import Store

FIXTURE = Path(__file__).parent.parent / "fixtures" / "formats" / "kmsg" / "sxid-follow-on.txt"
BOOT = 1_760_000_000.0  # a boot time, so the uptimes become wall times
NODE = "gpu-31"


def _sxids() -> list[dict[str, object]]:
    batch = kernel_events(
        KernelLogParser(boot_time=BOOT).feed_all(FIXTURE.read_text().splitlines()), NODE, "kmsg"
    )
    return [
        {"device": e.detail["device"], "link": e.detail.get("link"), **e.detail}
        for e in batch.events
        if e.kind == "sxid"
    ]


def test_follow_on_lines_fold_into_their_first_line() -> None:
    ev = _sxids()
    # 8 SXid lines: 4 first lines, 3 follow-ons that find theirs, 1 whose first line is not in the capture
    assert [(e["device"], e.get("link"), e.get("sxid_severity")) for e in ev] == [
        ("nvidia-nvswitch1", 48, "fatal"),
        ("nvidia-nvswitch0", 63, "fatal"),
        ("nvidia-nvswitch2", None, None),
        ("nvidia-nvswitch2", 37, "fatal"),
        ("nvidia-nvswitch0", 62, "fatal"),
    ]
    by_link = {e.get("link"): e for e in ev}
    assert by_link[63]["data"][:2] == ["0x10000000", "0x10000000"] and len(by_link[63]["data"]) == 9
    assert by_link[63]["sxid_lines"] == 2
    assert (
        by_link[37]["sxid_level"],
        by_link[37]["engine_instance"],
        by_link[37]["sub_engine_instance"],
    ) == (1, 37, 0)
    assert (by_link[62]["sxid_level"], by_link[62]["engine_instance"]) == (1, 62)
    orphan = by_link[None]
    assert orphan["sxid_part"] == "follow-on" and orphan["engine_instance"] == 60


def test_a_fatal_sxid_with_follow_on_lines_pages_as_critical(tmp_path: Path) -> None:
    lines = [ln for ln in FIXTURE.read_text().splitlines() if "nvswitch0" in ln]  # one switch: one incident
    batch = kernel_events(KernelLogParser(boot_time=BOOT).feed_all(lines), NODE, "kmsg")
    with Store(tmp_path / "s.duckdb") as store:
        pipe = Pipeline(store, load_rules(None))
        pipe.write(Collected(events=batch.events), BOOT + 6781760)
        incidents = pipe.evaluate(now=BOOT + 6781760)
        sx = [i for i in incidents if any(f.rule.alert == "NvswitchSxid" for f in i.findings)]
        assert sx and {i.severity.value for i in sx} == {"critical"}, [(i.severity, i.findings) for i in sx]
    assert len(batch.events) == 2  # Link 63 (with its Data line) and Link 62 (with its Severity line)
