"""Which rung first, and for which GPU: from the node's firing alerts' actions and the GPU's recovery action.

An alert asks for a reset (action reset-gpu) or a reboot (reboot-node); a lost GPU (category gpu-lost, XID 79:
fallen off the bus) asks for a reboot, since a GPU the driver lost cannot be reset in-band. NVML's recovery action
(the latest `recovery_action` sample, else `nvidia-smi -q -i N` read through the runner) asks for a reset (1 GPU
Reset, 4 Drain and Reset, 6 Bus Reset) or a reboot (2 Node Reboot, 7 System Reboot). The higher rung wins;
`--from RUNG` overrides it (and the choice says so). Nothing that asks for either: no rung (NoRung, with the
sentence naming what is firing).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleettool.remediate.model import LADDER, RECOVERY_ACTIONS, Rung
from fleettool.store.alerts import list_alerts
from fleettool.store.incidents import incident_of_alerts
from fleettool.store.values import epoch

if TYPE_CHECKING:
    from fleettool.remediate.runner import NodeRunner
    from fleettool.store import Store

ACTION_RUNG = {"reset-gpu": Rung.RESET, "reboot-node": Rung.REBOOT}
RECOVERY_RUNG = {1: Rung.RESET, 4: Rung.RESET, 6: Rung.RESET, 2: Rung.REBOOT, 7: Rung.REBOOT}
_WORDS_TO_CODE = {v.lower(): k for k, v in RECOVERY_ACTIONS.items()}
_RA_LINE = re.compile(r"^\s*GPU Recovery Action\s*:\s*(.+?)\s*$", re.M)


class NoRung(Exception):
    """Nothing firing asks for a reset or a reboot (the message names what is firing)."""


class WhichGpu(Exception):
    """The firing alerts name several GPUs: --gpu must say which (the message names them)."""


@dataclass(frozen=True)
class Choice:
    rung: Rung
    gpu: int | None
    why: str
    alerts: tuple[dict[str, Any], ...]  # the firing alerts that asked (worst first)
    recovery_action: int | None
    lost: bool  # the GPU is lost (fell off the bus): never reset in-band
    incident_id: str | None
    paged_at: float | None
    uuid: str | None


def _is_lost(a: dict[str, Any]) -> bool:
    if a.get("category") == "gpu-lost":
        return True
    ev = a.get("evidence")
    if isinstance(ev, str):
        try:
            ev = json.loads(ev)
        except ValueError:
            ev = None
    code = ev.get("code") if isinstance(ev, dict) else None
    return code == 79 or "xid-79" in str(a.get("rule", "")).lower()


def _alert_rung(a: dict[str, Any]) -> Rung | None:
    if _is_lost(a):
        return Rung.REBOOT
    return ACTION_RUNG.get(str(a.get("action")))


def parse_recovery_action(text: str) -> int | None:
    """The code of nvidia-smi -q's "GPU Recovery Action : Node Reboot" (None: the driver prints none)."""
    m = _RA_LINE.search(text)
    return _WORDS_TO_CODE.get(m.group(1).lower()) if m else None


def stored_recovery_action(store: Store, node: str, gpu: int) -> int | None:
    v = store.scalar(
        "SELECT value FROM samples WHERE node = ? AND gpu = ? AND metric = 'recovery_action' "
        "ORDER BY ts DESC LIMIT 1",
        [node, gpu],
    )
    return int(v) if v is not None else None


def read_recovery_action(runner: NodeRunner, gpu: int) -> int | None:
    """`nvidia-smi -q -i N` on the node, its recovery action (None: not printed, or the tool failed)."""
    r = runner.on_node(["nvidia-smi", "-q", "-i", str(gpu)], timeout_s=60)
    return parse_recovery_action(r.stdout) if r.rc == 0 else None


def _higher(a: Rung | None, b: Rung | None) -> Rung | None:
    if a is None or b is None:
        return a or b
    return a if LADDER.index(a) >= LADDER.index(b) else b


def choose(
    store: Store,
    node: str,
    *,
    gpu: int | None = None,
    runner: NodeRunner | None = None,
    from_rung: Rung | None = None,
    now: float | None = None,
) -> Choice:
    """The first rung for `node` (module docstring). Raises NoRung or WhichGpu with a sentence for the user."""
    firing = list_alerts(store, state="firing", node=node, now=now)
    if gpu is not None:
        firing = [a for a in firing if a["gpu"] is None or a["gpu"] == gpu]
    asking = [a for a in firing if _alert_rung(a) is not None]
    if gpu is None:
        gpus = sorted({a["gpu"] for a in asking if a["gpu"] is not None})
        if len(gpus) > 1:
            raise WhichGpu(
                f"{node} has firing alerts on GPUs {', '.join(map(str, gpus))}: say which with --gpu "
                f"(the worst: GPU {next(a['gpu'] for a in asking if a['gpu'] is not None)})"
            )
        gpu = gpus[0] if gpus else None
    ra = None
    if gpu is not None:
        ra = stored_recovery_action(store, node, gpu)
        if ra is None and runner is not None:
            ra = read_recovery_action(runner, gpu)
    by_alerts: Rung | None = None
    for a in asking:
        by_alerts = _higher(by_alerts, _alert_rung(a))
    by_ra = RECOVERY_RUNG.get(ra) if ra is not None else None
    lost = any(_is_lost(a) for a in asking)
    rung = _higher(by_alerts, by_ra)
    if rung is Rung.RESET and gpu is None:
        rung = Rung.REBOOT  # a reset needs a GPU; a node-wide alert asking for one gets the node's reboot
    parts = []
    if asking:
        parts.append(
            "firing: "
            + ", ".join(
                f"{a['rule']}{'' if a['gpu'] is None else ' GPU ' + str(a['gpu'])} ({a['action']}"
                + (", GPU lost" if _is_lost(a) else "")
                + ")"
                for a in asking
            )
        )
    if ra is not None:
        parts.append(f"recovery action {RECOVERY_ACTIONS.get(ra, ra)}")
    if from_rung is not None:
        parts.append(f"--from {from_rung} (chosen was {rung or 'none'})")
        rung = from_rung
    if rung is None:
        raise NoRung(_nothing_asks(node, firing))
    of = incident_of_alerts(store) if asking else {}
    incident_id = next((of[a["alert_id"]][0] for a in asking if a["alert_id"] in of), None)
    first = [t for a in asking if (t := epoch(a.get("first_seen"))) is not None]
    paged_at = _incident_first_seen(store, incident_id) or (min(first) if first else None)
    uuid = next((a.get("uuid") for a in asking if a.get("uuid") and a["gpu"] == gpu), None)
    return Choice(
        rung=rung,
        gpu=gpu,
        why="; ".join(parts) + f": {rung}",
        alerts=tuple(asking),
        recovery_action=ra,
        lost=lost,
        incident_id=incident_id,
        paged_at=paged_at,
        uuid=uuid,
    )


def _incident_first_seen(store: Store, incident_id: str | None) -> float | None:
    if incident_id is None:
        return None
    from fleettool.store.incidents import incident_by_id

    inc = incident_by_id(store, incident_id)
    return inc["first_seen"] if inc else None


def _nothing_asks(node: str, firing: list[dict[str, Any]]) -> str:
    if not firing:
        return f"nothing is firing on {node} that asks for a reset or a reboot: nothing to remediate"
    names = ", ".join(
        f"{a['rule']}{'' if a['gpu'] is None else ' GPU ' + str(a['gpu'])} ({a['action']})" for a in firing
    )
    if any(a["action"] == "inspect-hardware" for a in firing):
        return (
            f"nothing firing on {node} asks for a reset or a reboot ({names}): inspect-hardware is the "
            f"inspection / RMA path: `fleettool node {node} rma --bundle FILE`"
        )
    return f"nothing firing on {node} asks for a reset or a reboot ({names})"
