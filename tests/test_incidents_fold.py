"""The fold's topology, driver and time stages on alerts as the store gives them (fleettool/incidents/spread.py),
without a replay: each case is the shape of a storm from the issue, small."""

from __future__ import annotations

from fleettool.incidents.fold import fold_incidents
from fleettool.incidents.model import AlertView, Context


def alert(i: str, node: str, gpu: int | None, t: float, **kw: object) -> AlertView:
    base: dict[str, object] = {
        "rule": "GpuThermalSlowdown",
        "category": "thermal",
        "severity": "warning",
        "action": "inspect-hardware",
        "state": "firing",
        "summary": f"{node} {gpu}",
    }
    base.update(kw)
    codes = base.pop("codes", {})
    a = AlertView(alert_id=i, node=node, gpu=gpu, pci_bus_id=None, first_seen=t, last_seen=t + 600, **base)  # type: ignore[arg-type]
    a.codes = dict(codes)  # type: ignore[call-overload]
    return a


def rack_topology(racks: int, per: int) -> Context:
    return Context(topology={f"r{r}-n{n:02d}": {"rack": f"rk{r}"} for r in range(racks) for n in range(per)})


def test_a_racks_heat_is_one_rack_incident_and_a_lone_hot_gpu_elsewhere_its_own() -> None:
    ctx = rack_topology(2, 16)
    alerts = [alert(f"a{n}-{g}", f"r0-n{n:02d}", g, 60.0 * n + g) for n in range(16) for g in range(8)]
    alerts.append(alert("lone", "r1-n03", 2, 100.0))
    got = fold_incidents(alerts, ctx)
    assert len(got) == 2
    rack = next(i for i in got if i.scope == "rack")
    assert (rack.key, rack.nodes, rack.gpus, rack.alerts, rack.root_alert) == ("rk0", 16, 128, 128, None)
    assert rack.because[0].startswith("16 of 16 nodes of rack rk0 with GpuThermalSlowdown")
    lone = next(i for i in got if i.scope != "rack")
    assert lone.root_alert == "lone" and lone.scope == "gpu"


def test_two_hardware_faults_in_one_rack_keep_their_roots_three_share_a_cause() -> None:
    ctx = rack_topology(1, 4)
    dbe = {
        "rule": "GpuXid",
        "category": "ecc",
        "severity": "critical",
        "action": "reset-gpu",
        "codes": {48: 0.0},
    }
    two = [alert("d0", "r0-n00", 0, 0.0, **dbe), alert("d1", "r0-n01", 3, 200.0, **dbe)]
    got = fold_incidents(two, ctx)
    assert sorted(i.root_alert or "" for i in got) == ["d0", "d1"] and all(i.page for i in got)
    three = two + [alert("d2", "r0-n02", 1, 300.0, **dbe)]
    got = fold_incidents(three, ctx)
    assert len(got) == 1 and got[0].scope == "rack" and got[0].root_alert is None and got[0].page


def test_a_driver_regression_is_one_driver_incident_that_sends_no_gpu_to_inspection() -> None:
    xid31 = {
        "rule": "GpuXid",
        "category": "xid",
        "severity": "warning",
        "action": "inspect-hardware",
        "codes": {31: 0.0},
    }
    alerts = [alert(f"x{n}", f"n{n:03d}", n % 8, 3600.0 * n, escalated=True, **xid31) for n in range(12)]
    drivers = {f"n{n:03d}": ("610.57.04" if n < 20 else "580.95.05") for n in range(60)}
    got = fold_incidents(alerts, Context(drivers=drivers))
    assert len(got) == 1
    inc = got[0]
    assert (inc.scope, inc.key, inc.alerts, inc.action, inc.page) == (
        "driver",
        "610.57.04",
        12,
        "none",
        False,
    )
    assert "12 of 20 nodes running driver 610.57.04 and on none of the 40" in inc.because[0]


def test_a_burst_across_nodes_folds_by_time_and_hardware_only_within_a_minute() -> None:
    lost = {"rule": "GpuLost", "category": "gpu-lost", "severity": "critical", "action": "reboot-node"}
    same_minute = [alert(f"l{n}", f"n{n}", 0, 10.0 * n, **lost) for n in range(3)]
    later = [alert("l9", "n9", 0, 400.0, **lost)]
    got = fold_incidents(same_minute + later, Context())
    fleet = [i for i in got if i.scope == "fleet"]
    assert len(fleet) == 1 and fleet[0].alerts == 3 and fleet[0].page
    assert any(i.root_alert == "l9" for i in got) and len(got) == 2


def test_a_burst_takes_a_hardware_fault_as_root_only_when_nothing_else_in_it_would_page() -> None:
    dbe = {
        "rule": "GpuXid",
        "category": "ecc",
        "severity": "critical",
        "action": "reset-gpu",
        "codes": {48: 0.0},
    }
    warm = alert("w", "n2", 1, 90.0)  # a thermal warning on another node 90 s later
    got = fold_incidents([alert("d", "n1", 0, 0.0, **dbe), warm], Context())
    assert len(got) == 1 and got[0].root_alert == "d" and got[0].members["w"][0] == "member" and got[0].page
    hot = alert("h", "n2", 1, 90.0, severity="critical")  # a critical one would lose its page under the DBE
    got = fold_incidents([alert("d", "n1", 0, 0.0, **dbe), hot], Context())
    assert len(got) == 1 and got[0].root_alert is None and got[0].page
    assert got[0].because[0].startswith("a burst: a hardware fault and 2 alerts (ecc, thermal) on 2 nodes")
