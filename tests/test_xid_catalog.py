"""The generated XID catalog and the curated policy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleettool.model import Action, Category, Severity
from fleettool.xid_catalog import catalog, judge, policy
from tests.conftest import ROOT


def test_generated_catalog_is_up_to_date() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_xid_catalog.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_catalog_covers_1_to_176() -> None:
    cat = catalog()
    assert set(cat) == set(range(1, 177))
    assert (
        cat[79].mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" and cat[79].immediate == "RESTART_BM"
    )


@pytest.mark.parametrize(
    ("code", "detail", "category", "severity", "action"),
    [
        (13, {}, Category.XID, Severity.INFO, Action.CHECK_WORKLOAD),
        (43, {}, Category.XID, Severity.INFO, Action.CHECK_WORKLOAD),
        (48, {}, Category.ECC, Severity.CRITICAL, Action.RESET_GPU),
        (63, {}, Category.ROW_REMAP, Severity.WARNING, Action.RESET_GPU),
        (64, {}, Category.ROW_REMAP, Severity.CRITICAL, Action.INSPECT_HARDWARE),
        (79, {}, Category.GPU_LOST, Severity.CRITICAL, Action.REBOOT_NODE),
        (149, {"nvlink_severity": "fatal"}, Category.NVLINK, Severity.CRITICAL, Action.RESET_GPU),
        (145, {"nvlink_severity": "nonfatal"}, Category.NVLINK, Severity.INFO, Action.NONE),
        (154, {"recovery_to": "Node Reboot Required"}, Category.XID, Severity.CRITICAL, Action.REBOOT_NODE),
        (154, {"recovery_to": "None"}, Category.XID, Severity.INFO, Action.NONE),
        (62, {}, Category.XID, Severity.CRITICAL, Action.RESET_GPU),  # from NVIDIA's RESET_GPU bucket
        (999, {}, Category.XID, Severity.WARNING, Action.NONE),  # newer than the catalog
    ],
)
def test_judgements(
    code: int, detail: dict[str, str], category: Category, severity: Severity, action: Action
) -> None:
    j = judge(code, detail)
    assert (j.category, j.severity, j.action) == (category, severity, action)
    assert j.reason


def test_every_code_has_a_reasoned_judgement_and_hardware_codes_escalate() -> None:
    for code in catalog():
        j = judge(code)
        assert j.reason, code
    for code in (48, 74, 79, 95, 119):
        rep = judge(code).repeat
        assert rep is not None and rep.reboots == 2 and rep.action == Action.INSPECT_HARDWARE
    rep13 = judge(13).repeat
    assert rep13 is not None and rep13.incidents == 3


def test_policy_uses_only_the_vocabularies() -> None:
    pol = policy()
    for section in ("buckets", "xids"):
        for entry in pol[section].values():
            if "category" in entry:
                Category(entry["category"])
            if "severity" in entry:
                Severity(entry["severity"])
            if "action" in entry:
                Action(entry["action"])
