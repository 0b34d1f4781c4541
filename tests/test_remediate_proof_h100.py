"""The proof over what a real H100 printed (fixtures/remediate/proof/device-h100, recorded on a lent H100 with
read-only commands): its recovery action NONE, its dmesg in the iso form with a comma, no NVLink, and a real
per-GPU burn-in. That burn-in WARNed on tf32, fp8 and HBM because fleettool had no H100 floor for them, so no
H100 could pass a remediation proof: the floors now come from that run, and its figures judged again PASS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleettool.burnin.floors import default_floor
from fleettool.burnin.verdict import Verdict, judge
from fleettool.model import GpuInfo
from fleettool.remediate.model import Via
from fleettool.remediate.proof import ProofContext, prove
from fleettool.remediate.runner import NodeRunner
from fleettool.store import Store
from tests import standin

DEV = Path(__file__).resolve().parent.parent / "fixtures" / "remediate" / "proof" / "device-h100"
REPORT = json.loads((DEV / "burnin-gpu0-gemm-hbm.json").read_text())
NODE = REPORT["node"]  # the VM's own name, verbatim
SINCE = REPORT["started"] - 60.0  # the reset ended a minute before the burn-in started


def _sequence() -> dict[str, Any]:
    f = {"rc": 0}
    return {
        "rules": [
            {"tool": "nvidia-smi", "match": "^-q", "replies": [{**f, "stdout_file": str(DEV / "nvidia-smi-q-i0.txt")}]},
            {"tool": "nvidia-smi", "match": "^nvlink -s", "replies": [{**f, "stdout_file": str(DEV / "nvidia-smi-nvlink-s-i0.txt")}]},
            {"tool": "journalctl", "match": "", "replies": [{"rc": 127, "stderr": "bash: journalctl: command not found\n"}]},
            {"tool": "dmesg", "match": "^--time-format iso", "replies": [{**f, "stdout_file": str(DEV / "dmesg-iso-tail.txt")}]},
            {"tool": "fleettool", "match": "^burnin ", "replies": [{**f, "stdout_file": str(DEV / "burnin-gpu0-gemm-hbm.json")}]},
        ]
    }  # fmt: skip


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    bin_dir = tmp_path / "bin"
    standin.install(bin_dir, _sequence(), tools=("nvidia-smi", "dmesg", "fleettool", "ssh"))
    for k, v in standin.env(bin_dir).items():
        monkeypatch.setenv(k, v)
    s = Store(tmp_path / "s.duckdb")
    dev = REPORT["devices"][0]
    s.upsert_gpus([GpuInfo(NODE, 0, dev["uuid"], "00000000:00:06.0", dev["name"])], SINCE - 86400)
    yield s
    s.close()


def test_the_real_h100_report_was_no_proof_only_for_want_of_floors(store: Store) -> None:
    t = [SINCE]

    def sleep(s: float) -> None:
        t[0] += s

    ctx = ProofContext(
        runner=NodeRunner(NODE, Via.SSH), store=store, node=NODE, gpu=0, since=SINCE, before_fault=SINCE - 900,
        quiet_s=60, clock=lambda: t[0], sleep=sleep,
    )  # fmt: skip
    proof = prove(ctx)
    by = {p.name: p for p in proof.parts}
    assert by["recovery-action"].ok is True and by["recovery-action"].figures["driver"] == "580.159.04"
    assert by["xid-quiet"].ok is True  # journalctl missing: the real dmesg (comma iso stamps) was read
    assert by["nvlink"].ok is None  # no NVLink on this GPU and no count before
    assert by["burnin"].ok is False and "gemm-tf32 WARN" in by["burnin"].detail
    assert not proof.passed


def test_its_figures_pass_the_h100_floors_made_from_it() -> None:
    model = REPORT["devices"][0]["name"]
    judged = {}
    for r in REPORT["results"]:
        if r["gpu"] is None:
            continue
        fl = default_floor(model, r["test"])
        assert fl is not None, f"no H100 floor for {r['test']}"
        judged[r["test"]] = judge(r["figure"], fl[0])[0]
    assert set(judged) == {"gemm-bf16", "gemm-fp16", "gemm-tf32", "gemm-fp8", "hbm"}
    assert set(judged.values()) == {Verdict.PASS}, judged
