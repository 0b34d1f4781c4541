"""Slurm jobs from `sacct --parsable2` output (fields separated by `|`, no trailing `|`, a header line).

Format: sacct(1), https://slurm.schedmd.com/sacct.html (`--parsable2`, `--format=JobID,JobName,NodeList,Start,
End,State`, the JOB STATE CODES). Any column order; at least JobID, JobName, NodeList, Start, End and State.
States as sacct prints them: `CANCELLED by 1000` (state CANCELLED, detail `by 1000`), `NODE_FAIL`, `RUNNING` with
End `Unknown`; `None assigned` (a pending job's NodeList) is no node. Job steps (`4711.0`, `4711.batch`,
`4711.extern`) fold into their job (4711): their nodes join the job's. Times are sacct's local time, read as
UTC. Pure: lines in, jobs and issues out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleettool.formats.errors import ParseIssue
from fleettool.formats.hostlist import HostlistError, expand

REQUIRED = ("jobid", "jobname", "nodelist", "start", "end", "state")
_NO_TIME = {"", "unknown", "none", "n/a"}


@dataclass
class Job:
    job_id: str
    name: str = ""
    nodes: list[str] = field(default_factory=list)
    start: float | None = None
    end: float | None = None
    state: str = ""
    state_detail: str = ""
    line: int = 0


def is_header(line: str) -> bool:
    cols = {c.strip().lower() for c in line.split("|")}
    return "jobid" in cols and len(cols & {"jobname", "nodelist", "start", "end", "state"}) >= 2


def _time(text: str, tz: dt.tzinfo | None = None) -> float | None:
    """sacct's local time in `tz` (the cluster's zone; None: UTC) as unix seconds."""
    t = text.strip()
    if t.lower() in _NO_TIME:
        return None
    try:
        return dt.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=tz or dt.timezone.utc).timestamp()
    except ValueError:
        raise ValueError(f"not a sacct time: {text!r} (YYYY-MM-DDTHH:MM:SS or Unknown)") from None


def parse_sacct(
    lines: Iterable[str], path: str = "-", tz: dt.tzinfo | None = None
) -> tuple[list[Job], list[ParseIssue]]:
    jobs: dict[str, Job] = {}
    issues: list[ParseIssue] = []
    cols: list[str] | None = None
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if cols is None:
            if not is_header(line):
                issues.append(
                    ParseIssue(path, lineno, "no sacct --parsable2 header (JobID|JobName|...) first")
                )
                return [], issues
            cols = [c.strip().lower() for c in line.split("|")]
            missing = [c for c in REQUIRED if c not in cols]
            if missing:
                issues.append(
                    ParseIssue(
                        path,
                        lineno,
                        f"the header lacks {', '.join(missing)} (sacct --format=JobID,JobName,NodeList,Start,End,State)",
                    )
                )
                return [], issues
            continue
        cells = line.split("|")
        if len(cells) != len(cols):
            issues.append(ParseIssue(path, lineno, f"{len(cells)} fields where the header has {len(cols)}"))
            continue
        row = dict(zip(cols, cells, strict=True))
        jid = row["jobid"].strip()
        if not jid:
            issues.append(ParseIssue(path, lineno, "no JobID"))
            continue
        try:
            nodelist = row["nodelist"].strip()
            nodes = [] if nodelist.lower() in ("", "none assigned", "none") else expand(nodelist)
            start, end = _time(row["start"], tz), _time(row["end"], tz)
        except HostlistError as e:
            issues.append(ParseIssue(path, lineno, f"bad NodeList: {e}"))
            continue
        except ValueError as e:
            issues.append(ParseIssue(path, lineno, str(e)))
            continue
        base, dot, _step = jid.partition(".")
        job = jobs.setdefault(base, Job(base, line=lineno))
        for n in nodes:
            if n not in job.nodes:
                job.nodes.append(n)
        if (
            dot
        ):  # a step: its nodes only; the job's own line gives the rest (or the first step, until it comes)
            if not job.state:
                job.start = start if job.start is None else job.start
            continue
        state, _, detail = row["state"].strip().partition(" ")
        job.name, job.start, job.end, job.state, job.state_detail = row["jobname"], start, end, state, detail
        job.line = lineno
    if cols is None:
        issues.append(ParseIssue(path, 1, "empty: no sacct header"))
    return list(jobs.values()), issues
