"""The exit-code contract, table-driven: every command against every bad input that applies to it.

Each row runs the real `fleettool` in a subprocess and asserts the exact exit code (fleettool/cli/exit_codes.py),
exactly one line on stderr, starting `fleettool:` and naming the thing (the file, option, port or tool), no
traceback and no internal error (the last-resort handler's line is a bug, not an answer). Files given as a
database that are not fleettool's come back byte for byte unchanged, and a failing command creates nothing.
A command without a row fails `test_every_command_has_a_row`, so a new command cannot escape the contract.

The rows run once, in parallel threads (each is a subprocess), then each row is its own test.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleettool.cli import app
from fleettool.cli.exit_codes import ExitCode
from tests.conftest import SCENARIOS, run_cli

USAGE, BAD_INPUT, NOT_OURS, DB_ERROR, UNAVAILABLE = (
    int(ExitCode.USAGE),
    int(ExitCode.BAD_INPUT),
    int(ExitCode.STORE_CORRUPT),
    int(ExitCode.STORE_ERROR),
    int(ExitCode.UNAVAILABLE),
)
DAMAGED = int(ExitCode.STORE_DAMAGED)
# tools a command may need; the rows that strip PATH check none of them is left on it
TOOLS = ("scontrol", "kubectl", "ssh", "srun", "dcgmi", "all_reduce_perf")
NO_TOOLS_PATH = str(Path(sys.executable).parent)  # fleettool and python only
FILES = ("foreign", "text", "garbage")  # files that are not fleettool stores: they must come back unchanged
NEVER_CREATED = ("missing", "nodir")  # paths a failing command must not create


@dataclass(frozen=True)
class Case:
    cmd: tuple[str, ...]  # the command path ("alerts", "ack"), for the coverage check
    args: tuple[str, ...]  # the rest of the command line; {placeholders} name files made for the row
    code: int
    names: str  # what the one stderr line must contain (placeholders allowed)
    why: str
    no_tools: bool = False  # run with a PATH that has none of TOOLS
    node_unchanged: str | None = None  # this node of {store} must still be healthy with no audit trail

    @property
    def id(self) -> str:
        return f"{' '.join(self.cmd)}: {self.why}"


AGENT = (
    "--source",
    "fake",
    "--kmsg",
    "off",
    "--dcgm-exporter",
    "off",
    "--duration",
    "5s",
    "-q",
    "--no-rules",
)
RECORD = ("--out", "{emptydir}/rec", "--source", "fake", "--duration", "2s")

READERS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("events",), ()),
    (("nccl",), ()),
    (("gpus",), ()),
    (("alerts",), ()),
    (("incidents",), ()),
    (("incidents", "show"), ("0123",)),
    (("silence", "list"), ()),
    (("baselines",), ()),
    (("report",), ()),
    (("node",), ("gpu-17",)),
    (("tui",), ()),
]
# writers that create a new store, and those that need an existing one
CREATORS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("agent",), AGENT),
    (("replay",), ("{fixture}", "-q")),
    (("demo",), ()),  # --db keeps the demo's store
    (("burnin",), ("--node", "{host}", "--backend", "cpu", "--tests", "gemm")),
]
NEEDERS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    # a silence in a new file would silence nothing
    (("silence", "add"), ("--node", "gpu-17", "--for", "1h")),
    # a lifecycle move in a mistyped --db would cordon the node in a throwaway file
    (("node",), ("gpu-17", "cordon", "-m", "test")),
    (("alerts", "ack"), ("0123456789abcdef",)),
    (("alerts", "resolve"), ("0123456789abcdef",)),
    (("silence", "expire"), ("0123456789ab",)),
    (("baselines",), ("--update",)),
    (("export",), ("--to", "{emptydir}/fleet")),
    # a remediation reads the fleet's alerts and records its episode: a mistyped --db must not plan on nothing
    (("remediate",), ("gpu-17",)),
]


def _db_cases() -> Iterator[Case]:
    foreign = "{foreign}: not a fleettool database (it has tables: a, events); nothing was changed"
    common = [
        ("text", "{text}: not a DuckDB database", "a text file as --db"),
        ("garbage", "{garbage}: not a DuckDB database", "random bytes as --db"),
        ("foreign", foreign, "another program's DuckDB as --db"),
        ("emptydir", "{emptydir}: is a directory", "a directory as --db"),
    ]
    nodir_creating = ("{nodir}: cannot create the database", "--db in a missing dir")
    nodir_reading = ("{nodir}: no such database", "--db in a missing dir")
    missing = ("{missing}: no such database", "no such --db")
    for role, table, cases in (
        ("reads", READERS, [("missing", *missing), ("nodir", *nodir_reading)]),
        ("creates", CREATORS, [("nodir", *nodir_creating)]),
        ("updates", NEEDERS, [("missing", *missing), ("nodir", *nodir_reading)]),
    ):
        for cmd, extra in table:
            for key, names, why in cases:  # a --db that does not exist is a missing path like any other
                yield Case(cmd, (*extra, "--db", "{" + key + "}"), BAD_INPUT, names, f"{why} ({role})")
            for key, names, why in common:
                yield Case(cmd, (*extra, "--db", "{" + key + "}"), NOT_OURS, names, f"{why} ({role})")


def _path_cases() -> Iterator[Case]:
    bad_paths = [
        ("{missing}", "{missing}", "a path that does not exist"),
        ("{emptydir}", "{emptydir}", "an empty directory"),
        ("{garbage}", "{garbage}", "a garbage file"),
    ]
    for arg, names, why in bad_paths:
        yield Case(("replay",), (arg, "--db", "{new}"), BAD_INPUT, names, why)
        yield Case(("demo",), (arg,), BAD_INPUT, names, why)
        yield Case(("rules", "test"), (arg,), BAD_INPUT, names, why)
        for cmd in (("rules", "list"), ("rules", "check"), ("rules", "export")):
            yield Case(cmd, ("--rules", arg), BAD_INPUT, names, f"--rules: {why}")
        yield Case(("report",), ("--fleet", arg), BAD_INPUT, names, f"--fleet: {why}")
        yield Case(("fleet", "alerts"), ("--fleet", arg), BAD_INPUT, names, f"--fleet: {why}")
        yield Case(("fleet", "incidents"), ("--fleet", arg), BAD_INPUT, names, f"--fleet: {why}")
        yield Case(("tui",), ("--fleet", arg), BAD_INPUT, names, f"--fleet: {why}")
    yield Case(("rules", "export"), ("-o", "{nodir}"), BAD_INPUT, "{nodir}", "-o into a missing directory")
    with_rules = tuple(a for a in AGENT if a != "--no-rules")
    yield Case(
        ("agent",),
        (*with_rules, "--db", "{new}", "--rules", "{missing}"),
        BAD_INPUT,
        "{missing}",
        "no such --rules",
    )
    # --rules adds to the built-in set: a rule named as a built-in one is refused, naming its file
    clash = "{clash}: rule 'GpuThermalSlowdown' is also a built-in rule (rules/thermal.yaml)"
    no_builtin = "--no-builtin-rules needs --rules"
    for cmd, base in (
        (("rules", "list"), ()),
        (("rules", "check"), ()),
        (("rules", "export"), ()),
        (("replay",), ("{fixture}", "-q", "--db", "{new}")),
        (("agent",), (*with_rules, "--db", "{new}")),
    ):
        yield Case(cmd, (*base, "--rules", "{clash}"), BAD_INPUT, clash, "--rules names a built-in rule")
        yield Case(
            cmd, (*base, "--no-builtin-rules"), USAGE, no_builtin, "--no-builtin-rules without --rules"
        )
    yield Case(
        ("agent",),
        (*AGENT, "--db", "{new}", "--recording", "{missing}"),
        BAD_INPUT,
        "{missing}",
        "no such --recording",
    )
    yield Case(("record",), ("--out", "{text}", "--source", "fake"), BAD_INPUT, "{text}", "--out is a file")
    yield Case(("export",), ("--db", "{store}", "--to", "{text}"), DB_ERROR, "{text}", "--to is a file")


def _number_cases() -> Iterator[Case]:
    yield Case(("events",), ("--db", "{store}", "--limit", "-1"), USAGE, "--limit", "--limit -1")
    yield Case(("events",), ("--db", "{store}", "--limit", "many"), USAGE, "--limit", "--limit not a number")
    for cmd, base in ((("agent",), (*AGENT, "--db", "{new}")), (("record",), RECORD)):
        yield Case(cmd, (*base, "--interval", "0s"), USAGE, "--interval", "--interval 0s")
        yield Case(cmd, (*base, "--interval", "-1s"), USAGE, "--interval", "--interval -1s")
        yield Case(cmd, (*base, "--gpus", "0"), USAGE, "--gpus", "--gpus 0")
        yield Case(
            cmd,
            (*base, "--gpus", "8", "--inject", "xid:79@gpu=99"),
            USAGE,
            "gpu=99",
            "--inject on GPU 99 of 8",
        )
    yield Case(("agent",), (*AGENT, "--db", "{new}", "--flush", "0"), USAGE, "--flush", "--flush 0")
    yield Case(
        ("agent",), (*AGENT, "--db", "{new}", "--metrics-port", "0"), USAGE, "--metrics-port", "port 0"
    )
    yield Case(
        ("agent",),
        (*AGENT, "--db", "{new}", "--metrics-port", "{port}", "--metrics-addr", "127.0.0.1"),
        UNAVAILABLE,
        "127.0.0.1:{port} is in use",
        "--metrics-port in use",
    )
    yield Case(
        ("silence", "add"), ("--db", "{store}", "--node", "n", "--for", "0"), USAGE, "--for", "--for 0"
    )
    yield Case(
        ("silence", "add"), ("--db", "{store}", "--gpu", "-1", "--node", "n"), USAGE, "--gpu", "--gpu -1"
    )
    yield Case(("alerts", "ack"), ("x", "--db", "{store}", "--for", "-1h"), USAGE, "--for", "--for -1h")
    yield Case(("burnin",), ("--node", "{host}", "--duration", "0s", "--no-store"), USAGE, "--duration", "0s")
    yield Case(("burnin",), ("--node", "{host}", "--tests", "gemm,nope"), USAGE, "--tests", "unknown test")
    yield Case(("tui",), ("--db", "{store}", "--refresh", "0"), USAGE, "--refresh", "--refresh 0")
    yield Case(("alerts",), ("--db", "{store}", "--state", "open"), USAGE, "--state", "--state not a state")
    yield Case(
        ("incidents",), ("--db", "{store}", "--state", "open"), USAGE, "--state", "--state not a state"
    )
    yield Case(
        ("incidents", "show"),
        ("0123", "--db", "{store}"),
        BAD_INPUT,
        "0123: no incident starts with that id in {store}",
        "an incident id that is not there",
    )
    yield Case(
        ("silence", "add"),
        ("--db", "{store}", "--node", "n", "--start", "soon"),
        USAGE,
        "--start",
        "--start not an ISO 8601 time",
    )
    yield Case(("node",), ("gpu-17", "explode", "--db", "{store}"), USAGE, "explode", "unknown action")
    yield Case(
        ("remediate",), ("gpu-17", "--db", "{store}", "--via", "pigeon"), USAGE, "--via", "--via unknown"
    )
    yield Case(
        ("remediate",),
        ("gpu-17", "--db", "{store}", "--from", "prayer"),
        USAGE,
        "--from",
        "--from not a rung",
    )


def _tool_cases() -> Iterator[Case]:
    for flag, tool in (("--slurm", "scontrol"), ("--k8s", "kubectl")):
        yield Case(
            ("node",),
            ("gpu-17", "cordon", flag, "--db", "{store}"),
            UNAVAILABLE,
            f"{tool}: not found on PATH (needed by {flag}",
            f"cordon {flag} without {tool}",
            no_tools=True,
            node_unchanged="gpu-17",
        )
    for via, tool in (("ssh", "ssh"), ("slurm", "srun"), ("k8s", "kubectl")):
        yield Case(
            ("burnin",),
            ("--node", "gpu-17", "--via", via, "--db", "{store}"),
            UNAVAILABLE,
            f"{tool}: not found on PATH (needed by --via {via}",
            f"--via {via} without {tool}",
            no_tools=True,
        )
    yield Case(
        ("burnin",),
        ("--node", "{host}", "--tests", "dcgm", "--no-store"),
        UNAVAILABLE,
        "dcgmi: not found on PATH (needed by --tests dcgm",
        "--tests dcgm without dcgmi",
        no_tools=True,
    )


def _damaged_cases() -> Iterator[Case]:
    """A fleettool store whose header is damaged: exit 9 naming it, never 4 (locked) or 70 (a bug)."""
    line = "{damaged}: the database is damaged"
    for cmd, extra in READERS:
        yield Case(cmd, (*extra, "--db", "{damaged}"), DAMAGED, line, "a damaged store (reads)")
    yield Case(("store", "check"), ("--db", "{damaged}"), DAMAGED, line, "a damaged store")
    for cmd in (("store", "check"), ("store", "salvage")):
        yield Case(cmd, ("--db", "{missing}"), BAD_INPUT, "{missing}: no such database", "no such --db")
        yield Case(cmd, ("--db", "{text}"), NOT_OURS, "{text}: not a DuckDB database", "a text file as --db")
    yield Case(("store", "salvage"), ("--db", "{store}", "--out", "{text}"), USAGE, "--out", "--out exists")


def _issue29_cases() -> Iterator[Case]:
    """The command fixes of issue 29: each refuses at once, with its one line."""
    yield Case(
        ("alerts", "resolve"),
        ("3f2", "--db", "{store}"),
        BAD_INPUT,
        "no alert '3f2' in {store} (an id, or a unique prefix of at least 4 characters)",
        "an id prefix under 4 characters",
    )
    yield Case(
        ("record",),
        ("--out", "{emptydir}/rec", "--source", "fake", "--recording", "{garbage}", "--duration", "10m"),
        int(ExitCode.NOT_TESTED),
        "nothing can be recorded into {emptydir}/rec: nvml: fake source cannot play {garbage}",
        "no collector can start: at once, not after --duration",
    )
    yield Case(
        ("burnin",),
        ("--via", "local", "--node", "gpu-17", "--backend", "cpu", "--db", "{new}"),
        USAGE,
        "--via local runs here",
        "--via local naming another host",
    )


CASES = [
    *_db_cases(),
    *_path_cases(),
    *_number_cases(),
    *_tool_cases(),
    *_damaged_cases(),
    *_issue29_cases(),
]


@dataclass
class Outcome:
    case: Case
    subst: dict[str, str]
    proc: subprocess.CompletedProcess[str]
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    node_state: tuple[str, int] | None = None


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _foreign_duckdb(path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE events (id INTEGER, what VARCHAR)")
    con.execute("INSERT INTO events VALUES (1, 'theirs')")
    con.execute("CREATE TABLE a (x INTEGER)")
    con.close()


def _materialise(case: Case, d: Path, template: Path, port: int) -> dict[str, str]:
    """Make the files this row names, in its own directory, and return the placeholder values."""
    d.mkdir(parents=True)
    text = " ".join(case.args) + " " + case.names
    subst = {
        "missing": str(d / "no-such-thing"),
        "nodir": str(d / "no-such-dir" / "fleet.duckdb"),
        "new": str(d / "new.duckdb"),
        "emptydir": str(d / "empty"),
        "port": str(port),
        "fixture": str(SCENARIOS / "gpu-fell-off-bus"),
        "host": socket.gethostname().split(".")[0],
        "text": str(d / "notes.txt"),
        "garbage": str(d / "garbage.bin"),
        "foreign": str(d / "theirs.duckdb"),
        "store": str(d / "store.duckdb"),
    }
    (d / "empty").mkdir()
    subst["clash"] = str(d / "clash.yaml")
    if "{clash}" in text:  # a site's rule file with a rule named as a built-in one
        Path(subst["clash"]).write_text(
            "groups: [{name: site, rules: [{alert: GpuThermalSlowdown, kind: threshold, metric: gpu_temp_c, "
            "value: 85, severity: warning, category: thermal, action: none, summary: hot}]}]\n"
        )
    if "{text}" in text:
        Path(subst["text"]).write_text("not a database, somebody's notes\n" * 50)
    if "{garbage}" in text:
        Path(subst["garbage"]).write_bytes(random.Random(case.id).randbytes(4096))
    if "{foreign}" in text:
        _foreign_duckdb(Path(subst["foreign"]))
    if "{store}" in text:
        shutil.copy(template, subst["store"])
    subst["damaged"] = str(d / "damaged.duckdb")
    if "{damaged}" in text:  # a fleettool store with its header blocks overwritten (the magic bytes kept)
        shutil.copy(template, subst["damaged"])
        with open(subst["damaged"], "r+b") as f:
            f.seek(12)
            f.write(b"\xa5" * (3 * 4096 - 12))
    return subst


def _run(case: Case, d: Path, template: Path, port: int) -> Outcome:
    subst = _materialise(case, d, template, port)
    args = [a.format(**subst) for a in case.args]
    env = {"FLEETTOOL_DB": str(d / "default.duckdb")}  # nothing lands in the repository
    if case.no_tools:
        env["PATH"] = NO_TOOLS_PATH
    out = Outcome(case, subst, subprocess.CompletedProcess([], 0))
    out.before = {k: _sha(Path(subst[k])) for k in FILES if Path(subst[k]).exists()}
    out.proc = run_cli(*case.cmd, *args, timeout=60, env=env)
    out.after = {k: _sha(Path(subst[k])) for k in FILES if Path(subst[k]).exists()}
    if case.node_unchanged:
        from fleettool.store import Store

        with Store(subst["store"], read_only=True) as st:
            state = (
                st.scalar("SELECT state FROM node_states WHERE node = ?", [case.node_unchanged]) or "healthy"
            )
            trail = int(
                st.scalar("SELECT count(*) FROM node_audit WHERE node = ?", [case.node_unchanged]) or 0
            )
        out.node_state = (str(state), trail)
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    from fleettool.store import Store

    root = tmp_path_factory.mktemp("matrix")
    template = root / "template.duckdb"
    Store(template).close()  # a real (empty) fleettool store, copied into each row that needs one
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        with ThreadPoolExecutor(max_workers=max(2, min(8, (os.cpu_count() or 2) * 2))) as pool:
            futs = {
                c.id: pool.submit(_run, c, root / f"row{i:03d}", template, port) for i, c in enumerate(CASES)
            }
            return {k: f.result() for k, f in futs.items()}
    finally:
        busy.close()


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_every_command_has_a_row() -> None:
    import typer.main

    def leaves(cmd: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        if hasattr(cmd, "commands"):  # a group
            out = [path] if cmd.invoke_without_command else []
            for name, sub in cmd.commands.items():
                out += leaves(sub, (*path, name))
            return out
        return [path]

    root = typer.main.get_command(app)
    commands = {p for name, c in root.commands.items() for p in leaves(c, (name,))}  # type: ignore[attr-defined]
    assert len(commands) >= 20
    covered = {c.cmd for c in CASES}
    assert commands - covered == set(), "commands with no row in the exit-code matrix"
    assert covered - commands == set(), "rows for commands that do not exist"


def test_no_tool_is_left_on_the_stripped_path() -> None:
    left = [t for t in TOOLS if shutil.which(t, path=NO_TOOLS_PATH)]
    assert left == [], f"{left} in {NO_TOOLS_PATH}: the missing-tool rows would not test anything"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_exit_contract(case: Case, outcomes: dict[str, Outcome]) -> None:
    o = outcomes[case.id]
    p = o.proc
    shown = f"exit {p.returncode}\nstderr:\n{p.stderr[-1500:]}\nstdout:\n{p.stdout[-500:]}"
    assert "Traceback" not in p.stderr + p.stdout, shown
    assert "internal error" not in p.stderr, shown
    assert p.returncode == case.code, shown
    lines = p.stderr.splitlines()
    assert len(lines) == 1, shown
    assert lines[0].startswith("fleettool: "), shown
    assert case.names.format(**o.subst) in lines[0], shown
    assert o.before == o.after, f"a file that is not fleettool's was changed\n{shown}"
    for key in NEVER_CREATED:
        assert not Path(o.subst[key]).exists(), f"{o.subst[key]} was created\n{shown}"
    assert not list(Path(o.subst["emptydir"]).iterdir()), (
        f"a failing command wrote into {o.subst['emptydir']}"
    )
    if case.node_unchanged:
        assert o.node_state == ("healthy", 0), shown


def test_a_foreign_store_keeps_its_own_table(tmp_path: Path) -> None:
    """Beyond the checksum: the other program's `events` table is still theirs after every write command."""
    import duckdb

    theirs = tmp_path / "theirs.duckdb"
    _foreign_duckdb(theirs)
    for args in (
        ("silence", "add", "--node", "gpu-1", "--for", "1h"),
        ("node", "gpu-1", "suspect"),
        ("replay", str(SCENARIOS / "gpu-fell-off-bus"), "-q"),
        ("agent", *AGENT),
    ):
        r = run_cli(*args, "--db", str(theirs), timeout=60)
        assert r.returncode == NOT_OURS and "nothing was changed" in r.stderr, (args, r.stderr)
    con = duckdb.connect(str(theirs), read_only=True)
    try:
        assert con.execute("SELECT * FROM events").fetchall() == [(1, "theirs")]
        cols = [r[0] for r in con.execute("DESCRIBE events").fetchall()]
        assert cols == ["id", "what"]
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert tables == {"events", "a"}
    finally:
        con.close()
