"""The proof that closes a rung (fleettool.remediate.proof), part by part, against stand-in tools replaying real
recorded outputs (fixtures/remediate/proof/SOURCES.md) over ssh, with a real DuckDB store: each part passing and
failing, the quiet window broken by a new XID (from the kernel log, from dmesg where there is no journalctl, from
the store's events), a driver that reports no recovery action, a lost GPU, a burn-in that WARNs, fewer NVLinks
than before the fault, a PCIe card, and the whole node's NCCL loopback."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from fleettool.lifecycle import passing_burnin
from fleettool.model import Event, GpuInfo, Sample
from fleettool.remediate.model import PROOF_PARTS, Proof, Via
from fleettool.remediate.proof import ProofContext, prove
from fleettool.remediate.runner import NodeRunner
from fleettool.store import Store
from tests import standin

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "remediate" / "proof"
NODE = "gpu-17"
SINCE = dt.datetime(2026, 12, 6, 3, 20, tzinfo=dt.timezone.utc).timestamp()  # the reset ended
FAULT = SINCE - 900.0  # the page, 03:05
BURNIN = f"^burnin --node {NODE} --json --no-store --gpus 3 --tests gemm,hbm$"


def reply(name: str, rc: int = 0) -> dict[str, Any]:
    return {"stdout_file": str(FIX / name), "rc": rc}


def rules(**over: Any) -> list[dict[str, Any]]:
    """A sequence where every part passes for GPU 3; `over` replaces the replies of one tool's rule by key."""
    base = {
        "smi_q": {"tool": "nvidia-smi", "match": "^-q", "replies": [reply("nvidia-smi-q-i0-h200-580.txt")]},
        "journal": {"tool": "journalctl", "match": "^-k ", "replies": [reply("journalctl-k-gpu3-quiet.txt")]},
        "burnin": {"tool": "fleettool", "match": "^burnin ", "replies": [reply("burnin-gpu3-pass.json")]},
        "nvlink": {"tool": "nvidia-smi", "match": "^nvlink -s", "replies": [reply("nvidia-smi-nvlink-s-i0-a100.txt")]},
    }  # fmt: skip
    for k, v in over.items():
        if v is None:
            del base[k]
        else:
            base[k] = {**base[k], "replies": v}
    return list(base.values())


class Clock:
    """The proof's clock and sleep: sleeping moves the clock (the quiet window passes without waiting)."""

    def __init__(self, t: float) -> None:
        self.t = t
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """(install(rules) -> bin dir, store): the store knows GPUs 2 and 3 of gpu-17 with the PCI ids their kernel
    lines name, and GPU 3's 12 active links the day before the fault."""
    store = Store(tmp_path / "s.duckdb")
    store.upsert_gpus(
        [
            GpuInfo(
                NODE,
                2,
                "GPU-167d8376-ee13-fca4-938a-a05167c43cdc",
                "00000000:38:00.0",
                "NVIDIA H100 80GB HBM3",
            ),
            GpuInfo(
                NODE,
                3,
                "GPU-afe9f2ed-9dd0-572c-3cd8-b42b58b3bc99",
                "00000000:91:00.0",
                "NVIDIA H100 80GB HBM3",
            ),
        ],
        FAULT - 86400,
    )
    store.write_samples(
        [Sample(FAULT - 86400 + 60 * i, NODE, 3, None, "nvlink_links_active", 12.0) for i in range(3)]
    )
    bin_dir = tmp_path / "bin"

    def install(seq: list[dict[str, Any]]) -> Path:
        standin.install(bin_dir, {"rules": seq})
        for k, v in standin.env(bin_dir).items():
            monkeypatch.setenv(k, v)
        return bin_dir

    yield install, store
    store.close()


def run_proof(store: Store, *, gpu: int | None = 3, quiet_s: float = 120, **kw: Any) -> tuple[Proof, Clock]:
    clock = Clock(SINCE + 5)
    ctx = ProofContext(
        runner=NodeRunner(NODE, Via.SSH), store=store, node=NODE, gpu=gpu, since=SINCE, before_fault=FAULT,
        quiet_s=quiet_s, clock=clock.now, sleep=clock.sleep, **kw,
    )  # fmt: skip
    return prove(ctx), clock


def part(proof: Proof, name: str) -> Any:
    return next(p for p in proof.parts if p.name == name)


def tools_run(bin_dir: Path) -> list[str]:
    return [f"{c['tool']} {' '.join(c['args'])}" for c in standin.calls(bin_dir)]


def test_every_part_passes_after_a_good_reset_and_the_burnin_is_stored(node: Any) -> None:
    install, store = node
    bin_dir = install(rules())
    proof, clock = run_proof(store, quiet_s=600)
    assert [p.name for p in proof.parts] == list(PROOF_PARTS)
    assert proof.passed, proof.parts
    ra, quiet, burn, nvl = proof.parts
    assert (
        ra.ok is True
        and ra.figures["recovery_action"] == {"3": "None"}
        and ra.figures["driver"] == "580.159.04"
    )
    # the window was waited out, 30 s at a time; the XIDs of GPU 2 and the fault's own (before since) are not GPU 3's
    assert quiet.ok is True and clock.t >= SINCE + 600 and max(clock.slept) == 30
    assert quiet.figures["lines_read"] == 3 and quiet.figures["xids_seen"] == 0
    assert quiet.figures["polls"] == len(clock.slept) + 1 and quiet.figures["window_s"] == 600
    assert burn.ok is True and burn.figures["tflops"] == {"bf16": 662.4, "fp16": 667.1}
    assert burn.figures["hbm_gbps"] == 2905.4 and burn.figures["run_id"] == "bi-gpu17-3"
    assert {(r["test"], r["floor"]) for r in burn.figures["rows"] if r["floor"]} >= {("gemm-bf16", 495.0)}
    assert (
        nvl.ok is True
        and nvl.figures["gpus"]["3"]["active"] == 12
        and nvl.figures["gpus"]["3"]["before"] == 12
    )
    assert "store's nvlink_links_active" in nvl.figures["gpus"]["3"]["before_from"]
    # run on the node over ssh, exactly so
    calls = standin.calls(bin_dir)
    assert {c["node"] for c in calls} == {NODE}
    assert f"fleettool burnin --node {NODE} --json --no-store --gpus 3 --tests gemm,hbm" in tools_run(bin_dir)
    assert f"journalctl -k -o short-iso-precise --since @{int(SINCE)} --no-pager" in tools_run(bin_dir)
    # stored as `fleettool burnin` stores a remote run: the lifecycle's return finds the PASS
    run, why = passing_burnin(store, NODE)
    assert run is not None and run["run_id"] == "bi-gpu17-3", why


def test_a_recovery_action_other_than_none_fails_naming_it(node: Any) -> None:
    install, store = node
    install(rules(smi_q=[reply("nvidia-smi-q-i0-h200-580-reset.txt")]))
    proof, _ = run_proof(store)
    ra = part(proof, "recovery-action")
    assert ra.ok is False and ra.detail == "recovery action is not None (GPU 3: Reset)"
    assert not proof.passed and proof.failed() == [ra]


def test_a_driver_without_a_recovery_action_leaves_it_unjudged(node: Any) -> None:
    install, store = node
    install(rules(smi_q=[reply("nvidia-smi-q-i3-h100-535.txt")]))
    proof, _ = run_proof(store)
    ra = part(proof, "recovery-action")
    assert ra.ok is None and ra.detail == "recovery action not reported by driver 535.161.08 (GPU 3)"
    assert proof.passed  # the quiet window, the burn-in and NVLink decide


@pytest.mark.parametrize(
    ("out", "rc"),
    [
        ("Unable to determine the device handle for GPU 0000:91:00.0: Unknown Error\n", 255),
        ("No devices were found\n", 6),
        ("Unable to determine the device handle for GPU 0000:91:00.0: GPU is lost.  Reboot the system to recover "
         "this GPU\n", 15),
    ],
)  # fmt: skip
def test_a_lost_gpu_fails_and_nothing_else_runs(node: Any, out: str, rc: int) -> None:
    install, store = node
    bin_dir = install(rules(smi_q=[{"stdout": out, "rc": rc}]))
    proof, clock = run_proof(store)
    ra = part(proof, "recovery-action")
    assert ra.ok is False and ra.detail == f"GPU lost: GPU 3: {out.strip()}" and ra.figures["lost"] is True
    assert [p.ok for p in proof.parts[1:]] == [None, None, None] and not proof.passed
    assert tools_run(bin_dir) == ["nvidia-smi -q -i 3"] and clock.slept == []


def test_a_new_xid_in_the_quiet_window_fails_it_at_once_naming_code_time_and_line(node: Any) -> None:
    install, store = node
    # the first read is quiet, the second has GPU 3 fall off the bus at 03:24:31
    bin_dir = install(
        rules(journal=[reply("journalctl-k-gpu3-quiet.txt"), reply("journalctl-k-gpu3-new-xid.txt")])
    )
    proof, clock = run_proof(store, quiet_s=600)
    q = part(proof, "xid-quiet")
    assert q.ok is False
    assert q.detail.startswith(
        "new XID 79 on GPU 3 at 2026-12-06T03:24:31Z: 2026-12-06T03:24:31.548779+0000 gpu-17"
    )
    assert q.detail.endswith("GPU has fallen off the bus.")
    assert (
        q.figures["polls"] == 2 and q.figures["xids_seen"] == 1 and clock.t < SINCE + 600
    )  # did not wait it out
    assert part(proof, "burnin").ok is None and not any(t.startswith("fleettool") for t in tools_run(bin_dir))
    assert not proof.passed


def test_without_journalctl_the_window_reads_dmesg(node: Any) -> None:
    install, store = node
    bin_dir = install(
        rules(journal=None) + [{"tool": "dmesg", "replies": [reply("dmesg-iso-gpu3-new-xid.txt")]}]
    )
    proof, _ = run_proof(store, quiet_s=600)
    q = part(proof, "xid-quiet")
    assert q.ok is False and q.figures["source"] == "dmesg --time-format iso"
    assert q.detail.startswith("new XID 79 on GPU 3 at 2026-12-06T03:24:31Z")
    assert tools_run(bin_dir)[1:3] == [
        f"journalctl -k -o short-iso-precise --since @{int(SINCE)} --no-pager",  # 127: not installed
        "dmesg --time-format iso",
    ]


def test_an_xid_the_agent_stored_counts_too(node: Any) -> None:
    install, store = node
    install(rules(journal=[{"stdout": "-- No entries --\n"}]))
    store.write_events(
        [Event(SINCE + 61, NODE, "xid", "Xid 48", gpu=3, code=48, raw="NVRM: Xid (PCI:0000:91:00): 48")]
    )
    store.write_events([Event(SINCE - 5, NODE, "xid", "Xid 79", gpu=3, code=79)])  # the fault: before since
    proof, _ = run_proof(store)
    q = part(proof, "xid-quiet")
    assert (
        q.ok is False
        and q.detail == "new XID 48 on GPU 3 at 2026-12-06T03:21:01Z: NVRM: Xid (PCI:0000:91:00): 48"
    )


def test_for_the_whole_node_an_xid_on_any_gpu_breaks_the_window(node: Any, tmp_path: Path) -> None:
    install, _ = node
    install(rules(smi_q=[reply("nvidia-smi-q-h100x8-535.txt")]))
    with Store(tmp_path / "bare.duckdb") as bare:  # knows no GPU of the node: every XID of it counts
        proof, _ = run_proof(bare, gpu=None)
    assert part(proof, "recovery-action").ok is None  # the 8 GPUs nvidia-smi lists, on a 535 driver
    q = part(proof, "xid-quiet")
    assert q.ok is False and q.detail.startswith("new XID 13 on 0000:38:00 at 2026-12-06T03:21:44Z")


def test_a_burnin_that_warns_is_no_proof(node: Any) -> None:
    install, store = node
    install(rules(burnin=[reply("burnin-gpu3-warn.json")]))
    proof, _ = run_proof(store)
    b = part(proof, "burnin")
    assert b.ok is False
    assert b.detail.startswith(
        "burn-in bi-gpu17-3-gemm-bf16: GPU 3 gemm-bf16 WARN (520.3 TFLOP/s, floor 495)"
    )
    assert not proof.passed
    run, why = passing_burnin(store, NODE)  # stored, and the lifecycle will not return on it either
    assert run is None and "WARN" in why


def test_a_burnin_with_no_report_fails(node: Any) -> None:
    install, store = node
    install(
        rules(
            burnin=[
                {"stdout": "", "stderr": "fleettool: --gpus: gpu-17 has no GPU 3 (its GPUs: 0, 1)\n", "rc": 2}
            ]
        )
    )
    proof, _ = run_proof(store)
    b = part(proof, "burnin")
    assert b.ok is False and "exit 2" in b.detail and "has no GPU 3" in b.detail


def test_fewer_nvlinks_than_before_the_fault_fail_naming_both_counts(node: Any) -> None:
    install, store = node
    install(rules(nvlink=[reply("nvidia-smi-nvlink-s-i3-v100-inactive.txt")]))
    proof, _ = run_proof(store)
    n = part(proof, "nvlink")
    assert n.ok is False and n.detail.startswith("GPU 3: 4 links active, 12 before the fault (the store's")
    assert n.figures["gpus"]["3"]["inactive"] == 2 and not proof.passed


def test_without_a_stored_count_the_plan_time_count_is_used(node: Any) -> None:
    install, store = node
    install(rules(nvlink=[reply("nvidia-smi-nvlink-s-i3-v100-inactive.txt")]))
    clock = Clock(SINCE + 5)
    ctx = ProofContext(NodeRunner(NODE, Via.SSH), store, NODE, 3, SINCE, None, quiet_s=60, links_before=6,
                       clock=clock.now, sleep=clock.sleep)  # fmt: skip
    n = part(prove(ctx), "nvlink")
    assert (
        n.ok is False
        and n.detail == "GPU 3: 4 links active, 6 before the fault (the count read when the plan was made)"
    )


def test_a_pcie_card_with_no_nvlink_and_no_count_is_unjudged(node: Any) -> None:
    install, store = node
    install(rules(nvlink=[{"stdout": "", "rc": 0}]))
    clock = Clock(SINCE + 5)
    ctx = ProofContext(NodeRunner(NODE, Via.SSH), store, NODE, 3, SINCE, FAULT - 30 * 86400, quiet_s=60,
                       clock=clock.now, sleep=clock.sleep)  # fmt: skip
    # before_fault a month back: the count stored the day before the page is not of the 7 days before it
    proof = prove(ctx)
    n = part(proof, "nvlink")
    assert (
        n.ok is None and n.detail == "no NVLink (nvidia-smi printed no links) and no count before the fault"
    )
    assert proof.passed


@pytest.mark.parametrize(("report", "ok"), [("burnin-gpu23-allreduce-pass.json", True),
                                            ("burnin-gpu23-allreduce-fail.json", False)])  # fmt: skip
def test_the_whole_node_needs_its_nccl_loopback(node: Any, report: str, ok: bool) -> None:
    install, store = node
    bin_dir = install(rules(burnin=[reply(report)]))
    proof, _ = run_proof(store, whole_node=True, burnin_args=("--duration", "60s"))
    assert (
        f"fleettool burnin --node {NODE} --json --no-store --gpus 2,3 --tests gemm,hbm,allreduce --duration 60s"
        in (tools_run(bin_dir))
    )
    n = part(proof, "nvlink")
    assert n.ok is ok and n.figures["allreduce_verdict"] == ("PASS" if ok else "FAIL")
    assert (
        part(proof, "burnin").ok is True
    )  # GEMM and HBM passed on both GPUs: the loopback is NVLink's to judge
    if not ok:
        assert "NCCL loopback (all-reduce over 2 GPUs) FAIL: 121.6 below the floor 300" in n.detail
    assert proof.passed is ok


def test_after_a_reboot_every_gpu_of_the_node_must_be_listed(node: Any) -> None:
    install, store = node
    install(rules(smi_q=[reply("nvidia-smi-q-i3-h100-535.txt")]))  # lists one GPU, at 5D: neither 38 nor 91
    proof, _ = run_proof(store, gpu=None)
    ra = part(proof, "recovery-action")
    assert ra.ok is False and ra.detail.startswith(
        "GPU lost: GPU 2 (00000000:38:00.0), GPU 3 (00000000:91:00.0)"
    )
    assert ra.detail.endswith("not listed by nvidia-smi -q")
