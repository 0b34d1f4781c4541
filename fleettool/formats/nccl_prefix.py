"""Launcher prefixes on nccl-tests output: what mpirun, srun, torchrun, SkyPilot, kubectl, docker compose, python
logging and syslog put before each line, stripped in any combination, with the stream (rank, task or pod) each
line came from kept as a key, so that interleaved outputs of several processes parse apart.

The shapes, each with a line from fixtures/formats/nccl-tests/ (SOURCES.md there says how each was made):

    ISO / python logging        2024-05-01T12:00:15.015Z # Avg bus bandwidth    : 0
                                2024-05-01 12:00:18,018            8             2     float     sum  ...
    bracketed time              [2024-05-01 12:00:22] # Avg bus bandwidth    : 439.369
    syslog (logger -t)          May  1 12:00:22 node005 nccl-tests[29520]: # Avg bus bandwidth    : 439.369
    SkyPilot                    (head, rank=0, pid=3808) [1,0]<stdout>:# Avg bus bandwidth    : 38.5127
    mpirun --tag-output         [1,0]<stdout>:# Avg bus bandwidth    : 142.735
    torchrun --tee              [default0]:           8             2     float     sum      -1    34.84 ...
                                [rank0]:# Avg bus bandwidth    : 0
    kubectl logs --prefix       [pod/nccl-allreduce-launcher-x7k2p/mpi-launcher] 2024-05-01T12:00:22.123456811Z # ...
    srun --label                 0: # Avg bus bandwidth    : 85.5294
    a pod or host name          nccl-tests-launcher-9fz2q:            8             2     float     sum  ...
    combined                    2024-05-01T12:00:33.033Z (worker1, rank=1, pid=3700, ip=10.0.0.2) [1,0]<stdout>: # ...

and, from the tools' documented formats, mpirun --timestamp-output (`Wed May  1 12:00:22 2024`) and
docker compose logs (`SERVICE | text`).
"""

from __future__ import annotations

import re

# mpirun --tag-output tags, also found mid-line where ranks' writes interleave (nccl #1453):
#   [1,0]<stdout>:# Avg bus bandwidth    : 142.735
_RE_TAG = re.compile(r"\[\d+(?:,\d+)?\](?:<\w+>)?:?")

_TS = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"

# One launcher prefix at the start of a line (the examples are in the module docstring); the named group that
# matched (`lastgroup`) holds the rank/task/pod it came from.
_RE_PREFIX = re.compile(
    rf"""(?:
      {_TS}\s+                                                 # ISO, python logging, kubectl --timestamps
    | \[{_TS}\]:?\s*                                           # [2024-05-01 12:00:00]
    | [A-Z][a-z]{{2}}\s+\d{{1,2}}\s\d{{2}}:\d{{2}}:\d{{2}}\s+(?P<syslog>[\w.-]+)\s+
        (?:[\w./-]+(?:\[\d+\])?:\s+)?                          # syslog: host, then an optional tag[pid]:
    | [A-Z][a-z]{{2}}\s[A-Z][a-z]{{2}}\s+\d{{1,2}}\s\d{{2}}:\d{{2}}:\d{{2}}\s\d{{4}}\s?  # mpirun --timestamp-output
    | \((?P<sky>[\w.-]+(?:,\s*\w+=[^,()\s]*)+)\)\s*            # SkyPilot (head, rank=0, pid=3808[, ip=...])
    | (?P<mpi>\[\d+(?:,\d+)?\])(?:<\w+>)?:?\s?                 # mpirun --tag-output [1,0]<stdout>:
    | (?P<torch>\[(?:default|rank)\d+\]):\s?                   # torchrun --tee: [default0]: / [rank0]:
    | (?P<pod>\[pod/[^\]\s]+\])\s?                             # kubectl logs --prefix
    | \s*(?P<srun>\d+):\s                                      # srun --label
    | (?P<host>(?=[a-z0-9.-]*[-0-9])[a-z0-9][a-z0-9.-]*):\s    # pod or host name: (kubectl -l, pdsh)
    | (?P<compose>[\w.-]+)\s+\|\s                              # docker compose logs
    )""",
    re.X,
)


def split_prefix(line: str) -> tuple[str, str]:
    """(stream key, text): the launcher prefixes at the start of a line stripped, in any order and combination
    (timestamps, syslog host, SkyPilot, mpirun --tag-output, srun --label, torchrun, kubectl pod prefixes), and
    mpirun's rank tags removed from the rest of the line. The key names the rank, task or pod the line came from,
    so interleaved outputs of several processes parse as separate streams."""
    s = line.rstrip("\r\n")
    keys: list[str] = []
    pos = 0
    for _ in range(8):
        m = _RE_PREFIX.match(s, pos)
        if m is None or m.end() == pos:
            break
        if m.lastgroup:
            keys.append(m.group(m.lastgroup))
        pos = m.end()
    text = s[pos:]
    if "[" in text:
        text = _RE_TAG.sub(" ", text)
    return "|".join(keys), text


def clean_line(line: str) -> str:
    """The line with its launcher prefixes stripped (see split_prefix)."""
    return split_prefix(line)[1]
