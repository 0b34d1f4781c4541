"""`fleettool node NODE rma --bundle FILE [--gpu N]`: a store built by replaying a recording with an XID 79
(fixtures/scenarios/gpu-fell-off-bus: dcgm-exporter scrapes and the node's kernel log, whose NVRM lines name GPU
3's UUID and board serial), plus a remediation episode and a burn-in as the remediation loop stores them; the
tarball read back."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from fleettool.store import Store
from fleettool.store.burnin import write_burnin_results
from fleettool.store.remediations import Remediation, log_remediation, new_remediation
from tests.conftest import SCENARIOS, run_cli

NODE = "gpu-21"
# by hand, from fixtures/scenarios/gpu-fell-off-bus/kernel-gpu-21.log.gz lines 6-8:
#   NVRM: GPU at PCI:0000:5d:00: GPU-d3742ec9-c077-3b9e-9808-1434589d6d11
#   NVRM: GPU Board Serial Number: 1650028000186
#   NVRM: Xid (PCI:0000:5d:00): 79, pid=86045, name=python3, GPU has fallen off the bus.
UUID3, SERIAL3 = "GPU-d3742ec9-c077-3b9e-9808-1434589d6d11", "1650028000186"
XID_LINE = "NVRM: Xid (PCI:0000:5d:00): 79, pid=86045, name=python3, GPU has fallen off the bus."
# nvidia-smi -r refusing the reset (NVIDIA/NVSentinel#1690; fixtures/remediate/SOURCES.md)
IN_USE = (
    "The following GPUs could not be reset:\n  GPU 00000000:5D:00.0: In use by another client\n\n"
    "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application, "
    "graphics application such as an X server, or a monitoring application such as another instance of "
    "nvidia-smi). Please first kill all processes using this device and all compute applications running in "
    "the system."
)
PROMISED = (
    "manifest.json", "alerts.json", "events.json", "kernel-log.txt", "burnin.json", "remediations.json",
    "nvidia-smi.txt", "lifecycle.json",
)  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("rma") / "f.duckdb"
    r = run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q")
    assert r.returncode == 0, r.stderr
    t0 = time.time() - 3600
    with Store(db) as st:
        rid = new_remediation(
            st,
            Remediation(
                NODE, 3, "reset", "slurm", "alice", "XID 79", t0, uuid=UUID3, rule="GpuFellOffTheBus"
            ),
        )
        log_remediation(st, rid, t0, "rung", "reset", rung="reset", ok=None, detail="reset GPU 3")
        log_remediation(
            st, rid, t0 + 5, "step", "nvidia-smi -r -i 3", rung="reset", ok=False, detail=IN_USE,
            figures={"argv": ["nvidia-smi", "-r", "-i", "3"], "rc": 255},
        )  # fmt: skip
        log_remediation(st, rid, t0 + 6, "rung", "reboot", rung="reboot", ok=None, detail="reset refused")
        row = {"node": NODE, "gpu": 3, "uuid": UUID3, "test": "gemm-bf16", "figure": 402.3, "unit": "TFLOP/s",
               "floor": 600.0, "verdict": "FAIL", "reason": "below the floor", "evidence": {"runs": 3}}  # fmt: skip
        write_burnin_results(st, "burnin-x1", t0 + 600, [row])
    assert run_cli("node", NODE, "cordon", "--db", str(db), "-m", "XID 79").returncode == 0
    return db


def _read(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        out: dict[str, bytes] = {}
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None and m.name.startswith(f"rma-{NODE}-")
            out[m.name.split("/", 1)[1]] = f.read()
        return out


def _audit(db: Path) -> list[dict[str, Any]]:
    r = run_cli("node", NODE, "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout)["audit"])


def test_rma_moves_the_node_then_writes_the_bundle(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu-21-rma.tar.gz"
    r = run_cli(
        "node", NODE, "rma", "--bundle", str(out), "--gpu", "3", "--db", str(store), "-m", "XID 79 again"
    )
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stderr and SERIAL3 in r.stderr
    files = _read(out)
    assert set(files) == set(PROMISED) and all(files[n].strip() for n in PROMISED)
    m = json.loads(files["manifest.json"])
    assert m["node"] == NODE and m["gpu"] == 3 and set(m["files"]) == set(PROMISED) - {"manifest.json"}
    (g,) = m["gpus"]
    assert (g["gpu"], g["uuid"], g["serial"], g["pci_bus_id"]) == (3, UUID3, SERIAL3, "00000000:5D:00.0")
    assert XID_LINE in files["kernel-log.txt"].decode()
    alerts = json.loads(files["alerts.json"])
    fell = [a for a in alerts if a["rule"] == "GpuFellOffTheBus"]
    assert fell and fell[0]["gpu"] == 3 and isinstance(fell[0]["evidence"], dict) and fell[0]["evidence"]
    events = json.loads(files["events.json"])
    assert any(e["kind"] == "xid" and e["code"] == 79 and e["gpu"] == 3 for e in events)
    burnin = json.loads(files["burnin.json"])
    assert [(b["test"], b["verdict"], b["figure"]) for b in burnin] == [("gemm-bf16", "FAIL", 402.3)]
    (ep,) = json.loads(files["remediations.json"])
    assert ep["uuid"] == UUID3 and [line["name"] for line in ep["log"]] == [
        "reset", "nvidia-smi -r -i 3", "reboot",
    ]  # fmt: skip
    assert "In use by another client" in files["nvidia-smi.txt"].decode()
    moves = json.loads(files["lifecycle.json"])
    assert [x["to_state"] for x in moves] == ["cordoned", "rma"]
    assert m["files"]["lifecycle.json"]["rows"] == 2 and m["files"]["burnin.json"]["rows"] == 1
    # on a node already in rma, --bundle writes another without moving it
    again = tmp_path / "again.tar.gz"
    r = run_cli("node", NODE, "rma", "--bundle", str(again), "--db", str(store))
    assert r.returncode == 0, r.stderr
    assert [x["to_state"] for x in _audit(store)] == ["cordoned", "rma"]
    m2 = json.loads(_read(again)["manifest.json"])
    assert m2["gpu"] is None and len(m2["gpus"]) == 8
    assert next(x for x in m2["gpus"] if x["gpu"] == 3)["serial"] == SERIAL3


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("rma", "--bundle", "{dir}/exists.tar.gz"), 3, "already exists; not overwritten"),
        (("rma", "--bundle", "{dir}/nodir/x.tar.gz"), 3, "does not exist"),
        (
            ("rma", "--bundle", "{dir}/g.tar.gz", "--gpu", "9"),
            3,
            "gpu-21 has no GPU 9 in the store (it has 0, 1",
        ),
        (("cordon", "--bundle", "{dir}/c.tar.gz"), 2, "--bundle goes with rma"),
        (("rma", "--gpu", "3"), 2, "--gpu goes with rma --bundle"),
    ],
)
def test_bad_bundle_arguments_leave_the_node_where_it_was(
    tmp_path: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    db = tmp_path / "b.duckdb"
    assert run_cli("replay", str(SCENARIOS / "gpu-fell-off-bus"), "--db", str(db), "-q").returncode == 0
    assert run_cli("node", NODE, "cordon", "--db", str(db), "-m", "XID 79").returncode == 0
    (tmp_path / "exists.tar.gz").write_bytes(b"an earlier bundle")
    r = run_cli("node", NODE, *(a.format(dir=tmp_path) for a in args), "--db", str(db))
    assert r.returncode == code and says in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert [x["to_state"] for x in _audit(db)] == ["cordoned"]
    assert (tmp_path / "exists.tar.gz").read_bytes() == b"an earlier bundle"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".gz") == ["exists.tar.gz"]
