"""`fleettool remediate` through the CLI, with stand-in tools replaying recorded sequences
(fixtures/remediate/sequences/, sources in fixtures/remediate/SOURCES.md): each asserts the calls the stand-ins
answered, in order, the stored episode and its audit trail, the lifecycle and the exit code.

The proof's XID quiet window is `--quiet 1s` here (the real default stays 10m); the boot wait `--boot-timeout 5s`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from fleettool.model import Sample
from fleettool.store import Store
from fleettool.store.alerts import AlertRecord, put_alert
from fleettool.store.nodes import node_audit, node_state
from fleettool.store.remediations import list_remediations, remediation_log
from tests import standin
from tests.conftest import run_cli

SEQ = Path(__file__).parent.parent / "fixtures" / "remediate" / "sequences"
NODE, GPU, UUID = "gpu-17", 3, "GPU-afe9f2ed-9dd0-572c-3cd8-b42b58b3bc99"
FAST = ("--quiet", "1s", "--boot-timeout", "5s", "--drain-timeout", "5s", "--by", "alice")


def _alert(rule: str, action: str, category: str, *, node: str = NODE, gpu: int | None = GPU) -> AlertRecord:
    t = time.time() - 1800
    return AlertRecord(
        alert_id=f"a-{node}-{rule}".lower(), rule=rule, category=category, severity="critical", node=node,
        gpu=gpu, uuid=UUID if gpu == GPU else None, action=action, state="firing", first_seen=t,
        last_seen=t + 60, summary=f"{rule} on {node}", runbook="", incident=f"{rule}@{node}",
    )  # fmt: skip


def _store(db: Path, *alerts: AlertRecord, recovery: int | None = None) -> None:
    with Store(db) as s:
        for a in alerts:
            put_alert(s, a)
        if recovery is not None:
            s.write_samples([Sample(time.time() - 1700, NODE, GPU, UUID, "recovery_action", float(recovery))])
        # the agent's NVLink count of the GPU before the fault: what the proof's nvlink part compares with
        s.write_samples([Sample(time.time() - 7200, NODE, GPU, UUID, "nvlink_links_active", 18.0)])


def _seq(tmp_path: Path, name: str) -> Path:
    """The sequence and its outputs, copied; the burn-in reports dated a minute ahead, after the rung that the
    test is about to run (the lifecycle's return needs a PASS newer than the node was taken out, and a recorded
    report carries the time it ran, which a stand-in cannot move)."""
    d = tmp_path / "seq"
    shutil.copytree(SEQ, d)
    now = time.time()
    for rep in (d / "outputs").glob("burnin-*.json"):
        data = json.loads(rep.read_text())
        data["started"], data["finished"] = now + 60, now + 61
        rep.write_text(json.dumps(data))
    return d / f"{name}.json"


def _remediate(tmp_path: Path, seq: str, *args: str, env: dict[str, str] | None = None) -> tuple[Any, Path]:
    bin_dir = tmp_path / "bin"
    standin.install(bin_dir, _seq(tmp_path, seq))
    env = {**standin.env(bin_dir), **(env or {})}
    p = run_cli("remediate", NODE, "--db", str(tmp_path / "f.duckdb"), *args, env=env)
    return p, bin_dir


def _calls(bin_dir: Path) -> list[str]:
    """Each call as 'tool args' ('@node' for one the node answered), the boot_id reads and the stand-ins' own
    agent-pod lookups left in."""
    return [
        f"{c['tool']} {' '.join(c['args'])}" + (f" @{c['node']}" if c["node"] else "")
        for c in standin.calls(bin_dir)
    ]


def _episode(db: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with Store(db, read_only=True) as s:
        (ep,) = list_remediations(s, NODE)
        return ep, remediation_log(s, ep["remediation_id"])


def _kinds(log: list[dict[str, Any]], kind: str) -> list[tuple[str, bool | None]]:
    return [(r["name"], r["ok"]) for r in log if r["kind"] == kind]


RESET_ON_NODE = [
    "nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader -i 3 @gpu-17",
    "nvidia-smi -i 3 -pm 0 @gpu-17",
    "systemctl is-active nvidia-persistenced @gpu-17",
    "systemctl stop nvidia-persistenced @gpu-17",
    "systemctl is-active nvidia-dcgm @gpu-17",
    "systemctl is-active dcgm-exporter @gpu-17",
    "systemctl is-active nvidia-fabricmanager @gpu-17",
    "nvidia-smi -r -i 3 @gpu-17",
    "systemctl start nvidia-persistenced @gpu-17",
    "nvidia-smi -L @gpu-17",
]


def _proof_calls(calls: list[str]) -> list[str]:
    return [
        c for c in calls if c.split()[0] in ("journalctl", "fleettool") or c.startswith("nvidia-smi nvlink")
    ]


def test_without_yes_it_prints_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    _store(tmp_path / "f.duckdb", _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, bin_dir = _remediate(tmp_path, "nothing-runs", "--via", "slurm", *FAST)
    assert p.returncode == 0, p.stderr
    assert "rung reset" in p.stdout and "run again with --yes" in p.stdout
    assert "scontrol update nodename=gpu-17 state=drain" in p.stdout and "nvidia-smi -r -i 3" in p.stdout
    assert "xid-quiet" in p.stdout and "takes out of service" in p.stdout
    assert "blast guard: fleet: 0 open of 1" in p.stdout and "no rack known for gpu-17" in p.stdout
    assert standin.calls(bin_dir) == []
    with Store(tmp_path / "f.duckdb", read_only=True) as s:
        assert list_remediations(s) == []


def test_a_reset_proven_untaints_the_gpu_on_kubernetes(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    # no stored recovery action: nvidia-smi -q -i 3 reads it at plan time
    _store(db, _alert("GpuDoubleBitError", "reset-gpu", "ecc"))
    p, bin_dir = _remediate(tmp_path, "reset-proven", "--via", "k8s", "--yes", *FAST)
    assert p.returncode == 0, p.stderr
    calls = _calls(bin_dir)
    taint = [c for c in calls if c.startswith("kubectl taint")]
    assert len(taint) == 2 and taint[1].endswith("NoSchedule-"), taint
    # taken out before the reset, put back only after the last part of the proof
    assert calls.index(taint[0]) < calls.index("nvidia-smi -r -i 3 @gpu-17")
    assert calls.index(taint[1]) > max(calls.index(c) for c in _proof_calls(calls))
    assert [c for c in calls if c in RESET_ON_NODE] == RESET_ON_NODE
    ep, log = _episode(db)
    assert ep["state"] == "proven" and ep["rung"] == "reset" and ep["gpu"] == GPU and ep["via"] == "k8s"
    assert ep["paged_at"] is not None and ep["who"] == "alice"
    assert _kinds(log, "rung") == [("reset", None)]
    assert dict(_kinds(log, "proof")) == {
        "recovery-action": True,
        "xid-quiet": True,
        "burnin": True,
        "nvlink": True,
    }
    assert any(r["kind"] == "return" and r["ok"] for r in log)
    # a reset of one GPU leaves the node's lifecycle alone; the alert that asked for it ends with the proof
    with Store(db, read_only=True) as s:
        assert node_state(s, NODE) is None
        (a,) = s.query("SELECT state, json_extract_string(evidence, '$.closed_by') AS by FROM alerts")
    assert a == {"state": "resolved", "by": f"proof {ep['remediation_id']}"}
    assert "1 alert it answered resolved by the proof" in ep["outcome"]


def test_a_reset_proven_resumes_the_node_in_slurm(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, bin_dir = _remediate(tmp_path, "reset-proven", "--via", "slurm", "--yes", *FAST)
    assert p.returncode == 0, p.stderr
    calls = _calls(bin_dir)
    assert calls[0].startswith("scontrol update nodename=gpu-17 state=drain reason=[hardware_problem] ")
    assert calls[1 : 1 + len(RESET_ON_NODE)] == RESET_ON_NODE
    assert calls[-1] == "scontrol update nodename=gpu-17 state=resume"
    ep, log = _episode(db)
    assert ep["state"] == "proven" and "returned to service" in ep["outcome"]
    steps = [r for r in log if r["kind"] == "step"]
    reset = next(r for r in steps if r["name"] == "reset GPU 3")
    assert reset["ok"] and "successfully reset" in reset["detail"] and reset["figures"]["rc"] == 0


def test_a_refused_reset_climbs_to_a_reboot(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, bin_dir = _remediate(tmp_path, "reset-refused-reboot", "--via", "slurm", "--yes", *FAST)
    assert p.returncode == 0, p.stderr
    calls = _calls(bin_dir)
    i_reset = calls.index("nvidia-smi -r -i 3 @gpu-17")
    # the services it stopped come back although the reset failed, then the reboot, never a resume before proof
    assert calls[i_reset + 1] == "systemctl start nvidia-persistenced @gpu-17"
    reboot = next(i for i, c in enumerate(calls) if c.startswith("scontrol reboot ASAP nextstate=DOWN"))
    assert reboot > i_reset and calls[reboot - 1] == "cat /proc/sys/kernel/random/boot_id @gpu-17"
    assert calls[reboot + 1] == "cat /proc/sys/kernel/random/boot_id @gpu-17"
    assert [c for c in calls if "state=resume" in c] == [calls[-1]]
    # drained once, before the reset, for both rungs; the reboot leaves it DOWN (nextstate=DOWN: RESUME would
    # resume it as slurmd registers, before any proof), and one resume comes after the proof
    drains = [i for i, c in enumerate(calls) if "state=drain" in c]
    assert drains == [0]
    ep, log = _episode(db)
    assert ep["state"] == "proven" and ep["rung"] == "reboot"
    assert _kinds(log, "rung") == [("reset", None), ("reboot", None)]
    reset = next(r for r in log if r["kind"] == "step" and r["name"] == "reset GPU 3")
    assert reset["ok"] is False and "In use by another client" in reset["detail"]
    assert reset["figures"]["rc"] == 255
    with Store(db, read_only=True) as s:
        moves = [(a["from_state"], a["to_state"]) for a in node_audit(s, NODE)]
    assert moves == [("healthy", "cordoned"), ("cordoned", "healthy")]


def test_a_gpu_still_lost_after_the_reboot_is_power_cycled(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuFellOffTheBus", "reboot-node", "gpu-lost"))
    bmc = ("--bmc", "gpu-17-bmc", "--bmc-user", "admin")
    p, bin_dir = _remediate(
        tmp_path, "lost-after-reboot-power-cycle", "--via", "slurm", *bmc, "--yes", *FAST,
        env={"IPMI_PASSWORD": "s3cret-not-on-argv"},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    calls = _calls(bin_dir)
    assert not any(c.startswith("nvidia-smi -r") for c in calls)  # a lost GPU is never reset in-band
    reboot = next(i for i, c in enumerate(calls) if c.startswith("scontrol reboot"))
    cycle = next(i for i, c in enumerate(calls) if c.startswith("ipmitool"))
    assert reboot < calls.index("nvidia-smi -L @gpu-17") < cycle
    assert "s3cret" not in " ".join(calls) and "-E" in calls[cycle].split()
    assert calls[cycle] == "ipmitool -I lanplus -H gpu-17-bmc -U admin -E chassis power cycle"
    assert [c for c in calls if "state=resume" in c] == [calls[-1]]
    ep, log = _episode(db)
    assert ep["state"] == "proven" and ep["rung"] == "power-cycle"
    assert _kinds(log, "rung") == [("reboot", None), ("power-cycle", None)]
    lost = [r for r in log if r["kind"] == "step" and r["name"] == "GPU 3 listed after the reboot"]
    assert len(lost) == 1 and lost[0]["ok"] is False
    assert dict(_kinds(log, "proof"))["burnin"] is True


def test_a_failed_burnin_after_a_reset_is_no_return_but_the_next_rung(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, bin_dir = _remediate(tmp_path, "burnin-fails-next-rung", "--via", "slurm", "--yes", *FAST)
    assert p.returncode == 0, p.stderr
    calls = _calls(bin_dir)
    burnins = [i for i, c in enumerate(calls) if c.startswith("fleettool burnin")]
    reboot = next(i for i, c in enumerate(calls) if c.startswith("scontrol reboot"))
    assert len(burnins) == 2 and burnins[0] < reboot < burnins[1]
    resume = [i for i, c in enumerate(calls) if "state=resume" in c]
    assert resume == [len(calls) - 1]  # nothing put back after the failed proof
    ep, log = _episode(db)
    assert ep["state"] == "proven" and ep["rung"] == "reboot"
    proofs = [(r["rung"], r["name"], r["ok"]) for r in log if r["kind"] == "proof"]
    assert ("reset", "burnin", False) in proofs and ("reboot", "burnin", True) in proofs
    first_return = min(i for i, r in enumerate(log) if r["kind"] == "return")
    assert first_return > max(i for i, r in enumerate(log) if r["kind"] == "proof" and r["rung"] == "reset")
    assert [r["name"] for r in log if r["kind"] == "rung"] == ["reset", "reboot"]


def _rack(db: Path, nodes: int) -> None:
    """`nodes` other nodes of rack r07 already in remediation (gpu-01..), and gpu-17 in the same rack."""
    from fleettool.store.remediations import Remediation, new_remediation
    from fleettool.store.topology import put_topology

    with Store(db) as s:
        names = [f"gpu-{i:02d}" for i in range(1, nodes + 1)]
        put_topology(s, {n: {"rack": "r07"} for n in [*names, NODE]}, "test")
        for i, n in enumerate(names):
            new_remediation(s, Remediation(n, 0, "reset", "slurm", "bob", "XID 48", time.time() - 600 + i))


@pytest.mark.parametrize(("limit", "open_before"), [(1, 1), (10, 10)])
def test_the_blast_guard_refuses_past_the_rack_limit(tmp_path: Path, limit: int, open_before: int) -> None:
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    _rack(db, open_before)
    args = ("--via", "slurm", "--yes", "--per-rack", str(limit), "--fleet-pct", "100", *FAST)
    p, bin_dir = _remediate(tmp_path, "nothing-runs", *args)
    assert p.returncode == 1
    assert "refused" in p.stderr and f"rack r07 already has {open_before} node" in p.stderr
    assert f"the limit is {limit} per rack" in p.stderr and "gpu-01" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert standin.calls(bin_dir) == []
    with Store(db, read_only=True) as s:
        assert list_remediations(s, NODE) == []


def test_a_teardown_storm_never_starts_one(tmp_path: Path) -> None:
    from fleettool.store.incidents import IncidentRecord, replace_incidents

    db = tmp_path / "f.duckdb"
    a = _alert("XidCritical", "reset-gpu", "xid")
    _store(db, a, recovery=1)
    with Store(db) as s:
        inc = IncidentRecord(
            incident_id="inc-teardown-1", scope="fleet", key="teardown", state="firing", severity="warning",
            page=False, action="check-workload", root_alert=None, root_node=None, root_gpu=None, root_code=None,
            first_seen=a.first_seen, last_seen=a.last_seen, nodes=12, gpus=40, alerts=40,
            summary="a teardown storm: XID 43 on 12 nodes", members={a.alert_id: ("member", "teardown XID")},
        )  # fmt: skip
        replace_incidents(s, [inc])
    p, bin_dir = _remediate(tmp_path, "nothing-runs", "--via", "slurm", "--yes", *FAST)
    assert p.returncode == 1, p.stderr
    assert "inc-teardown-1" in p.stderr
    assert standin.calls(bin_dir) == []
    with Store(db, read_only=True) as s:
        assert list_remediations(s, NODE) == []


def test_a_gpu_lost_after_the_power_cycle_goes_to_rma_and_stays_out(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuFellOffTheBus", "reboot-node", "gpu-lost"))
    bmc = ("--bmc", "gpu-17-bmc", "--bmc-user", "admin")
    p, bin_dir = _remediate(
        tmp_path, "still-lost-rma", "--via", "slurm", *bmc, "--yes", *FAST, env={"IPMI_PASSWORD": "x"}
    )
    assert p.returncode == 1, p.stderr
    assert "fleettool node gpu-17 rma --bundle FILE" in p.stdout
    calls = _calls(bin_dir)
    assert not any("state=resume" in c for c in calls)  # never put back
    assert not any(c.startswith("fleettool burnin") for c in calls)  # a lost GPU is no proof
    ep, log = _episode(db)
    assert ep["state"] == "failed" and ep["rung"] == "rma" and ep["ended"] is not None
    assert [r["name"] for r in log if r["kind"] == "rung"] == ["reboot", "power-cycle", "rma"]
    with Store(db, read_only=True) as s:
        state = node_state(s, NODE)
        assert state is not None and state.state == "rma"


def test_a_drain_someone_else_set_since_is_not_lifted(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    p, bin_dir = _remediate(tmp_path, "reset-proven-drained-by-another", "--via", "slurm", "--yes", *FAST)
    assert p.returncode == 1, p.stderr
    calls = _calls(bin_dir)
    assert calls[-1] == "scontrol show node -o gpu-17" and not any("state=resume" in c for c in calls)
    ep, log = _episode(db)
    assert ep["state"] == "proven" and "putting it back failed" in ep["outcome"]
    (ret,) = [r for r in log if r["kind"] == "return"]
    assert ret["ok"] is False and "DIMM B2 swap" in ret["detail"] and "lifts that drain" in ret["detail"]


def test_an_unreachable_node_is_not_rebooted_over_ssh_and_climbs_to_its_bmc(tmp_path: Path) -> None:
    """ssh's own failure (255, the host unknown) is not a reset refused and not a reboot that dropped the
    connection: the reboot over ssh fails at once, and the ladder goes to the BMC."""
    db = tmp_path / "f.duckdb"
    _store(db, _alert("GpuDoubleBitError", "reset-gpu", "ecc"), recovery=1)
    bin_dir = tmp_path / "bin"
    down = {"rc": 255, "stderr": "ssh: Could not resolve hostname gpu-17: Name or service not known\n"}
    standin.install(bin_dir, {"rules": [{"tool": "ssh", "match": "", "replies": [down]}]})
    p = run_cli("remediate", NODE, "--db", str(db), "--via", "ssh", "--yes", *FAST, env=standin.env(bin_dir))
    assert p.returncode == 1, p.stderr
    assert "stopped at power-cycle" in p.stdout and "--bmc HOST" in p.stdout
    assert not any("systemctl reboot" in " ".join(c["args"]) for c in standin.calls(bin_dir))
    ep, log = _episode(db)
    assert ep["state"] == "stopped" and ep["rung"] == "power-cycle"
    (unreach,) = [r for r in log if r["kind"] == "note" and r["name"] == "reboot not proven"]
    assert "unreachable over ssh (ssh: Could not resolve hostname gpu-17" in unreach["detail"]
