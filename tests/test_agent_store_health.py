"""A store damaged under a running agent turns alerting off, and the agent says so: /readyz is 503 with the
reason, agent_store_healthy is 0, and the rule set's AgentStoreUnhealthy alert is on /metrics' fleettool_alerts,
served from memory because the store it would be evaluated from cannot be read. Was: /readyz 200 ("buffering")
and nothing on fleettool_alerts while every flush or checkpoint failed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def _until(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_a_store_damaged_under_the_agent_pages_and_fails_readiness(tmp_path: Path) -> None:
    db, port = tmp_path / "fleet.duckdb", _free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "fleettool", "agent", "--db", str(db), "--source", "fake", "--gpus", "8"]
    argv += ["--interval", "0.5s", "--flush", "1s", "--kmsg", "off", "--dcgm-exporter", "off"]
    argv += ["--metrics-port", str(port), "--duration", "60s", "--inject", "xid:79@gpu=3,after=8"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _until(
            lambda: (
                _get(base + "/readyz")[1].startswith("ok: ")
                and "flushes" in _get(base + "/readyz")[1]
                and not _get(base + "/readyz")[1].endswith(" 0 flushes\n")
            ),
            20,
        ), _get(base + "/readyz")
        assert _get(base + "/readyz")[0] == 200
        # cut short after its three header blocks: the catalog they point to is gone (half the file can keep
        # every block the next flush needs, which makes the test depend on where DuckDB put them)
        with db.open("r+b") as f:  # the agent opens the file only to flush
            f.truncate(3 * 4096)
        assert _until(lambda: _get(base + "/readyz")[0] == 503, 20), _get(base + "/readyz")
        code, why = _get(base + "/readyz")
        assert "the store cannot be judged" in why and "fleettool store check --db" in why, why
        # the injected XID 79 comes after the damage: counted, and the agent's own page is on /metrics
        assert _until(lambda: 'code="79"' in _get(base + "/metrics")[1], 20)
        metrics = _get(base + "/metrics")[1]
        pages = [ln for ln in metrics.splitlines() if ln.startswith("fleettool_alerts{")]
        assert any('rule="AgentStoreUnhealthy"' in ln and 'severity="critical"' in ln for ln in pages), pages
        assert "fleettool_agent_store_healthy" in metrics
        assert [ln for ln in metrics.splitlines() if ln.startswith("fleettool_agent_store_healthy{")][
            0
        ].endswith(" 0.0")
        assert _get(base + "/healthz")[0] == 200  # the loop goes round: a restart would not mend the file
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "the store cannot be judged" in err, err[-2000:]
    assert os.path.exists(db)  # nothing deleted
