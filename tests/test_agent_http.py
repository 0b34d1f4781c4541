"""The agent's port survives its clients: early hang-ups, slowloris, a crowd of scrapes, and it speaks TLS and
basic auth when told to (a web config in the Prometheus exporters' format).

Each test drives a real `fleettool agent` process (fake GPUs) or the real server over real sockets on loopback.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bcrypt
import pytest

from fleettool.export.http import HttpServer, Limits
from tests.conftest import run_cli
from tests.test_agent import AgentProcess

FAKE = ("--source", "fake", "--kmsg", "off", "--dcgm-exporter", "off", "--interval", "0.5s")
SIGPIPE_BIT = 1 << (13 - 1)  # SIGPIPE is signal 13; /proc/PID/status SigIgn is a mask of bit (signal - 1)


def _status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    with AgentProcess("--db", str(tmp_path / "a.duckdb"), "--gpus", "8", *FAKE) as ag:
        ag.wait_metrics("fleettool_gpu_temp_celsius")
        yield ag


def test_the_agent_ignores_sigpipe(agent: AgentProcess) -> None:
    """A write to a closed socket must be an error of that write, never a signal that kills the process."""
    assert int(_status(agent.proc.pid, "SigIgn"), 16) & SIGPIPE_BIT


def test_clients_that_hang_up_early_cost_their_connection_not_the_agent(agent: AgentProcess) -> None:
    for i in range(60):
        s = socket.create_connection(("127.0.0.1", agent.port))
        path = "/healthz" if i % 2 else "/metrics"
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        if i % 3 == 0:  # hang up with a reset (SO_LINGER 0), as a timed-out probe's kernel may
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    time.sleep(0.5)
    assert agent.proc.poll() is None, f"the agent died: {agent.proc.returncode}"
    status, body = _get(agent.port, "/healthz")
    assert status == 200, body
    rc, err, _ = agent.stop()
    assert rc == 0, err
    assert "stopped after" in err  # the final flush and its line: the agent ended as SIGTERM ends it


def test_half_sent_requests_hold_no_thread_and_do_not_starve_a_scrape(agent: AgentProcess) -> None:
    """Slowloris: 600 connections that never finish their headers. A thread per connection (the old server)
    held 600 threads; here they cost coroutines, the oldest are evicted past the cap (512), and a scrape is
    answered at once."""
    threads_before = int(_status(agent.proc.pid, "Threads"))
    held = []
    for i in range(600):
        if i == 400:
            time.sleep(1.2)  # the first 400 are now old enough to be evicted for newcomers
        s = socket.create_connection(("127.0.0.1", agent.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line that ends the headers
        held.append(s)
    try:
        time.sleep(0.5)
        threads = int(_status(agent.proc.pid, "Threads"))
        assert threads <= threads_before + 4, (threads_before, threads)
        t0 = time.monotonic()
        status, body = _get(agent.port, "/metrics")
        assert status == 200 and "fleettool_gpu_temp_celsius" in body
        assert time.monotonic() - t0 < 5
        evicted = [
            ln for ln in body.splitlines() if ln.startswith("fleettool_http_connections_evicted_total")
        ]
        assert evicted and float(evicted[0].split()[-1]) >= 600 - 512
    finally:
        for s in held:
            s.close()
    assert agent.proc.poll() is None


def test_two_hundred_concurrent_scrapes_all_answered_by_few_renders(agent: AgentProcess) -> None:
    start = threading.Barrier(200)

    def scrape(_: int) -> int:
        start.wait()
        return _get(agent.port, "/metrics", timeout=30)[0]

    with ThreadPoolExecutor(200) as pool:
        codes = list(pool.map(scrape, range(200)))
    assert codes.count(200) == 200, {c: codes.count(c) for c in set(codes)}
    _, body = _get(agent.port, "/metrics")
    renders = next(
        ln for ln in body.splitlines() if ln.startswith("fleettool_http_connections_renders_total")
    )
    assert float(renders.split()[-1]) < 200  # concurrent scrapes share a rendering


# the server alone, with small limits -------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[HttpServer]:
    srv = HttpServer(
        "127.0.0.1",
        0,
        lambda accept: (b"m 1\n", "text/plain; version=0.0.4"),
        {"/healthz": lambda: (True, "fine"), "/readyz": lambda: (False, "not yet")},
        b"index\n",
        Limits(max_connections=4, header_timeout_s=1.0, idle_timeout_s=0.5, max_header_bytes=1024),
    )
    yield srv
    srv.shutdown()


def _exchange(port: int, data: bytes, wait: float = 3.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_a_request_that_does_not_arrive_in_time_is_closed_and_counted(server: HttpServer) -> None:
    port = server.server_address[1]
    t0 = time.monotonic()
    assert _exchange(port, b"GET /metrics HTTP/1.1\r\n") == b""  # closed, unanswered
    assert 0.9 < time.monotonic() - t0 < 3
    assert server.counts.timeouts == 1


def test_keep_alive_probes_methods_and_oversized_headers(server: HttpServer) -> None:
    port = server.server_address[1]
    two = _exchange(
        port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    assert two.count(b"HTTP/1.1 ") == 2 and b"ok: fine" in two and b"503 Service Unavailable" in two
    assert _exchange(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.1 405")
    big = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 4096 + b"\r\n\r\n"
    assert _exchange(port, big).startswith(b"HTTP/1.1 431")
    assert _exchange(port, b"GET /nope HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert _exchange(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_at_the_cap_a_busy_server_refuses_with_503_rather_than_queueing(server: HttpServer) -> None:
    """Connections that have sent their request are never evicted; when all are busy, a newcomer gets 503."""
    gate = threading.Event()
    server._render = lambda accept: (gate.wait(5), (b"m 1\n", "text/plain"))[
        1
    ]  # a render that takes its time
    port = server.server_address[1]
    busy = []
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        busy.append(s)
    time.sleep(0.3)
    try:
        assert _exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 503")
        assert server.counts.refused == 1 and server.counts.evicted == 0
    finally:
        gate.set()
        for s in busy:
            assert s.recv(100).startswith(b"HTTP/1.1 200")
            s.close()


# TLS and basic auth --------------------------------------------------------------------------------------------


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


def test_tls_and_basic_auth_from_a_web_config(tmp_path: Path, tls_files: tuple[Path, Path]) -> None:
    crt, key = tls_files
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        f"tls_server_config:\n  cert_file: {crt.name}\n  key_file: {key}\nbasic_auth_users:\n  prom: '{hashed}'\n"
    )
    ctx = ssl.create_default_context(cafile=str(crt))
    with AgentProcess("--db", str(tmp_path / "a.duckdb"), "--web-config-file", str(cfg), *FAKE) as ag:
        url = f"https://127.0.0.1:{ag.port}"

        def get(path: str, user: str | None = None, password: str = "") -> int:
            req = urllib.request.Request(url + path)
            if user is not None:
                req.add_header(
                    "Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
                )
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return e.code

        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                if get("/healthz") == 200:  # probes answer without a password
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert get("/healthz") == 200
        assert get("/metrics") == 401
        assert get("/metrics", "prom", "wrong") == 401
        assert get("/metrics", "nobody", "s3cret") == 401
        assert get("/metrics", "prom", "s3cret") == 200
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to a TLS port is no answer
            urllib.request.urlopen(f"http://127.0.0.1:{ag.port}/healthz", timeout=5).read()
        rc, err, _ = ag.stop()
        assert rc == 0, err


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("basic_auth_users:\n  prom: plaintext\n", 2, "must be a bcrypt hash"),
        ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n", 2, "no such file"),
        ("tls_server_config:\n  cipher_suites: [x]\n", 2, "does not implement"),
        ("bogus: 1\n", 1, "unknown key bogus"),
        ("basic_auth_users: [\n", 2, "not YAML"),
    ],
)
def test_a_web_config_that_cannot_be_used_stops_the_start_naming_file_and_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(text)
    r = run_cli(
        "agent", "--db", str(tmp_path / "a.duckdb"), "--web-config-file", str(cfg), *FAKE, "--duration", "1s"
    )
    assert r.returncode == 3, r.stderr
    (msg,) = r.stderr.strip().splitlines()
    assert f"{cfg}:{line}:" in msg and says in msg and "--web-config-file" in msg


def test_a_reader_that_closes_stdout_ends_a_command_quietly_with_141() -> None:
    """`fleettool rules list | head -1`: status 141 as SIGPIPE gives any Unix tool, nothing on stderr, and not
    click's exit 1 ("found a failure"), now that SIGPIPE itself stays ignored."""
    exe = Path(sys.executable).parent / "fleettool"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write (its output would fit a pipe's buffer)
    p = subprocess.Popen([str(exe), "rules", "list"], stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    assert p.stderr is not None
    assert p.wait(timeout=60) == 141
    assert p.stderr.read() == b""


def test_swapped_cert_and_key_are_named_as_such(tmp_path: Path, tls_files: tuple[Path, Path]) -> None:
    crt, key = tls_files
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {key}\n  key_file: {crt}\n")
    r = run_cli(
        "agent", "--db", str(tmp_path / "a.duckdb"), "--web-config-file", str(cfg), *FAKE, "--duration", "1s"
    )
    assert r.returncode == 3, r.stderr
    assert f"{cfg}:2: cert_file: {key} is not a PEM certificate" in r.stderr
