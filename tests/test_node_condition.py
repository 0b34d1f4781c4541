"""The agent's GpuHealthy node condition (fleettool/agent/node_condition.py) against a stand-in Kubernetes API
server on loopback: real HTTPS (a certificate made with openssl for 127.0.0.1, given to the agent as the pod's
CA), recording every request, and able to answer 403, 500 or hang. The real agent process keeps collecting
through each of them."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fleettool.agent.node_condition import ApiServer, NodeCondition, api_server, from_option, wanted
from fleettool.store import Store
from tests.conftest import run_cli
from tests.test_deploy import AGENT_API_CALLS

NODE = "gpu-17"
XID79 = {"rule": "GpuFellOffBus", "severity": "critical", "category": "hardware", "action": "reboot-node", "gpu": 3, "alert_id": "al-1", "incident_id": "inc-9"}  # fmt: skip
RESET = {"rule": "XidResetGpu", "severity": "warning", "category": "hardware", "action": "reset-gpu", "gpu": 1, "alert_id": "al-2", "incident_id": None}  # fmt: skip
WORKLOAD = {"rule": "Xid13", "severity": "critical", "category": "workload", "action": "check-workload", "gpu": 0, "alert_id": "al-3", "incident_id": None}  # fmt: skip


class ApiStandIn:
    """A Kubernetes API server for one node: GET /api/v1/nodes/NODE, PATCH .../status; `mode` ok | 403 | 500 |
    hang; every request kept as (method, path, headers, body)."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.mode = "ok"
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.conditions: list[dict[str, Any]] = []
        self.release = threading.Event()
        stand = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _answer(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                stand.requests.append((method, self.path, dict(self.headers), body))
                if stand.mode == "hang":
                    stand.release.wait(30)
                    return
                if stand.mode in ("403", "500"):
                    msg = {"403": 'nodes "gpu-17" is forbidden: User "system:serviceaccount:fleettool:fleettool-agent" cannot patch resource "nodes/status"', "500": "etcdserver: request timed out"}[stand.mode]  # fmt: skip
                    self._send(int(stand.mode), {"kind": "Status", "status": "Failure", "message": msg})
                    return
                if method == "PATCH":
                    (c,) = body["status"]["conditions"]
                    stand.conditions = [x for x in stand.conditions if x["type"] != c["type"]] + [c]
                self._send(
                    200,
                    {"kind": "Node", "metadata": {"name": NODE}, "status": {"conditions": stand.conditions}},
                )

            def _send(self, code: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_PATCH(self) -> None:
                self._answer("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def patches(self) -> list[dict[str, Any]]:
        return [b["status"]["conditions"][0] for m, _, _, b in self.requests if m == "PATCH"]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


def _cert(d: Path, name: str) -> tuple[Path, Path]:
    cert, key = d / f"{name}.crt", d / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=kubernetes",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for the stand-in API server")
    cert, key = _cert(tmp_path, "api")
    other, _ = _cert(tmp_path, "other")
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.sa-token\n")
    return {"cert": cert, "key": key, "other": other, "token": token}


@pytest.fixture
def api(pki: dict[str, Path]) -> Iterator[ApiStandIn]:
    s = ApiStandIn(pki["cert"], pki["key"])
    yield s
    s.close()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _nc(
    api: ApiStandIn, pki: dict[str, Path], alerts: list[dict[str, Any]], mono: Clock, **kw: Any
) -> NodeCondition:
    server = ApiServer(f"https://127.0.0.1:{api.port}", pki["token"], pki["cert"])
    return NodeCondition(
        NODE, server, lambda: list(alerts), clock=lambda: 1.8e9 + mono.t, mono=mono, check_s=5, **kw
    )


def test_the_condition_follows_the_worst_alert_that_asks_for_the_gpu() -> None:
    assert wanted([]) == ("True", "NoGpuFault", wanted([])[2])
    assert wanted([WORKLOAD])[0:2] == ("True", "NoGpuFault")  # the workload's fault, not the GPU's
    status, reason, msg = wanted([WORKLOAD, XID79, RESET])
    assert (status, reason) == ("False", "GpuFellOffBus")
    assert msg == "fleettool: GpuFellOffBus (critical, action reboot-node) on GPU 3 (incident_id inc-9, alert_id al-1); 1 more"  # fmt: skip
    assert wanted([RESET])[2] == "fleettool: XidResetGpu (warning, action reset-gpu) on GPU 1 (alert_id al-2)"


def test_in_a_cluster_only_with_an_address_and_a_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    assert api_server({}) is None
    assert (
        api_server({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "FLEETTOOL_K8S_TOKEN_FILE": str(token)}) is None
    )
    token.write_text("t")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "FLEETTOOL_K8S_TOKEN_FILE": str(token)}  # fmt: skip
    found = api_server(env)
    assert found is not None and found.url == "https://10.96.0.1:443" and found.token_file == token
    assert found.ca_file == Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    v6 = api_server({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert v6 is not None and v6.url == "https://[fd00::1]:443"
    assert from_option(False, NODE, list) is None  # --no-node-condition: never, even in a cluster


def test_patches_on_change_and_a_heartbeat_a_minute(api: ApiStandIn, pki: dict[str, Path]) -> None:
    alerts: list[dict[str, Any]] = []
    mono = Clock()
    nc = _nc(api, pki, alerts, mono)
    assert nc.sync() is True
    (get, patch) = api.requests
    assert (
        get[0] == "GET" and get[1] == f"/api/v1/nodes/{NODE}"
    )  # the condition held, read once (`get` nodes)
    assert patch[0] == "PATCH" and patch[1] == f"/api/v1/nodes/{NODE}/status"
    assert patch[2]["Content-Type"] == "application/strategic-merge-patch+json"
    assert patch[2]["Authorization"] == "Bearer eyJhbGciOiJSUzI1NiJ9.sa-token"
    (c,) = patch[3]["status"]["conditions"]
    assert (c["type"], c["status"], c["reason"]) == ("GpuHealthy", "True", "NoGpuFault")
    first_transition = c["lastTransitionTime"]
    # nothing changed, within the minute: nothing sent
    mono.t += 30
    assert nc.sync() is False and len(api.patches()) == 1
    # an alert that asks for the GPU: at once
    alerts.append(XID79)
    mono.t += 5
    assert nc.sync() is True
    c = api.patches()[-1]
    assert (c["status"], c["reason"]) == ("False", "GpuFellOffBus") and "inc-9" in c["message"]
    assert c["lastTransitionTime"] != first_transition and c["lastTransitionTime"] == c["lastHeartbeatTime"]
    down_at = c["lastTransitionTime"]
    mono.t += 59
    assert nc.sync() is False
    mono.t += 1  # the heartbeat: the same condition, a new lastHeartbeatTime, the transition kept
    assert nc.sync() is True
    c = api.patches()[-1]
    assert c["status"] == "False" and c["lastTransitionTime"] == down_at and c["lastHeartbeatTime"] != down_at
    assert len(api.patches()) == 3 and [r[0] for r in api.requests].count("GET") == 1
    # only the calls the agent's ClusterRole grants (deploy/kubernetes/rbac.yaml, tests/test_deploy.py)
    assert {(m, p) for m, p, _, _ in api.requests} == {(m, p.format(node=NODE)) for m, p in AGENT_API_CALLS}
    # a restarted agent reads the condition back and keeps its transition time
    nc2 = _nc(api, pki, alerts, mono)
    mono.t += 1
    assert nc2.sync() is True
    assert api.patches()[-1]["lastTransitionTime"] == down_at
    alerts.clear()
    mono.t += 1
    assert nc2.sync() is True and api.patches()[-1]["status"] == "True"


def test_refusals_are_one_event_then_retried_with_backoff(api: ApiStandIn, pki: dict[str, Path]) -> None:
    mono = Clock()
    nc = _nc(api, pki, [XID79], mono, backoff_max_s=40)
    api.mode = "403"
    assert nc.sync() is False
    (ev,) = nc.drain()
    assert ev.startswith("node condition GpuHealthy for gpu-17 not written: GET https://127.0.0.1:")
    assert "HTTP 403" in ev and "cannot patch" in ev and "retried with backoff" in ev
    n = len(api.requests)
    mono.t += 9  # backing off: 5 s x 2
    assert nc.sync() is False and len(api.requests) == n
    api.mode = "500"
    mono.t += 1
    assert nc.sync() is False and len(api.requests) == n + 1
    assert nc.drain() == []  # one event for the whole run of failures
    assert nc.failures == 2 and nc.retry_at == mono.t + 20
    for _ in range(3):  # the backoff stops growing at backoff_max_s
        mono.t = nc.retry_at
        nc.sync()
    assert nc.retry_at == mono.t + 40
    api.mode = "ok"
    mono.t = nc.retry_at
    assert nc.sync() is True
    assert nc.drain() == ["node condition GpuHealthy: Kubernetes API accepted it again after 5 failures"]
    assert api.patches()[-1]["status"] == "False" and nc.failures == 0


def test_a_hung_api_server_or_a_wrong_ca_is_a_failure_not_a_hang(
    api: ApiStandIn, pki: dict[str, Path]
) -> None:
    mono = Clock()
    api.mode = "hang"
    nc = _nc(api, pki, [], mono, timeout_s=0.5)
    assert nc.sync() is False
    (ev,) = nc.drain()
    assert "timed out" in ev
    api.mode = "ok"
    server = ApiServer(f"https://127.0.0.1:{api.port}", pki["token"], pki["other"])  # not the server's CA
    bad = NodeCondition(NODE, server, list, clock=lambda: 1.8e9, mono=mono)
    assert bad.sync() is False
    (ev,) = bad.drain()
    assert "CERTIFICATE_VERIFY_FAILED" in ev


def _agent(
    tmp_path: Path, api: ApiStandIn, pki: dict[str, Path], *extra: str, duration: str = "4s"
) -> subprocess.CompletedProcess[str]:
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(api.port),
        "FLEETTOOL_K8S_TOKEN_FILE": str(pki["token"]),
        "FLEETTOOL_K8S_CA_FILE": str(pki["cert"]),
    }
    return run_cli(
        "agent", "--db", str(tmp_path / "a.duckdb"), "--source", "fake", "--gpus", "2",
        "--node", NODE, "--duration", duration,
        "--interval", "0.5s", "--flush", "1s", "--kmsg", "off", *extra,
        env=env, timeout=120,
    )  # fmt: skip


def _agent_events(tmp_path: Path) -> list[str]:
    with Store(tmp_path / "a.duckdb", read_only=True) as s:
        return [r["message"] for r in s.query("SELECT message FROM events WHERE kind = 'agent' ORDER BY ts")]


@pytest.mark.parametrize("mode", ["403", "500", "hang"])
def test_the_agent_keeps_collecting_whatever_the_api_server_does(
    tmp_path: Path, api: ApiStandIn, pki: dict[str, Path], mode: str
) -> None:
    api.mode = mode
    # a hung call ends at the agent's 10 s bound; the loop goes on meanwhile
    r = _agent(tmp_path, api, pki, duration="13s" if mode == "hang" else "4s")
    assert r.returncode == 0, r.stderr
    assert api.requests, "the agent in a cluster (address and token given) asked the API server nothing"
    events = [e for e in _agent_events(tmp_path) if "node condition" in e]
    assert len(events) == 1, events
    assert ("timed out" if mode == "hang" else f"HTTP {mode}") in events[0]
    with Store(tmp_path / "a.duckdb", read_only=True) as s:
        # still collecting, a tick every 0.5 s, to the end: 2 GPUs x at least 6 ticks a 4 s run
        ticks = s.scalar("SELECT count(DISTINCT ts) FROM samples WHERE metric = 'gpu_util_pct'")
        span = s.scalar("SELECT epoch(max(ts)) - epoch(min(ts)) FROM samples WHERE metric = 'gpu_util_pct'")
    assert ticks >= (20 if mode == "hang" else 6) and span >= (11 if mode == "hang" else 3), (ticks, span)


def test_the_agent_sets_the_condition_from_its_firing_alerts(
    tmp_path: Path, api: ApiStandIn, pki: dict[str, Path]
) -> None:
    r = _agent(tmp_path, api, pki, "--inject", "xid:79@gpu=1", duration="12s")
    assert r.returncode == 0, r.stderr
    statuses = [(c["status"], c["reason"]) for c in api.patches()]
    # True (no alert yet) at start unless the XID's alert came first; False from the check after it fired
    assert statuses and statuses[-1][0] == "False", statuses
    assert all(s == ("True", "NoGpuFault") for s in statuses if s[0] == "True"), statuses
    down = [c for c in api.patches() if c["status"] == "False"][-1]
    assert "GPU 1" in down["message"] and "alert_id" in down["message"]
    with Store(tmp_path / "a.duckdb", read_only=True) as s:
        rows = s.query("SELECT rule, action FROM alerts WHERE state = 'firing' AND gpu = 1")
    assert (down["reason"], down["message"].split("action ")[1].split(")")[0]) in {
        (a["rule"], a["action"]) for a in rows
    }


def test_node_condition_options(tmp_path: Path, api: ApiStandIn, pki: dict[str, Path]) -> None:
    # asked for where there is no API server: one warning line, an agent event, and the agent collects on (a
    # DaemonSet whose token is not mounted must not crash-loop the collection)
    db = tmp_path / "o.duckdb"
    env = {"KUBERNETES_SERVICE_HOST": "", "FLEETTOOL_K8S_TOKEN_FILE": str(tmp_path / "none")}
    r = run_cli(
        "agent",
        "--db",
        str(db),
        "--source",
        "fake",
        "--duration",
        "1s",
        "--node-condition",
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if "no Kubernetes API" in x]
    assert line.endswith("--node-condition is off") and str(tmp_path / "none") in line
    with Store(db, read_only=True) as s:
        assert (
            s.scalar("SELECT count(*) FROM events WHERE kind = 'agent' AND message LIKE 'no Kubernetes API%'")
            == 1
        )
    # --no-node-condition in a cluster: nothing asked of the API server
    r = _agent(tmp_path, api, pki, "--no-node-condition", duration="1s")
    assert r.returncode == 0, r.stderr
    assert api.requests == []
