"""The agent's HTTP transport: one asyncio loop on a daemon thread, bounded in every direction.

Every node's agent listens on a port any pod (or kubelet probe) can reach, so a client must never be able to stop
it, slow it, or grow it:

- A client that hangs up early costs one closed connection: writes to a dead peer raise in this loop and end
  that connection only (the process ignores SIGPIPE; see fleettool/cli/__init__.py).
- A connection costs a coroutine, not a thread. The request line and headers must arrive within
  `header_timeout_s` (whole, not per byte, so a slowloris drip cannot hold one open) and within
  `max_header_bytes`; a response must drain within `write_timeout_s`; an idle keep-alive connection closes after
  `idle_timeout_s`.
- At most `max_connections` are open (512, or half the process's file descriptors). When one more arrives, the
  oldest connection that has been sending its request for over a second is closed to make room (a scraper sends
  its request at once; a slowloris never finishes), and only when there is none is the newcomer refused with 503.
- Rendering /metrics runs on a pool of `workers` threads, and concurrent scrapes of the same encoding share one
  rendering (single flight): 200 scrapes at once cost one rendering, not 200, and never hold up the loop.
- The listen backlog is `backlog` (the kernel's somaxconn caps it), not socketserver's 5.

The server's own counts (`fleettool_http_*`) are served on /metrics beside the agent's series.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

Probe = Callable[[], tuple[bool, str]]  # (healthy, one line saying why)
Render = Callable[[str], tuple[bytes, str]]  # Accept header -> (body, content type)


def _connection_cap(most: int = 512) -> int:
    """At most `most` connections, and at most half the file descriptors the process may open (DuckDB, the
    kernel log and NVML need the rest)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return most
    return most if soft == resource.RLIM_INFINITY else max(16, min(most, soft // 2))


@dataclass(frozen=True)
class Limits:
    backlog: int = 128
    max_connections: int = field(default_factory=_connection_cap)
    workers: int = 2
    header_timeout_s: float = 10.0
    write_timeout_s: float = 30.0
    idle_timeout_s: float = 60.0
    max_header_bytes: int = 16384


@dataclass(frozen=True)
class Auth:
    """Who may ask: basic-auth users (name -> bcrypt hash) and the paths answered without asking."""

    users: Mapping[str, bytes]
    open_paths: frozenset[str] = frozenset()


@dataclass
class Counts:
    """The server's own counts, served as fleettool_http_* series."""

    requests: dict[str, int] = field(default_factory=dict)  # by status code
    evicted: int = 0  # closed to make room: had not sent a whole request
    refused: int = 0  # 503: every open connection was busy answering
    timeouts: int = 0  # a request that did not arrive, or a response that did not drain, in time
    hangups: int = 0  # the client closed or reset before its answer was written
    renders: int = 0
    open: int = 0

    def metrics(self, labels: Mapping[str, str]) -> Iterator[Metric]:
        """The counts as series, each with `labels` (the node's identity) added."""
        names, values = list(labels), list(labels.values())
        req = CounterMetricFamily(
            "fleettool_http_requests", "Requests answered by the agent's port", labels=[*names, "code"]
        )
        for code, n in sorted(self.requests.items()):
            req.add_metric([*values, code], n)
        yield req
        for name, value, helptext in (
            ("evicted", self.evicted, "Connections closed to make room before they sent a whole request"),
            (
                "refused",
                self.refused,
                "Connections refused with 503: every open connection was busy answering",
            ),
            (
                "timeouts",
                self.timeouts,
                "Requests that did not arrive, or answers that did not drain, in time",
            ),
            ("hangups", self.hangups, "Clients that closed the connection before their answer was written"),
            ("renders", self.renders, "Renderings of /metrics (concurrent scrapes share one)"),
        ):
            fam = CounterMetricFamily(f"fleettool_http_connections_{name}", helptext, labels=names)
            fam.add_metric(values, value)
            yield fam
        gauge = GaugeMetricFamily("fleettool_http_connections_open", "Connections open now", labels=names)
        gauge.add_metric(values, self.open)
        yield gauge


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


@dataclass
class _Conn:
    writer: asyncio.StreamWriter
    since: float
    reading: bool = True  # True until its request is whole: such a connection may be evicted


@dataclass
class _Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]


class _Reject(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


def _parse_head(head: bytes) -> _Request:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise _Reject(400, "undecodable request") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Reject(400, "not an HTTP/1.x request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Reject(400, "malformed header line")
        headers[name.lower()] = value.strip()
    method, target, version = parts
    path = target.split("?", 1)[0] or "/"
    return _Request(method, path, version, headers)


class HttpServer:
    """Serve `render` on /metrics and `probes` on their paths. Bound in the constructor (OSError when the port
    cannot be: the caller names it); answers on a daemon thread until `shutdown()`."""

    def __init__(
        self,
        addr: str,
        port: int,
        render: Render,
        probes: Mapping[str, Probe],
        index: bytes,
        limits: Limits | None = None,
        tls: ssl.SSLContext | None = None,
        auth: Auth | None = None,
        check_password: Callable[[bytes, bytes], bool] | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.counts = Counts()
        self._render, self._probes, self._index = render, probes, index
        self._tls, self._auth, self._check_password = tls, auth, check_password
        self._verified: set[bytes] = set()  # digests of credentials bcrypt accepted (bcrypt costs ~0.1 s)
        family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]  # "::" is IPv6, "0.0.0.0" IPv4
        self.sock = socket.create_server((addr, port), family=family, backlog=self.limits.backlog)
        self.server_address = self.sock.getsockname()
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="metrics-render")
        self._auth_pool = ThreadPoolExecutor(1, thread_name_prefix="metrics-auth")
        self._conns: dict[int, _Conn] = {}
        self._inflight: dict[str, asyncio.Future[tuple[bytes, str]]] = {}
        self._loop = asyncio.new_event_loop()
        self._stopped = threading.Event()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="metrics-server", daemon=True)
        self._thread.start()
        started.wait(10.0)

    # the loop's thread ------------------------------------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                self._connection,
                sock=self.sock,
                limit=self.limits.max_header_bytes,
                ssl=self._tls,
                ssl_handshake_timeout=self.limits.header_timeout_s if self._tls else None,
            )

        server = self._loop.run_until_complete(start())
        started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for c in list(self._conns.values()):
                c.writer.transport.abort()
            tasks = asyncio.all_tasks(self._loop)
            for t in tasks:
                t.cancel()
            # every connection's task ends here, its exception retrieved: no "never retrieved" at exit
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()
            self._stopped.set()

    def shutdown(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._stopped.wait(10.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._auth_pool.shutdown(wait=False, cancel_futures=True)

    def _make_room(self) -> bool:
        """At the cap: close the oldest connection that has been sending its request for longer than a client
        that means it takes (a scraper sends it at once). False when there is none: every connection is busy
        answering or has only just connected."""
        grace = min(1.0, self.limits.header_timeout_s / 2)
        now = time.monotonic()
        readers = [(c.since, k) for k, c in self._conns.items() if c.reading and now - c.since >= grace]
        if not readers:
            return False
        _, key = min(readers)
        self._conns.pop(key).writer.transport.abort()
        self.counts.evicted += 1
        return True

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = id(writer)
        if len(self._conns) >= self.limits.max_connections and not self._make_room():
            self.counts.refused += 1
            await self._respond(writer, 503, b"too many connections; try again\n", keep=False)
            writer.transport.abort()
            return
        conn = self._conns[key] = _Conn(writer, time.monotonic())
        self.counts.open = len(self._conns)
        try:
            first = True
            while True:
                conn.reading, conn.since = True, time.monotonic()
                wait = self.limits.header_timeout_s if first else self.limits.idle_timeout_s
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        self.counts.hangups += 1
                    return
                except asyncio.LimitOverrunError:
                    await self._respond(writer, 431, b"request headers too large\n", keep=False)
                    return
                except asyncio.TimeoutError:
                    if first:
                        self.counts.timeouts += 1
                    return
                conn.reading, first = False, False
                keep = await self._answer(head, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.TimeoutError, ssl.SSLError, OSError):
            self.counts.hangups += 1
        except asyncio.CancelledError:
            pass
        finally:
            self._conns.pop(key, None)
            self.counts.open = len(self._conns)
            writer.close()

    async def _answer(self, head: bytes, writer: asyncio.StreamWriter) -> bool:
        try:
            req = _parse_head(head)
        except _Reject as e:
            return await self._respond(writer, e.status, f"{e}\n".encode(), keep=False)
        keep = req.version == "HTTP/1.1" and req.headers.get("connection", "").lower() != "close"
        if req.headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in req.headers:
            keep = False  # a body we do not read: this connection cannot carry another request
        if req.method not in ("GET", "HEAD"):
            return await self._respond(writer, 405, b"only GET and HEAD\n", keep, [("Allow", "GET, HEAD")])
        if not await self._authorised(req):
            return await self._respond(
                writer, 401, b"unauthorized\n", keep, [("WWW-Authenticate", 'Basic realm="fleettool"')]
            )
        head_only = req.method == "HEAD"
        if req.path == "/metrics":
            body, ctype = await self._metrics(req.headers.get("accept", ""))
            extra = []
            if "gzip" in req.headers.get("accept-encoding", ""):
                body = await self._loop.run_in_executor(self._pool, gzip.compress, body)
                extra.append(("Content-Encoding", "gzip"))
            return await self._respond(writer, 200, body, keep, extra, ctype, head_only)
        if req.path in self._probes:
            try:
                ok, why = self._probes[req.path]()
            except Exception as e:  # a probe that cannot answer is a failing probe, not a dead connection
                ok, why = False, f"the probe failed: {type(e).__name__}: {e}"
            status = 200 if ok else 503
            return await self._respond(
                writer, status, f"{'ok' if ok else 'not ok'}: {why}\n".encode(), keep, head_only=head_only
            )
        if req.path == "/":
            return await self._respond(writer, 200, self._index, keep, head_only=head_only)
        msg = f"no {req.path} here: try /metrics, {', '.join(sorted(self._probes))}\n"
        return await self._respond(writer, 404, msg.encode(), keep, head_only=head_only)

    async def _authorised(self, req: _Request) -> bool:
        if self._auth is None or req.path in self._auth.open_paths:
            return True
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self._auth.users.get(user)
        if not sep or hashed is None or self._check_password is None:
            return False
        digest = hashlib.sha256(f"{user}\0{password}\0".encode() + hashed).digest()
        if digest in self._verified:
            return True
        check = self._check_password
        ok = await self._loop.run_in_executor(self._auth_pool, lambda: check(password.encode(), hashed))
        if ok:
            self._verified.add(digest)
        return bool(ok)

    def _metrics(self, accept: str) -> Awaitable[tuple[bytes, str]]:
        """The rendering for this Accept header: the one in flight if there is one, else a new one."""
        kind = "om" if "application/openmetrics-text" in accept else "text"
        fut = self._inflight.get(kind)
        if fut is None:
            self.counts.renders += 1
            fut = self._loop.run_in_executor(self._pool, self._render, accept)
            self._inflight[kind] = fut
            fut.add_done_callback(lambda _f: self._inflight.pop(kind, None))
        return asyncio.shield(fut)

    async def _respond(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        keep: bool,
        extra: list[tuple[str, str]] | None = None,
        ctype: str = "text/plain; charset=utf-8",
        head_only: bool = False,
    ) -> bool:
        code = str(status)
        self.counts.requests[code] = self.counts.requests.get(code, 0) + 1
        headers = [("Content-Type", ctype), *(extra or [])]
        headers += [
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "keep-alive" if keep else "close"),
        ]
        out = f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers
        )
        writer.write(out.encode("latin-1") + b"\r\n" + (b"" if head_only else body))
        try:
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)
        except asyncio.TimeoutError:
            self.counts.timeouts += 1
            return False
        return keep
