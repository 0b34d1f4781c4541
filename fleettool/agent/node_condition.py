"""The GpuHealthy node condition, set by the agent through the Kubernetes API, as node-problem-detector sets its
conditions: False, with the worst firing alert of this node that asks for reset-gpu, reboot-node or
inspect-hardware (its rule, GPU, alert and incident id), while one fires; True (reason NoGpuFault) when none does.

Written with a strategic merge PATCH of /api/v1/nodes/NODE/status (conditions merge by `type`: the kubelet's own
are untouched), with the pod's service-account token over TLS checked against the pod's CA, when the wanted
condition changes and otherwise once a minute (lastHeartbeatTime, NPD's heartbeat); lastTransitionTime moves only
when the status does (the node's own condition is read once, with `get` on nodes, so a restart keeps it). The RBAC:
`get` on nodes and `patch` on nodes/status, nothing else (deploy/kubernetes/rbac.yaml).

It runs on a thread of its own: an API server that refuses (403), fails (500) or hangs costs the collection loop
nothing. A failure is one health event (drained by the loop into the store) for the whole run of failures, then
retried with a backoff doubling from `check_s` to `backoff_max_s`; the return is one more event.

In a cluster: KUBERNETES_SERVICE_HOST/_PORT set and the token mounted (automountServiceAccountToken). The
address, token and CA are overridable (FLEETTOOL_K8S_API, FLEETTOOL_K8S_TOKEN_FILE, FLEETTOOL_K8S_CA_FILE) for
tests and for an agent outside the cluster.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CONDITION = "GpuHealthy"
FAULT_ACTIONS = ("reset-gpu", "reboot-node", "inspect-hardware")
HEALTHY_REASON = "NoGpuFault"
HEARTBEAT_S = 60.0
CHECK_S = 5.0
BACKOFF_MAX_S = 300.0
TIMEOUT_S = 10.0

Alerts = list[dict[str, Any]]


@dataclass(frozen=True)
class ApiServer:
    url: str  # https://HOST:PORT
    token_file: Path
    ca_file: Path


def api_server(env: Mapping[str, str] | None = None) -> ApiServer | None:
    """The API server this pod reaches, or None outside a cluster (no address, or no token mounted)."""
    env = os.environ if env is None else env
    token = Path(env.get("FLEETTOOL_K8S_TOKEN_FILE", str(SA_DIR / "token")))
    ca = Path(env.get("FLEETTOOL_K8S_CA_FILE", str(SA_DIR / "ca.crt")))
    url = env.get("FLEETTOOL_K8S_API")
    host = env.get("KUBERNETES_SERVICE_HOST")
    if url is None and host:
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    if not url or not token.is_file():
        return None
    return ApiServer(url.rstrip("/"), token, ca)


def wanted(alerts: Alerts) -> tuple[str, str, str]:
    """(status, reason, message) of the condition for these firing alerts (triage order: worst first)."""
    faults = [a for a in alerts if a.get("action") in FAULT_ACTIONS]
    if not faults:
        return (
            "True",
            HEALTHY_REASON,
            "fleettool: no firing alert asks for a GPU reset, a reboot or a hardware check",
        )
    a = faults[0]
    gpu = "" if a.get("gpu") is None else f" on GPU {a['gpu']}"
    ids = ", ".join(f"{k} {a[k]}" for k in ("incident_id", "alert_id") if a.get(k))
    more = f"; {len(faults) - 1} more" if len(faults) > 1 else ""
    msg = f"fleettool: {a.get('rule')} ({a.get('severity')}, action {a.get('action')}){gpu}"
    return "False", str(a.get("rule") or "GpuFault"), msg + (f" ({ids})" if ids else "") + more


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    pass


class NodeCondition:
    """Keeps this node's GpuHealthy condition in step with `alerts()` (the agent's firing alerts)."""

    def __init__(
        self,
        node: str,
        api: ApiServer,
        alerts: Callable[[], Alerts],
        *,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        check_s: float = CHECK_S,
        heartbeat_s: float = HEARTBEAT_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.node, self.api, self.alerts = node, api, alerts
        self.clock, self.mono = clock, mono
        self.check_s, self.heartbeat_s = check_s, heartbeat_s
        self.backoff_max_s, self.timeout_s = backoff_max_s, timeout_s
        self.sent: tuple[str, str, str] | None = None  # the condition the API server last accepted
        self.sent_at = -1e18  # monotonic time of that
        self.transition: float | None = None  # lastTransitionTime of the status now held
        self.failures = 0
        self.retry_at = -1e18
        self.patches = 0
        self._read_node = False
        self._events: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the loop sees -------------------------------------------------------------------------------
    def drain(self) -> list[str]:
        """The health events since the last call (the loop stores them as agent events)."""
        with self._lock:
            out, self._events = self._events, []
        return out

    def _note(self, msg: str) -> None:
        with self._lock:
            self._events.append(msg)

    # -- the thread ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-condition", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as e:  # never let the thread die: the next check tries again
                self._failed(f"{type(e).__name__}: {e}")
            self._stop.wait(self.check_s)

    def sync(self) -> bool:
        """One check: PATCH when the wanted condition changed or the heartbeat is due, unless backing off.
        True when a PATCH was accepted."""
        now = self.mono()
        if self.failures and now < self.retry_at:
            return False
        want = wanted(self.alerts())
        if want == self.sent and now - self.sent_at < self.heartbeat_s:
            return False
        try:
            if not self._read_node:
                self._read_existing()
                self._read_node = True
            wall = self.clock()
            if self.transition is None or self.sent is None or self.sent[0] != want[0]:
                self.transition = wall
            self._request("PATCH", "/status", self._body(want, wall))
        except ApiError as e:
            self._failed(str(e))
            return False
        if self.failures:
            self._note(
                f"node condition {CONDITION}: Kubernetes API accepted it again after {self.failures} failures"
            )
        self.failures = 0
        self.sent, self.sent_at = want, self.mono()
        self.patches += 1
        return True

    def _failed(self, why: str) -> None:
        self.failures += 1
        if self.failures == 1:
            self._note(
                f"node condition {CONDITION} for {self.node} not written: {why} (retried with backoff)"
            )
        self.retry_at = self.mono() + min(self.check_s * 2**self.failures, self.backoff_max_s)

    def _read_existing(self) -> None:
        """The node's GpuHealthy as the API server holds it (a restarted agent keeps its lastTransitionTime)."""
        node = json.loads(self._request("GET", "", None) or b"{}")
        for c in node.get("status", {}).get("conditions") or []:
            if c.get("type") == CONDITION:
                self.sent = (str(c.get("status")), str(c.get("reason")), str(c.get("message")))
                t = c.get("lastTransitionTime")
                if t:
                    self.transition = (
                        datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
                    )
                self.sent_at = -1e18  # the heartbeat is due: write ours now

    def _body(self, want: tuple[str, str, str], wall: float) -> bytes:
        status, reason, message = want
        cond = {
            "type": CONDITION,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": _stamp(wall),
            "lastTransitionTime": _stamp(self.transition if self.transition is not None else wall),
        }
        return json.dumps({"status": {"conditions": [cond]}}).encode()

    def _request(self, method: str, sub: str, body: bytes | None) -> bytes:
        url = f"{self.api.url}/api/v1/nodes/{urllib.parse.quote(self.node, safe='')}{sub}"
        try:
            token = self.api.token_file.read_text().strip()  # re-read: projected tokens rotate
            ctx = (
                ssl.create_default_context(cafile=str(self.api.ca_file)) if url.startswith("https:") else None
            )
        except (OSError, ssl.SSLError) as e:
            raise ApiError(f"{method} {url}: {e}") from None
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/strategic-merge-patch+json"
        req = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310 - https
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=ctx) as r:  # noqa: S310
                return bytes(r.read())
        except urllib.error.HTTPError as e:
            detail = e.read(300).decode(errors="replace").strip()
            raise ApiError(f"{method} {url}: HTTP {e.code} {detail[:200]}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ApiError(f"{method} {url}: {getattr(e, 'reason', None) or e}") from None


def from_option(flag: bool | None, node: str, alerts: Callable[[], Alerts]) -> NodeCondition | None:
    """--node-condition (True: ValueError, the reason, where no API server or token is found; the agent says
    so and collects on) / --no-node-condition (False) / neither (None: on where the pod has both)."""
    if flag is False:
        return None
    api = api_server()
    if api is None:
        if flag:
            raise ValueError(
                "no Kubernetes API: KUBERNETES_SERVICE_HOST unset or no service-account token at "
                f"{os.environ.get('FLEETTOOL_K8S_TOKEN_FILE', str(SA_DIR / 'token'))}: --node-condition is off"
            )
        return None
    return NodeCondition(node, api, alerts)
