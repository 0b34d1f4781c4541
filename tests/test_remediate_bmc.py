"""fleettool.remediate.bmc: Redfish ComputerSystem.Reset with the REAL curl against a loopback HTTP server standing
in for a BMC (real system resources of a Cisco CIMC that lists PowerCycle and an HPE iLO that does not:
fixtures/remediate/SOURCES.md), and ipmitool through the stand-in (tests/standin.py)."""

from __future__ import annotations

import base64
import json
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fleettool.remediate import loop
from fleettool.remediate import plan as plans
from fleettool.remediate.bmc import (
    BmcError,
    ResetInfo,
    credentials_problem,
    power_cycle_step,
    redfish_power_cycle_steps,
    redfish_reset_info,
)
from fleettool.remediate.ladder import Choice
from fleettool.remediate.model import Rung, Via
from fleettool.remediate.runner import NodeRunner
from fleettool.store import Store
from fleettool.store.remediations import Remediation, new_remediation, remediation_log
from tests import standin
from tests.conftest import run_cli

REDFISH = Path(__file__).resolve().parent.parent / "fixtures" / "remediate" / "redfish"
USER, PASSWORD = "fleetops", "s3cret-not-on-argv"

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def _systems() -> dict[str, dict[str, Any]]:
    cisco = json.loads((REDFISH / "cisco-ucsc-c240-m4sx-system.json").read_text())
    hpe = json.loads((REDFISH / "hpe-edgeline-e930t-system.json").read_text())
    # constructed from DMTF's ActionInfo schema: a BMC that lists the values in an ActionInfo resource, not inline
    ai = {
        "@odata.id": "/redfish/v1/Systems/ai",
        "Id": "ai",
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": "/redfish/v1/Systems/ai/Actions/ComputerSystem.Reset",
                "@Redfish.ActionInfo": "/redfish/v1/Systems/ai/ResetActionInfo",
            }
        },
    }
    restart_only = {
        "Id": "restart",
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": "/redfish/v1/Systems/restart/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": ["GracefulRestart", "ForceRestart"],
            }
        },
    }
    return {"FCH2017V1J7": cisco, "1": hpe, "ai": ai, "restart": restart_only}


ACTION_INFO = {
    "@odata.id": "/redfish/v1/Systems/ai/ResetActionInfo",
    "Id": "ResetActionInfo",
    "Parameters": [{"Name": "ResetType", "Required": True, "DataType": "String",
                    "AllowableValues": ["On", "ForceOff", "PowerCycle"]}],
}  # fmt: skip


class FakeBmc(BaseHTTPRequestHandler):
    systems: dict[str, dict[str, Any]] = {}
    posts: list[tuple[str, str, str]] = []  # (system id, ResetType, user)
    requests: list[tuple[str, str]] = []  # every request: (method, path)

    def log_message(self, *a: object) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        if code == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="Redfish"')
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _user(self) -> str | None:
        h = self.headers.get("Authorization", "")
        if not h.startswith("Basic "):
            return None
        user, _, pw = base64.b64decode(h[6:]).decode().partition(":")
        return user if (user, pw) == (USER, PASSWORD) else None

    def _error(self, code: int, msg_id: str, message: str) -> None:
        self._send(code, {"error": {"code": "Base.1.8.GeneralError", "message": message,
                                    "@Message.ExtendedInfo": [{"MessageId": msg_id, "Message": message}]}})  # fmt: skip

    def do_GET(self) -> None:
        self.requests.append(("GET", self.path))
        if self._user() is None:
            return self._error(401, "Base.1.8.NoValidSession", "There is no valid session")
        path = self.path.rstrip("/")
        if path == ACTION_INFO["@odata.id"]:
            return self._send(200, ACTION_INFO)
        sid = path.removeprefix("/redfish/v1/Systems/")
        if sid in self.systems:
            return self._send(200, self.systems[sid])
        self._error(404, "Base.1.8.ResourceMissingAtURI", f"{self.path} not found")

    def do_POST(self) -> None:
        self.requests.append(("POST", self.path))
        user = self._user()
        if user is None:
            return self._error(401, "Base.1.8.NoValidSession", "There is no valid session")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        for sid, doc in self.systems.items():
            action = doc["Actions"]["#ComputerSystem.Reset"]
            if self.path.rstrip("/") != action["target"].rstrip("/"):
                continue
            allowed = (
                action.get("ResetType@Redfish.AllowableValues")
                or ACTION_INFO["Parameters"][0]["AllowableValues"]
            )
            rt = body.get("ResetType")
            if rt not in allowed:
                return self._error(
                    400,
                    "Base.1.8.ActionParameterNotSupported",
                    f"The parameter ResetType for the action ComputerSystem.Reset is not supported: {rt}",
                )
            self.posts.append((sid, rt, user))
            return self._send(204)
        self._error(404, "Base.1.8.ResourceMissingAtURI", f"{self.path} not found")


@pytest.fixture
def bmc() -> Iterator[str]:
    FakeBmc.systems = _systems()
    FakeBmc.posts = []
    FakeBmc.requests = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeBmc)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def netrc(tmp_path: Path) -> str:
    p = tmp_path / "bmc.netrc"
    p.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    p.chmod(0o600)
    return str(p)


RUNNER = NodeRunner("gpu-17", Via.SSH)


def test_redfish_power_cycle_with_real_curl(bmc: str, netrc: str) -> None:
    step = power_cycle_step("gpu-17", bmc, method="redfish", system_id="FCH2017V1J7", netrc=netrc)
    assert step.where == "here" and "gpu-17" in step.takes_out
    assert PASSWORD not in " ".join(step.argv) and USER not in " ".join(step.argv)
    r = RUNNER.here(step.argv, timeout_s=step.timeout_s)
    assert r.rc in step.ok_rc, r.excerpt()
    assert FakeBmc.posts == [("FCH2017V1J7", "PowerCycle", USER)]


def test_bad_credentials_fail_with_the_bmcs_401(bmc: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.netrc"
    bad.write_text(f"machine 127.0.0.1 login {USER} password wrong\n")
    step = power_cycle_step("gpu-17", bmc, method="redfish", system_id="FCH2017V1J7", netrc=str(bad))
    r = RUNNER.here(step.argv, timeout_s=step.timeout_s)
    assert r.rc not in step.ok_rc and "401" in r.excerpt() and "NoValidSession" in r.excerpt()
    assert FakeBmc.posts == []
    with pytest.raises(BmcError, match="401"):
        redfish_reset_info(RUNNER, bmc, system_id="1", netrc=str(bad))


def test_a_bmc_that_lists_powercycle_gets_one_post(bmc: str, netrc: str) -> None:
    info = redfish_reset_info(RUNNER, bmc, system_id="FCH2017V1J7", netrc=netrc)
    assert info == ResetInfo(
        "/redfish/v1/Systems/FCH2017V1J7/Actions/ComputerSystem.Reset",
        ("On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "PowerCycle"),
    )
    steps = redfish_power_cycle_steps("gpu-17", bmc, info, netrc=netrc)
    assert len(steps) == 1 and '"PowerCycle"' in " ".join(steps[0].argv)


def test_ilo_without_powercycle_gets_forceoff_then_on(bmc: str, netrc: str) -> None:
    info = redfish_reset_info(RUNNER, bmc, system_id="1", netrc=netrc)
    assert info.allowable is not None and "PowerCycle" not in info.allowable
    # PowerCycle straight at it is refused by the BMC (400), never taken for done
    direct = power_cycle_step("gpu-17", bmc, method="redfish", target=info.target, netrc=netrc)
    r = RUNNER.here(direct.argv, timeout_s=direct.timeout_s)
    assert r.rc not in direct.ok_rc and "ActionParameterNotSupported" in r.excerpt()
    steps = redfish_power_cycle_steps("gpu-17", bmc, info, netrc=netrc, settle_s=0.2)
    assert [s.argv[0] for s in steps] == ["curl", "sleep", "curl"]
    for s in steps:
        r = RUNNER.here(s.argv, timeout_s=s.timeout_s)
        assert r.rc in s.ok_rc, r.excerpt()
    assert FakeBmc.posts == [("1", "ForceOff", USER), ("1", "On", USER)]
    assert steps[0].takes_out and not steps[2].takes_out


def test_allowable_values_from_an_action_info(bmc: str, netrc: str) -> None:
    info = redfish_reset_info(RUNNER, bmc, system_id="ai", netrc=netrc)
    assert info.allowable == ("On", "ForceOff", "PowerCycle")
    (step,) = redfish_power_cycle_steps("gpu-17", bmc, info, netrc=netrc)
    assert RUNNER.here(step.argv).rc == 0 and FakeBmc.posts == [("ai", "PowerCycle", USER)]


def test_a_bmc_with_no_power_cycle_is_a_clear_error(bmc: str, netrc: str) -> None:
    info = redfish_reset_info(RUNNER, bmc, system_id="restart", netrc=netrc)
    with pytest.raises(BmcError, match="allows no power cycle for gpu-17: .*GracefulRestart, ForceRestart"):
        redfish_power_cycle_steps("gpu-17", bmc, info, netrc=netrc)
    assert FakeBmc.posts == []


def test_ipmitool_reads_the_password_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    seq = {
        "rules": [
            {
                "tool": "ipmitool",
                "match": r"^-I lanplus -H bmc-gpu-17\.mgmt -U fleetops -E chassis power cycle$",
                "replies": [{"stdout": "Chassis Power Control: Cycle\n"}],
            }
        ]
    }
    standin.install(bin_dir, seq)
    for k, v in standin.env(bin_dir).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("IPMI_PASSWORD", raising=False)
    assert "IPMI_PASSWORD" in (credentials_problem("ipmi") or "")
    monkeypatch.setenv("IPMI_PASSWORD", PASSWORD)
    assert credentials_problem("ipmi") is None
    step = power_cycle_step("gpu-17", "bmc-gpu-17.mgmt", method="ipmi", user=USER)
    assert PASSWORD not in " ".join(step.argv) and "-P" not in step.argv
    r = RUNNER.here(step.argv, timeout_s=step.timeout_s)
    assert r.rc == 0 and r.stdout == "Chassis Power Control: Cycle\n"
    (call,) = standin.calls(bin_dir)
    assert call["tool"] == "ipmitool" and call["rule"] == 0


def test_bad_arguments_are_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BmcError, match="needs the BMC user"):
        power_cycle_step("gpu-17", "bmc-17", method="ipmi")
    with pytest.raises(BmcError, match="not a URL"):
        power_cycle_step("gpu-17", "https://bmc-17", method="ipmi", user="u")
    with pytest.raises(BmcError, match="invalid BMC address"):
        power_cycle_step("gpu-17", "bmc-17; reboot", method="redfish")
    with pytest.raises(BmcError, match="unknown BMC method"):
        power_cycle_step("gpu-17", "bmc-17", method="ssh")
    with pytest.raises(BmcError, match="system id"):
        power_cycle_step("gpu-17", "bmc-17", method="redfish", system_id="../1")
    monkeypatch.setenv("FLEETTOOL_BMC_NETRC", str(tmp_path / "absent.netrc"))
    assert "absent.netrc: no such netrc file" in (credentials_problem("redfish") or "")
    step = power_cycle_step("gpu-17", "bmc-17", method="redfish")
    assert step.argv[-1] == "https://bmc-17/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
    assert str(tmp_path / "absent.netrc") in step.argv


# ---- the power-cycle rung of the loop with --bmc-method redfish: the BMC's reset types read when the rung runs ----


def _rung_options(bmc: str, netrc: str) -> loop.LoopOptions:
    popts = plans.Options(bmc=bmc, bmc_method="redfish", bmc_netrc=netrc, bmc_settle_s=0.2)
    return loop.LoopOptions(who="alice", boot_timeout_s=5.0, plan=popts)


def _node_reboots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ssh stand-in for the node: its boot id before the power cycle, then a new one (it came back)."""
    bin_dir = tmp_path / "bin"
    boot = {"tool": "cat", "match": "boot_id", "replies": [{"stdout": "boot-a\n"}, {"stdout": "boot-b\n"}]}
    standin.install(bin_dir, {"rules": [boot]}, tools=("ssh",))
    for k, v in standin.env(bin_dir).items():
        monkeypatch.setenv(k, v)


def _run_power_cycle_rung(tmp_path: Path, bmc: str, netrc: str) -> tuple[bool, str, list[dict[str, Any]]]:
    """The rung as the loop runs it (Episode.run_rung) on a node whose system resource is the BMC's "1"."""
    opts = _rung_options(bmc, netrc)
    runner = NodeRunner("gpu-17", Via.SSH)
    p = plans.build("gpu-17", None, Rung.POWER_CYCLE, Via.SSH, "GPU lost", runner, opts=opts.plan)
    assert FakeBmc.requests == []  # the plan asked the BMC nothing
    choice = Choice(Rung.POWER_CYCLE, None, "GPU lost", (), None, True, None, None, None)
    with Store(tmp_path / "f.duckdb") as store:
        ep = loop.Episode(store, runner, choice, opts, time.time, time.sleep)
        ep.rid = new_remediation(
            store, Remediation("gpu-17", None, "power-cycle", "ssh", "alice", "GPU lost", time.time())
        )
        ok, why = ep.run_rung(p)
        return ok, why, [r for r in remediation_log(store, ep.rid) if r["kind"] == "step"]


def test_the_rung_reads_the_bmc_and_sends_forceoff_then_on_where_powercycle_is_not_allowed(
    tmp_path: Path, bmc: str, netrc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeBmc.systems = {"1": _systems()["1"]}  # HPE iLO: On, ForceOff, ..., no PowerCycle
    _node_reboots(tmp_path, monkeypatch)
    ok, why, steps = _run_power_cycle_rung(tmp_path, bmc, netrc)
    assert (ok, why) == (True, "")
    assert FakeBmc.posts == [("1", "ForceOff", USER), ("1", "On", USER)]
    assert FakeBmc.requests[0] == ("GET", "/redfish/v1/Systems/1")
    names = [r["name"] for r in steps]
    assert names[0] == "read the BMC's reset types" and "ForceOff, GracefulShutdown" in steps[0]["detail"]
    assert names[1].startswith("ForceOff gpu-17") and names[2].startswith("wait 0.2 s")
    assert names[3].startswith("On gpu-17") and names[4] == "node back (boot_id changed)"
    assert all(r["ok"] is True for r in steps)
    assert all(r["figures"]["argv"][0] == "curl" for r in (steps[1], steps[3]))


def test_the_rung_sends_powercycle_only_where_the_bmc_allows_it(
    tmp_path: Path, bmc: str, netrc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeBmc.systems = {"1": _systems()["FCH2017V1J7"]}  # Cisco CIMC: PowerCycle listed
    _node_reboots(tmp_path, monkeypatch)
    ok, why, steps = _run_power_cycle_rung(tmp_path, bmc, netrc)
    assert (ok, why) == (True, "")
    assert FakeBmc.posts == [("1", "PowerCycle", USER)]
    assert [r["name"].split()[0] for r in steps] == ["read", "PowerCycle", "node"]


def test_a_bmc_allowing_no_power_cycle_fails_the_rung_naming_its_values_and_climbs_to_rma(
    tmp_path: Path, bmc: str, netrc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeBmc.systems = {"1": _systems()["restart"]}  # GracefulRestart, ForceRestart: both keep the power on
    _node_reboots(tmp_path, monkeypatch)
    opts = _rung_options(bmc, netrc)
    runner = NodeRunner("gpu-17", Via.SSH)
    first = plans.build("gpu-17", None, Rung.POWER_CYCLE, Via.SSH, "GPU lost", runner, opts=opts.plan)
    choice = Choice(Rung.POWER_CYCLE, None, "GPU lost", (), None, True, None, None, None)
    with Store(tmp_path / "f.duckdb") as store:
        out = loop.run(store, first, choice, runner, opts)
        log = remediation_log(store, out.remediation_id)
    assert out.state == "failed" and out.rungs == ["power-cycle", "rma"]
    assert FakeBmc.posts == [] and [m for m, _ in FakeBmc.requests] == ["GET"]
    (read,) = [r for r in log if r["name"] == "read the BMC's reset types"]
    assert read["ok"] is False and "\n" not in read["detail"]
    assert f"BMC {bmc} allows no power cycle for gpu-17" in read["detail"]
    assert "GracefulRestart, ForceRestart" in read["detail"]
    (failed,) = [r for r in log if r["name"] == "power-cycle not proven"]
    assert failed["detail"] == read["detail"]


def test_the_printed_plan_and_dry_run_ask_the_bmc_nothing(tmp_path: Path, bmc: str, netrc: str) -> None:
    db = tmp_path / "f.duckdb"
    with Store(db):
        pass
    args = ("remediate", "gpu-17", "--db", str(db), "--via", "ssh", "--from", "power-cycle")
    bmc_args = ("--bmc", bmc, "--bmc-method", "redfish")
    env = {"FLEETTOOL_BMC_NETRC": netrc}
    for extra in ((), ("--dry-run",), ("--dry-run", "--yes"), ("--json",)):
        p = run_cli(*args, *bmc_args, *extra, env=env)
        assert p.returncode == 0, p.stderr
        assert (
            "ForceOff + On where the BMC does not allow PowerCycle (read from the BMC when the rung runs)"
            in (p.stdout)
        )
    assert FakeBmc.requests == []
