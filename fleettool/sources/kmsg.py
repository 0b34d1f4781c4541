"""Where kernel-log lines come from, live: /dev/kmsg, `journalctl -k -f`, a FIFO, or a log file followed like
`tail -F`.

`--kmsg PATH` is read by what the path *is* (os.stat), never by its name:

| the path is             | read as                                                                     |
|-------------------------|-----------------------------------------------------------------------------|
| the kernel log device   | the /dev/kmsg record stream, non-blocking (char device 1:11, any path:      |
| (char device 1:11)      | a container's hostPath mount keeps the numbers)                             |
| a FIFO                  | a pipe, non-blocking: no writer yet, or the writer gone, is just no lines   |
| a regular file          | followed from its end like `tail -F`: survives rotation and truncation      |
| missing                 | `KmsgPathMissing`: `fleettool agent` refuses it at start (check_spec): a    |
|                         | path someone typed is meant to be read, a typo must not look like a quiet   |
|                         | kernel log; gone later (or in a library caller), unavailable like the next  |
| a directory, a socket,  | unavailable, with the reason (`SourceUnavailable`): the agent goes on and   |
| a block or other device | says so in agent_collector_available{collector="kmsg"} and an agent event   |

No source blocks: every open is O_NONBLOCK or of a regular file, and `read(max_lines)` returns what is there
now, bounded, so neither start-up nor SIGTERM waits on a kernel log. The readers themselves (and how /dev/kmsg
records become `[uptime]` lines with a known boot time) are in sources/kmsg_readers.py.
"""

from __future__ import annotations

import os
import stat

from fleettool.sources.base import SourceUnavailable
from fleettool.sources.kmsg_readers import (
    KMSG_DEVICE,
    SOURCE_HINT,
    DevKmsgSource,
    FifoSource,
    FileFollowSource,
    JournalSource,
    LineSource,
    why,
)

# the readers are imported from here by the kmsg collector and the CLI
__all__ = [
    "KEYWORDS",
    "DevKmsgSource",
    "FifoSource",
    "FileFollowSource",
    "JournalSource",
    "KmsgPathMissing",
    "LineSource",
    "check_spec",
    "open_auto",
    "source_for_path",
]

KEYWORDS = ("auto", "kmsg", "journal", "off")  # --kmsg values that are not paths


class KmsgPathMissing(SourceUnavailable):
    """An explicit --kmsg path that does not exist (refused at start, not retried quietly)."""


def source_for_path(path: str) -> LineSource:
    """The reader for what `path` is (see the module docstring), not opened yet.

    Raises KmsgPathMissing when nothing is there, SourceUnavailable (with the reason and what to give
    instead) when the path is something no kernel log is read from.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise KmsgPathMissing(f"{path}: no such file or directory; {SOURCE_HINT}") from None
    except OSError as e:
        raise SourceUnavailable(why(path, e)) from e
    mode = st.st_mode
    if stat.S_ISCHR(mode):
        dev = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if dev != KMSG_DEVICE:
            raise SourceUnavailable(
                f"{path}: character device {dev[0]}:{dev[1]}, not the kernel log (/dev/kmsg is "
                f"{KMSG_DEVICE[0]}:{KMSG_DEVICE[1]}); {SOURCE_HINT}"
            )
        return DevKmsgSource(path)
    if stat.S_ISFIFO(mode):
        return FifoSource(path)
    if stat.S_ISREG(mode):
        return FileFollowSource(path)
    what = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "not a file"
    )
    raise SourceUnavailable(f"{path}: {what}, not a kernel log; {SOURCE_HINT}")


def check_spec(spec: str) -> str | None:
    """What is wrong with a --kmsg value at start, in one line, or None. Only a missing path is refused
    (everything else that exists starts, or is reported unavailable while the agent goes on)."""
    if spec in KEYWORDS:
        return None
    try:
        source_for_path(spec)
    except KmsgPathMissing as e:
        return f"--kmsg {e}"
    except SourceUnavailable:
        return None
    return None


def open_auto(spec: str = "auto") -> LineSource:
    """'auto' (/dev/kmsg, else journalctl), 'kmsg', 'journal', or a path read by what it is; opened."""
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
    src = source_for_path(spec)
    src.open()
    return src
