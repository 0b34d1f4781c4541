"""Power-cycle a node through its BMC: `ipmitool chassis power cycle` over IPMI-over-LAN, or Redfish's
`ComputerSystem.Reset` action through `curl`. Both run here (where='here'), never on the node.

Secrets never on the argv (a `ps` on this host would show them):
- ipmitool: `-E` reads the password from IPMI_PASSWORD in the environment (the runner passes its environment on);
- Redfish: curl's `--netrc-file FILE` (`machine BMC login USER password PASS`): FILE is `netrc=`, else
  $FLEETTOOL_BMC_NETRC, else ~/.netrc. credentials_problem() says what is missing before anything runs.

Redfish's ResetType (DMTF Resource.ResetType: On, ForceOff, GracefulShutdown, GracefulRestart, ForceRestart, Nmi,
ForceOn, PushPowerButton, PowerCycle, Suspend, Pause, Resume, and in newer schemas FullPowerCycle, an AC cycle
that may take the BMC down with it) is one a BMC lists in `ResetType@Redfish.AllowableValues` on the action, or in
the action's `@Redfish.ActionInfo` resource. Many list no PowerCycle (an HPE iLO lists On, ForceOff,
GracefulShutdown, ForceRestart, Nmi, PushPowerButton, GracefulRestart). Chosen here: PowerCycle where listed (or
where nothing is listed); else ForceOff, a wait (settle_s: a BMC refuses On while the power is still going off),
then On; else a BmcError naming what the BMC offers. Never ForceRestart: it resets without taking the power away,
which is what the reboot rung below already tried.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from fleettool.burnin.dispatch import validate_node
from fleettool.remediate.model import Step
from fleettool.remediate.runner import NodeRunner

METHODS = ("ipmi", "redfish")
POWER_CYCLE = "PowerCycle"
# the plan's Redfish step: what runs is read from the BMC when the rung runs (redfish_reset_info), never at plan time
REDFISH_PLANNED = "PowerCycle, or ForceOff + On where the BMC does not allow PowerCycle (read from the BMC when the rung runs)"
CURL_MAX_S = 60
_BMC = re.compile(r"(?:https?://)?(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
_ID = re.compile(r"[A-Za-z0-9._-]+")


class BmcError(ValueError):
    pass


def _check_bmc(bmc: str, method: str) -> str:
    if not _BMC.fullmatch(bmc):
        raise BmcError(
            f"invalid BMC address {bmc!r}: a host name or IP, with a port and http(s):// for Redfish"
        )
    if method == "ipmi" and "://" in bmc:
        raise BmcError(f"BMC {bmc!r}: ipmitool takes a host name or IP, not a URL")
    return bmc


def _base(bmc: str) -> str:
    return bmc.rstrip("/") if "://" in bmc else f"https://{bmc}"


def netrc_path(netrc: str | None = None) -> str:
    """The netrc file curl reads the BMC's credentials from: `netrc`, $FLEETTOOL_BMC_NETRC, or ~/.netrc."""
    return netrc or os.environ.get("FLEETTOOL_BMC_NETRC") or str(Path.home() / ".netrc")


def credentials_problem(method: str, *, netrc: str | None = None) -> str | None:
    """What is missing for `method` to authenticate (one sentence), or None."""
    if method == "ipmi":
        if not os.environ.get("IPMI_PASSWORD"):
            return "ipmitool -E reads the BMC password from IPMI_PASSWORD, which is not set"
        return None
    path = Path(netrc_path(netrc))
    if not path.is_file():
        return (
            f"{path}: no such netrc file (curl --netrc-file reads the BMC's 'machine HOST login USER password "
            "PASS' from it; set FLEETTOOL_BMC_NETRC)"
        )
    return None


def _curl(netrc: str | None, insecure: bool) -> list[str]:
    return [
        "curl", "--silent", "--show-error", "--fail-with-body", "--max-time", str(CURL_MAX_S),
        "--netrc-file", netrc_path(netrc), *(["--insecure"] if insecure else []),
    ]  # fmt: skip


def reset_target(bmc: str, system_id: str = "1") -> str:
    return f"{_base(bmc)}/redfish/v1/Systems/{system_id}/Actions/ComputerSystem.Reset"


def power_cycle_step(
    node: str,
    bmc: str,
    *,
    method: str = "ipmi",
    user: str | None = None,
    system_id: str = "1",
    reset_type: str = POWER_CYCLE,
    target: str | None = None,
    netrc: str | None = None,
    insecure: bool = False,
) -> Step:
    """The power cycle of `node` through its BMC. ipmi: `ipmitool -I lanplus -H BMC -U USER -E chassis power
    cycle` (user needed). redfish: `curl ... --netrc-file F -X POST -d '{"ResetType": "PowerCycle"}'` to the
    system's ComputerSystem.Reset (`target`: the URL or path the BMC's system resource names, default
    /redfish/v1/Systems/{system_id}/Actions/ComputerSystem.Reset). `reset_type` other than PowerCycle is for
    redfish_power_cycle_steps (ForceOff, On)."""
    validate_node(node)
    if method not in METHODS:
        raise BmcError(f"unknown BMC method {method!r} (one of {', '.join(METHODS)})")
    _check_bmc(bmc, method)
    out = f"node {node} (power cycled through its BMC {bmc})"
    if method == "ipmi":
        if not user:
            raise BmcError("ipmitool needs the BMC user (-U); the password comes from IPMI_PASSWORD")
        ipmi = ("ipmitool", "-I", "lanplus", "-H", bmc, "-U", user, "-E", "chassis", "power", "cycle")
        return Step(name=f"power cycle {node} (ipmitool, BMC {bmc})", argv=ipmi, where="here", takes_out=out)
    if not _ID.fullmatch(system_id):
        raise BmcError(f"invalid Redfish system id {system_id!r}")
    url = reset_target(bmc, system_id) if target is None else _absolute(bmc, target)
    body = json.dumps({"ResetType": reset_type})
    argv = (
        *_curl(netrc, insecure),
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data",
        body,
        url,
    )
    return Step(
        name=f"{reset_type} {node} (Redfish ComputerSystem.Reset, BMC {bmc})",
        argv=argv,
        where="here",
        takes_out=out if reset_type != "On" else "",
        timeout_s=CURL_MAX_S + 10,
    )


def _absolute(bmc: str, target: str) -> str:
    if "://" in target:
        return target
    if not target.startswith("/redfish/"):
        raise BmcError(f"Redfish action target {target!r} is not under /redfish/")
    return _base(bmc) + target


@dataclass(frozen=True)
class ResetInfo:
    """The system's Reset action: its target (path) and the ResetType values the BMC allows (None: it lists
    none, neither inline nor in an ActionInfo)."""

    target: str
    allowable: tuple[str, ...] | None


def _get(runner: NodeRunner, url: str, netrc: str | None, insecure: bool) -> dict[str, object]:
    r = runner.here([*_curl(netrc, insecure), url], timeout_s=CURL_MAX_S + 10)
    if r.rc != 0:
        why = "timed out" if r.rc is None else (r.stderr.strip() or r.stdout.strip())[:300]
        raise BmcError(f"GET {url}: {why}")
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        raise BmcError(f"GET {url}: not JSON ({r.stdout[:100]!r})") from None
    if not isinstance(doc, dict):
        raise BmcError(f"GET {url}: not a Redfish resource")
    return doc


def redfish_reset_info(
    runner: NodeRunner, bmc: str, *, system_id: str = "1", netrc: str | None = None, insecure: bool = False
) -> ResetInfo:
    """Read the system resource (GET /redfish/v1/Systems/{id}) for its ComputerSystem.Reset action: the target and
    `ResetType@Redfish.AllowableValues`, or the ActionInfo's ResetType parameter where the BMC publishes that
    instead (the inline annotation is deprecated in newer Redfish)."""
    _check_bmc(bmc, "redfish")
    if not _ID.fullmatch(system_id):
        raise BmcError(f"invalid Redfish system id {system_id!r}")
    url = f"{_base(bmc)}/redfish/v1/Systems/{system_id}"
    doc = _get(runner, url, netrc, insecure)
    actions = doc.get("Actions")
    action = actions.get("#ComputerSystem.Reset") if isinstance(actions, dict) else None
    if not isinstance(action, dict) or not isinstance(action.get("target"), str):
        raise BmcError(f"{url}: the system has no #ComputerSystem.Reset action")
    allowed = action.get("ResetType@Redfish.AllowableValues")
    if allowed is None and isinstance(action.get("@Redfish.ActionInfo"), str):
        info = _get(runner, _absolute(bmc, action["@Redfish.ActionInfo"]), netrc, insecure)
        params = info.get("Parameters")
        for p in params if isinstance(params, list) else []:
            if isinstance(p, dict) and p.get("Name") == "ResetType":
                allowed = p.get("AllowableValues")
    values = tuple(str(v) for v in allowed) if isinstance(allowed, list) else None
    return ResetInfo(str(action["target"]), values)


def redfish_power_cycle_steps(
    node: str,
    bmc: str,
    info: ResetInfo,
    *,
    netrc: str | None = None,
    insecure: bool = False,
    settle_s: float = 15.0,
) -> tuple[Step, ...]:
    """PowerCycle where the BMC allows it (or lists nothing); else ForceOff, `sleep settle_s`, On; else BmcError
    naming the values it allows."""

    def post(reset_type: str) -> Step:
        return power_cycle_step(
            node, bmc, method="redfish", reset_type=reset_type, target=info.target, netrc=netrc,
            insecure=insecure,
        )  # fmt: skip

    allowed = info.allowable
    if allowed is None or POWER_CYCLE in allowed:
        return (post(POWER_CYCLE),)
    on = next((v for v in ("On", "ForceOn") if v in allowed), None)
    if "ForceOff" in allowed and on is not None:
        wait = Step(
            name=f"wait {settle_s:g} s for {node}'s power to go off",
            argv=("sleep", f"{settle_s:g}"),
            where="here",
            timeout_s=settle_s + 10,
        )
        return (post("ForceOff"), wait, post(on))
    raise BmcError(
        f"BMC {bmc} allows no power cycle for {node}: ResetType@Redfish.AllowableValues is "
        f"{', '.join(allowed) or 'empty'} (needs PowerCycle, or ForceOff and On)"
    )
