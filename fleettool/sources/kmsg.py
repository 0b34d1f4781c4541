"""Where kernel-log lines come from, live: /dev/kmsg, `journalctl -k -f`, or a log file followed like `tail -F`.

Each source hands out lines that the kernel-log parser understands, without blocking: `read(max_lines)` returns
what is there now. /dev/kmsg records carry microseconds since boot; the source turns them into `dmesg`-style
`[uptime]` lines and knows the boot time (wall clock minus CLOCK_BOOTTIME), which the parser uses for wall time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import shutil
import subprocess
import threading
import time
from typing import Protocol

from fleettool.formats.kmsg import parse_kmsg_record
from fleettool.sources.base import SourceUnavailable


class LineSource(Protocol):
    name: str
    boot_time: float | None

    def open(self) -> None: ...

    def read(self, max_lines: int) -> list[str]: ...

    def close(self) -> None: ...


def boot_time_now() -> float:
    """Unix time of boot: what /dev/kmsg timestamps count from (dmesg -T does the same)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


class DevKmsgSource:
    """/dev/kmsg, non-blocking. from_start=False skips the backlog (the agent's default after its first start)."""

    name = "kmsg"

    def __init__(self, path: str = "/dev/kmsg", *, from_start: bool = False) -> None:
        self.path = path
        self.from_start = from_start
        self.fd: int | None = None
        self.boot_time: float | None = None
        self.lost = 0  # records the kernel overwrote before we read them

    def open(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise SourceUnavailable(f"{self.path}: {e.strerror}") from e
        if not self.from_start:
            os.lseek(self.fd, 0, os.SEEK_END)
        self.boot_time = boot_time_now()

    def read(self, max_lines: int) -> list[str]:
        if self.fd is None:
            return []
        out: list[str] = []
        while len(out) < max_lines:
            try:
                rec = os.read(self.fd, 16384)  # one record per read; a smaller buffer fails with EINVAL
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # the ring buffer overwrote records: continue from the next one
                    self.lost += 1
                    continue
                raise
            if not rec:
                break
            parsed = parse_kmsg_record(rec.decode("utf-8", "replace"))
            if parsed is None:
                continue
            _pri, _seq, usec, msg = parsed
            for i, part in enumerate(msg.split("\n")):
                if i == 0 or part.strip():
                    out.append(f"[{usec / 1e6:12.6f}] {part}")
        return out

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class JournalSource:
    """`journalctl -k -f -o short-iso`, read by a thread into a queue (the fallback where /dev/kmsg is closed)."""

    name = "journal"

    def __init__(self, argv: list[str] | None = None) -> None:
        self.argv = argv or ["journalctl", "-k", "-f", "-n", "0", "-o", "short-iso", "--no-pager"]
        self.proc: subprocess.Popen[str] | None = None
        self.q: queue.Queue[str] = queue.Queue(maxsize=100_000)
        self.boot_time: float | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        if shutil.which(self.argv[0]) is None:
            raise SourceUnavailable(f"{self.argv[0]}: not installed")
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace"
            )
        except OSError as e:
            raise SourceUnavailable(f"{self.argv[0]}: {e}") from e
        self._thread = threading.Thread(target=self._pump, name="journal-reader", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(
                queue.Full
            ):  # a flood of kernel lines: dropping beats blocking journalctl
                self.q.put(line, timeout=1.0)

    def read(self, max_lines: int) -> list[str]:
        out: list[str] = []
        while len(out) < max_lines:
            try:
                out.append(self.q.get_nowait())
            except queue.Empty:
                break
        if not out and self.proc is not None and self.proc.poll() is not None:
            raise OSError(f"journalctl exited with {self.proc.returncode}")
        return out

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


class FileFollowSource:
    """A log file followed like `tail -F`: survives rotation (new inode) and truncation."""

    name = "file"

    def __init__(self, path: str, *, from_start: bool = False) -> None:
        self.path = path
        self.from_start = from_start
        self.f: object | None = None
        self._fh = None  # type: ignore[var-annotated]
        self._ino: int | None = None
        self._rest = b""
        self.boot_time: float | None = None

    def open(self) -> None:
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open while following
        except OSError as e:
            raise SourceUnavailable(f"{self.path}: {e.strerror}") from e
        self._ino = os.fstat(self._fh.fileno()).st_ino
        if not self.from_start:
            self._fh.seek(0, os.SEEK_END)

    def _reopen_if_rotated(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        assert self._fh is not None
        if st.st_ino != self._ino:
            self._fh.close()
            self._fh = open(self.path, "rb")  # noqa: SIM115
            self._ino = st.st_ino
            self._rest = b""
        elif st.st_size < self._fh.tell():  # truncated in place (copytruncate)
            self._fh.seek(0)
            self._rest = b""

    def read(self, max_lines: int) -> list[str]:
        if self._fh is None:
            return []
        data = self._fh.read(1 << 20)
        if not data:
            self._reopen_if_rotated()
            data = self._fh.read(1 << 20)
        if not data:
            return []
        parts = (self._rest + data).split(b"\n")
        self._rest = parts.pop()
        return [p.decode("utf-8", "replace") for p in parts]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def open_auto(spec: str = "auto") -> LineSource:
    """'auto' (/dev/kmsg, else journalctl), 'kmsg', 'journal', or a file path to follow."""
    if spec in ("auto", "kmsg"):
        src: LineSource = DevKmsgSource()
        try:
            src.open()
            return src
        except SourceUnavailable:
            if spec == "kmsg":
                raise
        j = JournalSource()
        j.open()
        return j
    if spec == "journal":
        j = JournalSource()
        j.open()
        return j
    f = FileFollowSource(spec)
    f.open()
    return f
