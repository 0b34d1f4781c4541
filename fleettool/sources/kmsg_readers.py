"""The kernel-log line readers: /dev/kmsg records, a FIFO, `journalctl -k -f`, and a regular file followed like
`tail -F`. None blocks: every open is O_NONBLOCK or of a regular file, and `read(max_lines)` returns what is there
now, bounded. Which reader a `--kmsg` value gets is decided in sources/kmsg.py.

/dev/kmsg records carry a sequence number and microseconds since boot (Documentation/ABI/testing/dev-kmsg in
the kernel tree); the reader gives them as (seq, usec, message), or as `dmesg`-style `[uptime]` lines, and knows
the boot's wall time, fixed once (sources/kmsg_boot.py says how and why).
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import shutil
import stat
import subprocess
import threading
from typing import BinaryIO, NoReturn, Protocol

from fleettool.formats.kmsg_entries import parse_kmsg_record
from fleettool.sources.base import SourceUnavailable
from fleettool.sources.kmsg_boot import boot_wall_time

KMSG_DEVICE = (1, 11)  # major, minor of /dev/kmsg (Documentation/admin-guide/devices.txt)
MAX_READ_BYTES = 1 << 20  # per read() call of a pipe or file: a flood is read over several ticks
SOURCE_HINT = "give /dev/kmsg, a FIFO or a log file; or --kmsg auto, journal or off"


class LineSource(Protocol):
    name: str
    boot_time: float | None

    def open(self) -> None: ...

    def read(self, max_lines: int) -> list[str]: ...

    def close(self) -> None: ...


def why(path: str, e: OSError) -> str:
    msg = f"{path}: {e.strerror or e}"
    if e.errno in (errno.EPERM, errno.EACCES):
        msg += " (reading the kernel log needs CAP_SYSLOG where kernel.dmesg_restrict=1, or read access to a file)"
    return msg


class DevKmsgSource:
    """/dev/kmsg, non-blocking, from the first record the ring buffer still holds (the kernel's own position for
    a new reader): what was printed while the agent was down is read at its start, and the kmsg collector skips
    what the store already holds by (boot id, sequence number). from_start=False skips the backlog instead.

    require_device=False reads a stand-in for the device (a regular file or a FIFO holding records in the
    device's `pri,seq,usec,flags;message` format, one a line), which is how the tests play a kernel log that
    was written while the agent was down, without writing to this machine's /dev/kmsg."""

    name = "kmsg"

    def __init__(
        self, path: str = "/dev/kmsg", *, from_start: bool = True, require_device: bool = True
    ) -> None:
        self.path = path
        self.from_start = from_start
        self.require_device = require_device
        self.fd: int | None = None
        self.boot_time: float | None = None  # the wall time of boot as fixed at the first open (kmsg_boot.py)
        self.lost = 0  # records the kernel overwrote before we read them
        self._rest = b""  # a stand-in's partial last line

    def open(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise SourceUnavailable(why(self.path, e)) from e
        try:
            st = os.fstat(fd)
            dev = (os.major(st.st_rdev), os.minor(st.st_rdev))
            if self.require_device and (not stat.S_ISCHR(st.st_mode) or dev != KMSG_DEVICE):
                raise SourceUnavailable(
                    f"{self.path}: not the kernel log device (a /dev/kmsg is character device "
                    f"{KMSG_DEVICE[0]}:{KMSG_DEVICE[1]}); {SOURCE_HINT}"
                )
            if not self.from_start and not stat.S_ISFIFO(st.st_mode):
                os.lseek(fd, 0, os.SEEK_END)
        except OSError as e:
            os.close(fd)
            raise SourceUnavailable(why(self.path, e)) from e
        except SourceUnavailable:
            os.close(fd)
            raise
        self.fd, self._rest = fd, b""
        if self.boot_time is None:  # fixed once: a reopen after a clock step keeps it
            self.boot_time = boot_wall_time()

    def _raw(self, max_records: int) -> list[bytes]:
        assert self.fd is not None
        out: list[bytes] = []
        if not self.require_device:  # a stand-in: records one a line
            try:
                data = os.read(self.fd, MAX_READ_BYTES)
            except BlockingIOError:
                data = b""
            parts = (self._rest + data).split(b"\n")
            self._rest = parts.pop()
            return [p for p in parts if p and not p.startswith(b" ")]
        while len(out) < max_records:  # one record per read(): bounded by records
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
            out.append(rec)
        return out

    def read_records(self, max_records: int) -> list[tuple[int, int, str]]:
        """(sequence number, microseconds since boot, the message's first line) of the records there now."""
        if self.fd is None:
            return []
        out = []
        for rec in self._raw(max(max_records, 1)):
            parsed = parse_kmsg_record(rec.decode("utf-8", "replace"))
            if parsed is not None:
                _pri, seq, usec, msg = parsed
                out.append((seq, usec, msg.split("\n", 1)[0]))
        return out

    def read(self, max_lines: int) -> list[str]:
        """The records as dmesg's `[uptime] message` lines."""
        return [f"[{usec / 1e6:12.6f}] {msg}" for _seq, usec, msg in self.read_records(max_lines)]

    def wait_fd(self) -> int | None:
        """The device's fd: select() says readable when a new record is there (the agent wakes on it)."""
        return self.fd if self.require_device else None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class FifoSource:
    """A named pipe (`mkfifo`), read without blocking: opening it needs no writer, a writer that has not come
    yet or has gone away reads as no lines, and a FIFO removed and made again is reopened."""

    name = "fifo"

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self._ino: int | None = None
        self._rest = b""
        self.boot_time: float | None = None

    def open(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: returns at once, writer or not
        except OSError as e:
            raise SourceUnavailable(why(self.path, e)) from e
        st = os.fstat(fd)
        if not stat.S_ISFIFO(st.st_mode):
            os.close(fd)
            raise SourceUnavailable(f"{self.path}: no longer a FIFO; {SOURCE_HINT}")
        self.fd, self._ino = fd, st.st_ino

    def _reopen_if_replaced(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # gone for now: keep the open one
        if stat.S_ISFIFO(st.st_mode) and st.st_ino != self._ino:
            self.close()
            self.open()

    def read(self, max_lines: int) -> list[str]:
        if self.fd is None:
            return []
        data = b""
        eof = False
        while len(data) < MAX_READ_BYTES:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:  # a writer is there, nothing to read now
                break
            if not chunk:  # no writer (yet, or any more)
                eof = True
                break
            data += chunk
        if eof:
            self._reopen_if_replaced()
        parts = (self._rest + data).split(b"\n")
        self._rest = parts.pop()
        if eof and self._rest:  # the writer left without a final newline: the line is complete
            parts.append(self._rest)
            self._rest = b""
        return [p.decode("utf-8", "replace") for p in parts[:max_lines]]

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
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                errors="replace",
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
            # it printed its last lines just before it exited: the reader thread may not have queued them yet
            if self._thread is not None and self._thread.is_alive():
                self._thread.join(timeout=1.0)
                return self.read(max_lines) if not self.q.empty() else self._exited()
            self._exited()
        return out

    def _exited(self) -> NoReturn:
        assert self.proc is not None
        raise OSError(f"journalctl exited with {self.proc.returncode}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


class FileFollowSource:
    """A regular log file followed like `tail -F`: survives rotation (new inode) and truncation."""

    name = "file"

    def __init__(self, path: str, *, from_start: bool = False) -> None:
        self.path = path
        self.from_start = from_start
        self._fh: BinaryIO | None = None
        self._ino: int | None = None
        self._rest = b""
        self.boot_time: float | None = None

    def _open_regular(self) -> BinaryIO:
        # O_NONBLOCK: if the path was swapped for a FIFO between stat and open, the open still returns
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise SourceUnavailable(f"{self.path}: no longer a regular file; {SOURCE_HINT}")
        self._ino = st.st_ino
        return os.fdopen(fd, "rb")

    def open(self) -> None:
        try:
            self._fh = self._open_regular()
        except OSError as e:
            raise SourceUnavailable(why(self.path, e)) from e
        if not self.from_start:
            self._fh.seek(0, os.SEEK_END)

    def _reopen_if_rotated(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return  # rotated away and not made again yet: keep reading the old one
        assert self._fh is not None
        if st.st_ino != self._ino:
            if not stat.S_ISREG(st.st_mode):
                return  # replaced by something that is not a file: stay on the old one
            try:
                fh = self._open_regular()
            except (OSError, SourceUnavailable):
                return
            self._fh.close()
            self._fh = fh
            self._rest = b""
        elif st.st_size < self._fh.tell():  # truncated in place (copytruncate)
            self._fh.seek(0)
            self._rest = b""

    def read(self, max_lines: int) -> list[str]:
        if self._fh is None:
            return []
        data = self._fh.read(MAX_READ_BYTES)
        if not data:
            self._reopen_if_rotated()
            data = self._fh.read(MAX_READ_BYTES)
        if not data:
            return []
        parts = (self._rest + data).split(b"\n")
        self._rest = parts.pop()
        return [p.decode("utf-8", "replace") for p in parts]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
