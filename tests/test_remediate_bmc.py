"""fleettool.remediate.bmc: Redfish ComputerSystem.Reset with the REAL curl against a loopback HTTP server standing
in for a BMC (real system resources of a Cisco CIMC that lists PowerCycle and an HPE iLO that does not:
fixtures/remediate/SOURCES.md), and ipmitool through the stand-in (tests/standin.py)."""

from __future__ import annotations

import base64
import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fleettool.remediate.bmc import (
    BmcError,
    ResetInfo,
    credentials_problem,
    power_cycle_step,
    redfish_power_cycle_steps,
    redfish_reset_info,
)
from fleettool.remediate.model import Via
from fleettool.remediate.runner import NodeRunner
from tests import standin

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
