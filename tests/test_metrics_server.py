"""/metrics a Prometheus user can join with dcgm-exporter's series, and the probes on the same port.

- The identity of a GPU read from a real dcgm-exporter scrape (fixtures/samples/dcgm-exporter) comes back out on
  fleettool's series under the same label names with the same values.
- A real agent (fake source) labels every per-GPU series with the inventory it stored, node-level series with
  `Hostname` only, writes no empty label, and serves fleettool_build_info and fleettool_gpu_info.
- /healthz and /readyz of a real Agent served by the real server, driven through start-up, a stopped loop, a
  flush stuck on a database another process holds, and a full buffer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import fleettool
from fleettool.agent.health import FLUSH_BOUND_S, liveness, readiness, tick_bound_s
from fleettool.agent.loop import Agent, AgentConfig
from fleettool.collectors.nvml import NvmlCollector
from fleettool.collectors.series_map import map_series
from fleettool.export.metrics_server import AgentMetrics, dcgm_pci_bus_id, serve
from fleettool.model import normalize_pci_bus_id
from fleettool.sources.fake import FakeSource
from tests.conftest import FIXTURES, run_cli
from tests.test_agent import AgentProcess, free_port

DCGM_SAMPLES = FIXTURES / "samples" / "dcgm-exporter" / "dcgm-exporter-metrics-samples.txt"
IDENTITY = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
FAKE = ("--source", "fake", "--kmsg", "off", "--dcgm-exporter", "off")


def _samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            yield s.name, dict(s.labels), float(s.value)


def _render(m: AgentMetrics) -> str:
    reg = CollectorRegistry()
    reg.register(m)
    return generate_latest(reg).decode()


def _dcgm_line(source: str) -> tuple[str, dict[str, str]]:
    """The first series of the named sample block in the dcgm-exporter samples file, parsed."""
    blocks = DCGM_SAMPLES.read_text().split("=== SOURCE: ")
    (block,) = [b for b in blocks if b.startswith(source)]
    line = next(ln for ln in block.splitlines() if ln.startswith("DCGM_FI_"))
    ((name, labels, _),) = list(_samples(line + "\n"))
    return name, labels


@pytest.mark.parametrize(
    "source",
    [
        "NVIDIA/dcgm-exporter issue #512",  # H100, with pci_bus_id and DCGM_FI_DRIVER_VERSION
        "NVIDIA/dcgm-exporter issue #250",  # V100, an exporter without pci_bus_id or the driver label
    ],
)
def test_a_gpu_read_from_dcgm_exporter_is_labelled_as_dcgm_exporter_labels_it(source: str) -> None:
    name, theirs = _dcgm_line(source)
    metric, node, gpu, uuid, _sub, _scale, info = map_series(name, theirs, "unused")
    assert gpu is not None and info is not None  # the agent's dcgm-exporter collector reads it so
    m = AgentMetrics(node, lambda: {("gpu_temp_c", gpu, uuid, ""): 41.0}, dict, gpus=lambda: {gpu: info})
    ((_, ours, value),) = [s for s in _samples(_render(m)) if s[0] == "fleettool_gpu_temp_celsius"]
    assert value == 41.0
    shared = {k: v for k, v in theirs.items() if k in IDENTITY}
    assert {k: v for k, v in ours.items() if k in IDENTITY} == shared
    assert set(ours) == set(shared)  # nothing more: a label fleettool does not know is left out, not ""
    if "pci_bus_id" in theirs:
        assert ours["pci_bus_id"] == theirs["pci_bus_id"] == "00000000:1A:00.0"


def test_node_level_series_carry_the_host_only_and_no_label_is_empty() -> None:
    latest = {
        ("agent_collector_up", None, None, "collector=nvml"): 1.0,
        ("gpu_count", None, None, ""): 8.0,
        ("gpu_temp_c", 3, "GPU-3", ""): 50.0,  # a GPU the inventory has not named yet: what is known
    }
    alerts: list[dict[str, object]] = [
        {"rule": "NodeMissingGpus", "severity": "critical", "category": "gpu-lost", "action": "reboot-node"},
        {"rule": "GpuXid", "severity": "critical", "category": "xid", "action": "reset-gpu", "gpu": 3},
    ]
    counts = {("xid", 79): 1, ("agent", None): 2}
    text = _render(AgentMetrics("gpu-17", lambda: latest, lambda: counts, lambda: alerts))
    rows = list(_samples(text))
    assert all(v != "" for _, lab, _ in rows for v in lab.values()), text
    got = [(n, lab) for n, lab, _ in rows]
    host = {"Hostname": "gpu-17"}
    assert ("fleettool_agent_collector_up", {**host, "collector": "nvml"}) in got
    assert ("fleettool_gpus", host) in got
    assert ("fleettool_events_total", {**host, "kind": "agent"}) in got  # an event without a code
    assert ("fleettool_events_total", {**host, "kind": "xid", "code": "79"}) in got
    node_alert = {"rule": "NodeMissingGpus", "severity": "critical", "category": "gpu-lost"}
    assert ("fleettool_alerts", {**host, **node_alert, "action": "reboot-node"}) in got
    gpu3 = {lab["device"]: lab for n, lab, _ in rows if n == "fleettool_gpu_temp_celsius"}["nvidia3"]
    assert gpu3 == {"gpu": "3", "UUID": "GPU-3", "device": "nvidia3", "Hostname": "gpu-17"}
    (xid,) = [lab for n, lab, _ in rows if n == "fleettool_alerts" and lab["rule"] == "GpuXid"]
    assert xid["gpu"] == "3" and xid["device"] == "nvidia3"


def test_pci_bus_id_is_spelled_as_nvml_and_dcgm_exporter_spell_it() -> None:
    assert dcgm_pci_bus_id("0000:1a:00") == "00000000:1A:00.0"
    assert dcgm_pci_bus_id("0001:c3:1f") == "00000001:C3:1F.0"
    assert dcgm_pci_bus_id("garbage") == "garbage"  # an id the store could not parse stays as it was
    # NVML's own spelling survives the store's key and back: the H200 recorded in fixtures/samples, and the H100
    # of dcgm-exporter issue #512
    smi = (FIXTURES / "samples" / "h200-recording" / "nvidia-smi-q.txt").read_text()
    (h200,) = {ln.split(":", 1)[1].strip() for ln in smi.splitlines() if ln.strip().startswith("Bus Id")}
    for nvml in (h200, "00000000:1A:00.0"):
        assert dcgm_pci_bus_id(normalize_pci_bus_id(nvml)) == nvml


def test_a_real_agent_labels_its_series_with_the_inventory_it_stored(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    with AgentProcess("--db", str(db), "--node", "gpu-17", "--gpus", "4", "--flush", "1s", *FAKE) as ag:
        # the first tick's series, its health last
        body = ag.wait_metrics(
            "fleettool_gpu_info{", "fleettool_gpus_expected{", "fleettool_agent_collector_up{"
        )
        deadline = time.monotonic() + 20
        while True:
            r = run_cli("gpus", "--db", str(db), "--json")
            if r.returncode == 0 and len(json.loads(r.stdout)) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.returncode == 0, r.stderr
        for path, code in (("/healthz", 200), ("/readyz", 200), ("/health", 404)):
            assert _get(ag.port, path)[0] == code, path
        rc, err, _ = ag.stop()
    assert rc == 0, err
    inv = {g["gpu"]: g for g in json.loads(r.stdout)}
    want = {
        str(i): {
            "gpu": str(i),
            "UUID": g["uuid"],
            "pci_bus_id": dcgm_pci_bus_id(g["pci_bus_id"]),
            "device": f"nvidia{i}",
            "modelName": g["model"],
            "Hostname": "gpu-17",
            "DCGM_FI_DRIVER_VERSION": g["driver"],
        }
        for i, g in inv.items()
    }
    assert len(want) == 4 and all(all(v for v in w.values()) for w in want.values())
    rows = list(_samples(body))
    assert all(v != "" for _, lab, _ in rows for v in lab.values())
    per_gpu = [
        (n, lab) for n, lab, _ in rows if "gpu" in lab and n not in ("fleettool_alerts", "fleettool_gpu_info")
    ]
    assert len({n for n, _ in per_gpu}) > 20  # every NVML metric, not a chosen few
    for n, lab in per_gpu:
        ident = {k: v for k, v in lab.items() if k in IDENTITY}
        assert ident == want[lab["gpu"]], (n, lab)
        assert set(lab) - set(IDENTITY) <= {"link", "mig"}, (n, lab)  # a GPU's part, nothing else
    node_level = [(n, lab) for n, lab, _ in rows if "gpu" not in lab]
    assert {n for n, _ in node_level} >= {
        "fleettool_gpus",
        "fleettool_gpus_expected",
        "fleettool_agent_collector_up",
        "fleettool_build_info",
    }
    for n, lab in node_level:
        assert lab["Hostname"] == "gpu-17" and not set(lab) & (set(IDENTITY) - {"Hostname"}), (n, lab)
    infos = {lab["gpu"]: lab for n, lab, _ in rows if n == "fleettool_gpu_info"}
    assert {k: {x: y for x, y in v.items() if x != "serial"} for k, v in infos.items()} == want
    assert {k: v["serial"] for k, v in infos.items()} == {str(i): g["serial"] for i, g in inv.items()}
    (build,) = [lab for n, lab, _ in rows if n == "fleettool_build_info"]
    assert build["version"] == fleettool.__version__
    assert build["python"] == "{}.{}.{}".format(*sys.version_info[:3]) and build["Hostname"] == "gpu-17"


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:  # noqa: S310 - loopback
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


class Clock:
    """The agent's clocks, stepped by the test: `t` is monotonic time; the wall clock moves one second a tick,
    so each tick's fast NVML reads are due."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.wall = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t

    def now(self) -> float:
        return self.wall


def _tick(ag: Agent, clk: Clock) -> None:
    clk.wall += 1.0
    ag.tick()


@pytest.fixture
def probed(tmp_path: Path) -> Iterator[tuple[Agent, Clock, int]]:
    """A real Agent (the fake GPU source, a store in tmp_path) whose probes the real server answers."""
    mono = Clock()
    cfg = AgentConfig(db=tmp_path / "a.duckdb", node="probe-node", quiet=True, max_buffer_bytes=1 << 20)
    src = FakeSource(gpus=2, clock=mono.wall)
    ag = Agent(cfg, [NvmlCollector(src, "probe-node")], clock=mono.now, mono=mono)
    port = free_port()
    m = AgentMetrics("probe-node", lambda: dict(ag.latest), lambda: dict(ag.event_counts))
    server = serve(port, "127.0.0.1", m, {"/healthz": lambda: liveness(ag), "/readyz": lambda: readiness(ag)})
    try:
        yield ag, mono, port
    finally:
        server.shutdown()
        for r in ag.runners.values():
            r.close()
        for c in ag.collectors:
            c.close()


def test_liveness_follows_the_loop_and_says_why(probed: tuple[Agent, Clock, int]) -> None:
    ag, mono, port = probed
    bound = tick_bound_s(ag.cfg, 1)
    assert bound == 10.0 + 5.0  # max(3 x 1 s, 10 s) + the watchdog's 5 s for the one collector
    code, body = _get(port, "/healthz")
    assert code == 200 and body.startswith("ok: starting"), body
    mono.t += bound + 1  # collectors still starting, well past the bound
    code, body = _get(port, "/healthz")
    assert code == 503 and "no tick since the start" in body, body
    ag.start()
    _tick(ag, mono)
    assert _get(port, "/healthz") == (200, f"ok: last tick 0.0s ago (bound {bound:.0f}s)\n")
    mono.t += bound - 1
    assert _get(port, "/healthz")[0] == 200
    mono.t += 2  # one more second than the bound without a tick
    code, body = _get(port, "/healthz")
    assert (
        code == 503
        and body == f"not ok: last tick {bound + 1:.0f}s ago (bound {bound:.0f}s): the loop has stopped\n"
    )
    _tick(ag, mono)
    assert _get(port, "/healthz")[0] == 200


def _hold(db: Path) -> subprocess.Popen[str]:
    """Another process holding the database read-write (as a second agent would), until killed."""
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from fleettool.store.connection import connect; "
            f"c = connect({str(db)!r}, read_only=False, wait_s=10); print(1, flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "1"
    return p


def test_readiness_waits_for_the_first_collection_and_fails_while_rows_are_dropped(
    probed: tuple[Agent, Clock, int],
) -> None:
    ag, mono, port = probed
    assert _get(port, "/readyz") == (503, "not ok: the first collection has not finished\n")
    ag.start()
    _tick(ag, mono)
    assert _get(port, "/readyz") == (200, "ok: collecting; the first flush is still to come\n")
    assert ag.flush()
    assert _get(port, "/readyz")[0] == 200
    db = ag.cfg.db
    assert db is not None
    holder = _hold(db)
    try:
        _tick(ag, mono)
        assert not ag.flush()  # locked: the rows stay in the buffer
        code, body = _get(port, "/readyz")
        assert code == 200 and body.startswith("ok: buffering: the last flush failed") and "locked" in body
        ticks = 0
        while ag.stats.dropped_rows == 0 and ticks < 2000:  # ~100 samples a tick into a 1 MiB buffer
            _tick(ag, mono)
            ticks += 1
        assert ag.stats.dropped_rows > 0, ticks
        code, body = _get(port, "/readyz")
        assert (
            code == 503 and "the buffer is full" in body and f"{ag.stats.dropped_rows} rows dropped" in body
        )
    finally:
        holder.kill()
        holder.wait()
    assert ag.flush()  # the store is back: the buffer goes to it and the agent is ready again
    assert _get(port, "/readyz") == (200, f"ok: {ag.stats.ticks} ticks, {ag.stats.flushes} flushes\n")


def test_a_flush_counts_as_progress_until_its_own_bound(probed: tuple[Agent, Clock, int]) -> None:
    ag, mono, port = probed
    ag.start()
    _tick(ag, mono)
    assert ag.flush()
    db = ag.cfg.db
    assert db is not None
    holder = _hold(db)
    try:
        _tick(ag, mono)
        flush = threading.Thread(target=ag.flush, kwargs={"final": True})  # waits up to 5 s for the lock
        flush.start()
        end = time.monotonic() + 5
        while ag.flushing_since is None and time.monotonic() < end:
            time.sleep(0.01)
        mono.t += tick_bound_s(ag.cfg, 1) + 60  # past the tick bound: a flush is still progress
        code, body = _get(port, "/healthz")
        assert code == 200 and body.startswith("ok: flushing for"), body
        mono.t += FLUSH_BOUND_S
        code, body = _get(port, "/healthz")
        assert code == 503 and "the loop is stuck in it" in body, body
        flush.join(15)
    finally:
        holder.kill()
        holder.wait()
    assert not flush.is_alive() and ag.flushing_since is None


def test_readiness_fails_while_nvml_cannot_load_and_liveness_holds(tmp_path: Path) -> None:
    """An agent whose NVML cannot load is alive (it goes round and retries NVML) but not ready: /readyz 503
    naming NVML's reason, /healthz 200. The fake GPU source with a recording it cannot play stands in for
    the missing library; where NVML cannot load on this host, the real source is probed the same way."""
    from fleettool.sources.nvml import NvmlSource

    bad = tmp_path / "not-a-recording.om"
    bad.write_text("garbage\n")
    sources: list[tuple[object, str]] = [
        (FakeSource(gpus=2, recording=bad, clock=0.0), "fake source cannot play")
    ]
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        sources.append((NvmlSource(), "NVML could not start"))
    for src, why in sources:
        _assert_alive_not_ready(src, why, tmp_path)


def _assert_alive_not_ready(src: object, why: str, tmp_path: Path) -> None:
    mono = Clock()
    cfg = AgentConfig(db=tmp_path / "a.duckdb", node="no-nvml", quiet=True)
    ag = Agent(cfg, [NvmlCollector(src, "no-nvml")], clock=mono.now, mono=mono)  # type: ignore[arg-type]
    port = free_port()
    m = AgentMetrics("no-nvml", lambda: dict(ag.latest), lambda: dict(ag.event_counts))
    server = serve(port, "127.0.0.1", m, {"/healthz": lambda: liveness(ag), "/readyz": lambda: readiness(ag)})
    try:
        ag.start()
        _tick(ag, mono)
        assert ag.flush()
        assert _get(port, "/healthz")[0] == 200
        code, body = _get(port, "/readyz")
        assert code == 503 and body.startswith("not ok: no GPU data: nvml: ") and why in body, body
        assert body.endswith("; the agent retries it\n"), body
    finally:
        server.shutdown()
        for r in ag.runners.values():
            r.close()
