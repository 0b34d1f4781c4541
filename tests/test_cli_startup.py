"""Start-up discipline of the `fleettool` command (issue 33 part 3). Not timed (bench/startup.py measures):
what is imported, and that the cheap paths give the same answers as the ones they stand in for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from fleettool.cli import app
from fleettool.cli.typer_fast import _MISS, fast_value, install

HEAVY = ("duckdb", "numpy", "pyarrow", "polars", "pydantic", "textual", "torch", "pynvml", "yaml")


def _imported_by(argv: list[str]) -> list[str]:
    """The heavy modules in sys.modules after `fleettool ARGV` ran in a fresh interpreter (argv [] imports only)."""
    code = (
        "import sys, json\n"
        f"sys.argv = ['fleettool'] + {argv!r}\n"
        "import fleettool.cli as c\n"
        "if len(sys.argv) > 1:\n"
        "    try:\n"
        "        c.main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return json.loads(p.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["agent", "--help"],
        ["alerts", "--help"],
        ["replay", "--help"],
        ["rules", "list", "--help"],
    ],
)
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    assert _imported_by(argv) == []


def _params() -> list[tuple[str, Any, Any]]:
    out = []

    def walk(cmd: Any, path: str) -> None:
        for p in cmd.params:
            out.append((f"{path} {p.name}", cmd, p))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "fleettool")
    return out


SAMPLES: dict[Any, list[Any]] = {
    str: ["x", "", "a b", "-", "0"],
    int: ["5", "0", "1", "-3", "007", "+5", " 5", "1_000", "abc", "4", "65535", "65536", "3.0", 5, 0, 2**40],
    float: ["0.5", "1", "0", "1e3", "nan", "inf", "-0.0", ".5", "0.001", "0.0001", 2, 2.5, "x"],
    Path: ["/tmp", "", "-", "rel/x", Path("/nonexistent/x"), "/dev/null"],
    bool: [True, False],
}


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    """Equal outcome, value and type (nan included: repr), a list item by item."""

    def key(v: Any) -> Any:
        if isinstance(v, list):
            return ("list", [key(x) for x in v])
        return (type(v).__name__, repr(v))

    return a[0] == b[0] and key(a[1]) == key(b[1])


def test_fast_values_equal_typers_for_every_option(tmp_path: Path) -> None:
    install()
    checked = fast = 0
    for where, cmd, p in _params():
        d = p.type_descriptor
        ann = d.annotation
        inner = typer.main.get_args(ann)[0] if typer.main.get_origin(ann) is list else ann
        samples = list(SAMPLES.get(inner, []))
        if p.default is not None and not callable(p.default):
            samples.append(p.default)
        if inner is not ann:  # lists: each sample alone, and two together
            samples = [[s] for s in samples] + [tuple(samples[:2])]
        ctx = Context(cmd)
        for v in samples:
            want: Any
            try:
                want = ("ok", build_runtime_param(d)._coerce_value(v, param=p, ctx=ctx))
            except BadParameter as e:
                want = ("bad", e.format_message())
            got = fast_value(v, ann, d.parameter_info, p, ctx)
            if got is not _MISS:
                fast += 1
                assert _same(("ok", got), want), f"{where} {v!r}"
            # through typer's own parameter (the installed path): the same outcome as typer's adapter
            try:
                seen: Any = ("ok", p.get_runtime_param()._coerce_value(v, param=p, ctx=ctx))
            except BadParameter as e:
                seen = ("bad", e.format_message())
            assert _same(seen, want), f"{where} {v!r}"
            checked += 1
    assert checked > 1000 and fast > checked // 3, (checked, fast)


def test_commands_table_names_what_each_module_registers() -> None:
    """fleettool.cli.COMMANDS (which module `fleettool NAME` imports) against what the functions register."""
    import importlib

    from typer.main import get_command_name

    from fleettool.cli import COMMANDS

    for module, register, names in COMMANDS:
        a = typer.Typer()
        getattr(importlib.import_module(f"fleettool.cli.{module}"), register)(a)
        got = [c.name or get_command_name(c.callback.__name__) for c in a.registered_commands if c.callback]
        got += [g.name or g.typer_instance.info.name for g in a.registered_groups if g.typer_instance]
        assert tuple(got) == names, (module, register)
    full = typer.main.get_command(app)
    assert sorted(getattr(full, "commands", {})) == sorted(n for _, _, ns in COMMANDS for n in ns)


def test_a_command_imports_no_other_commands_module() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['fleettool', 'alerts', '--help']\n"
        "import fleettool.cli as c\n"
        "try:\n"
        "    c.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('fleettool.cli.') and m.endswith('_cmd')), "
        "file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().splitlines()[-1] == "['fleettool.cli.alerts_cmd']", p.stderr[-2000:]


def test_burnin_tests_written_out_are_the_steps() -> None:
    from fleettool.burnin.steps import ALL_TESTS
    from fleettool.cli.burnin_cmd import TESTS

    assert TESTS == ALL_TESTS


def test_help_of_every_command_imports_no_burnin_steps() -> None:
    """`fleettool --help` builds every command: none of them may import the burn-in's steps to do it."""
    code = (
        "import sys\n"
        "sys.argv = ['fleettool', '--help']\n"
        "import fleettool.cli as c\n"
        "try:\n"
        "    c.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('fleettool.burnin.steps' in sys.modules, file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().splitlines()[-1] == "False", p.stderr[-2000:]


def test_a_plain_replay_imports_no_agent_module(tmp_path: Path) -> None:
    """`fleettool replay FILE` (no --as-agent) runs without the agent's flush and scheduler modules."""
    rec = tmp_path / "tiny.om"
    rec.write_text(
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",Hostname="n1"} 40 1700000000\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",Hostname="n1"} 41 1700000001\n'
        "# EOF\n"
    )
    db = tmp_path / "t.duckdb"
    code = (
        "import sys\n"
        f"sys.argv = ['fleettool', 'replay', {str(rec)!r}, '--db', {str(db)!r}, '-q']\n"
        "import fleettool.cli as c\n"
        "try:\n"
        "    c.main()\n"
        "except SystemExit as e:\n"
        "    print('exit', e.code, file=sys.stderr)\n"
        "print(sorted(m for m in sys.modules if m.startswith('fleettool.agent')), file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert lines[-2:] == ["exit 0", "[]"], p.stderr[-2000:]
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM samples").fetchall() == [(2,)]
    con.close()


def _cli_modules_after(argv: list[str]) -> list[str]:
    """The command modules (fleettool.cli.*_cmd) in sys.modules after `fleettool ARGV` ran in a fresh interpreter."""
    code = (
        "import sys\n"
        f"sys.argv = ['fleettool'] + {argv!r}\n"
        "import fleettool.cli as c\n"
        "try:\n"
        "    c.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('fleettool.cli.') and m.endswith('_cmd')), "
        "file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return json.loads(p.stderr.strip().splitlines()[-1].replace("'", '"'))


@pytest.mark.parametrize("argv", [["--help"], []])
def test_root_help_imports_no_command_module(argv: list[str]) -> None:
    """`fleettool --help` (and `fleettool` alone) lists the commands from LISTING: it builds none of them."""
    assert _cli_modules_after(argv) == []


def test_an_unknown_command_still_hears_of_every_name() -> None:
    """The lazy root builds every command for a name it does not know: typer's suggestion sees them all."""
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv = ['fleettool', 'incidnets']; import fleettool.cli as c; c.main()",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert (
        p.stderr
        == "fleettool: No such command 'incidnets'. Did you mean 'incidents'? (see 'fleettool --help')\n"
    )


def test_listing_is_what_the_built_commands_say_at_every_width() -> None:
    from typer._click.utils import make_default_short_help

    from fleettool.cli import LISTING

    full = typer.main.get_command(app)
    built = [(n, c) for n, c in getattr(full, "commands", {}).items() if not c.hidden]
    assert [n for n, _ in LISTING] == [n for n, _ in built]
    for (name, text), (_, cmd) in zip(LISTING, built, strict=True):
        for limit in range(1, 400):
            assert make_default_short_help(text, limit) == cmd.get_short_help_str(limit), (name, limit)


@pytest.mark.parametrize("width", [40, 80, 120, 200])
def test_root_help_is_byte_for_byte_the_full_apps(width: int) -> None:
    """The lazy root's help against the one of the app with every command built, at terminal widths."""
    from fleettool.cli import _LazyGroup, _typer

    def help_of(cmd: Any) -> str:
        ctx = Context(cmd, info_name="fleettool", terminal_width=width)
        return str(cmd.get_help(ctx))

    lazy = typer.main.get_command(_typer(_LazyGroup))
    assert isinstance(lazy, _LazyGroup) and not lazy.commands
    assert help_of(lazy) == help_of(typer.main.get_command(app))
    assert not lazy.commands  # the listing built nothing
    assert lazy.get_command(Context(lazy), "gpus") is not None  # a name looked up is built, with its module's
    assert sorted(lazy.commands) == ["events", "gpus", "nccl"]


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    p = subprocess.run(
        [sys.executable, "-c", "import sys; from fleettool.cli import main; main()", "demo", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return db


READ = ["alerts", "events", "gpus", "incidents"]


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    import os

    code = "import sys; from fleettool.cli import main; main()"
    full = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, env=full | env, timeout=120
    )


@pytest.mark.parametrize("cmd", READ)
def test_a_read_command_loads_neither_duckdbs_python_layer_nor_rich(cmd: str, demo_db: Path) -> None:
    """A read command connects through DuckDB's engine alone and prints a piped table without rich: neither
    the `duckdb` package (its relations, Arrow sources, version lookup) nor rich is imported, nor socket
    (the host name is for writers)."""
    code = (
        "import sys, io\n"
        f"sys.argv = ['fleettool', {cmd!r}, '--db', {str(demo_db)!r}]\n"
        "import fleettool.cli as c\n"
        "out, sys.stdout = sys.stdout, io.StringIO()\n"
        "try:\n"
        "    c.main()\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "table, sys.stdout = sys.stdout.getvalue(), out\n"
        "print(code, len(table.splitlines()) > 1, sorted(m for m in ('duckdb', 'rich', 'socket') if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip().splitlines()[-1] == "0 True []", p.stdout + p.stderr[-2000:]


@pytest.mark.parametrize("columns", [None, "200", "120", "80", "40"])
@pytest.mark.parametrize("cmd", READ)
def test_a_read_commands_table_is_richs_byte_for_byte(cmd: str, columns: str | None, demo_db: Path) -> None:
    """The demo store's tables, piped, printed without rich against rich's (FORCE_COLOR set empty: rich
    renders it, unstyled as piped), at every width."""
    env = {} if columns is None else {"COLUMNS": columns}
    plain = _run([cmd, "--db", str(demo_db)], env)
    rich = _run([cmd, "--db", str(demo_db)], env | {"FORCE_COLOR": ""})
    assert plain.returncode == rich.returncode == 0, plain.stderr[-2000:] + rich.stderr[-2000:]
    assert len(plain.stdout.splitlines()) > 1  # the header and rows
    assert plain.stdout == rich.stdout


def _table_lines(heads: list[str], grid: list[list[Any]], width: int | None, plain: bool) -> list[str]:
    from fleettool.cli.output import FLEX_MIN, GAP, _cell, _plain_lines, _rich_lines
    from fleettool.views import fit_columns

    keep, sized = list(range(len(heads))), {}
    if width is not None:
        widths = [max(len(h), *(len(_cell(g[i])) for g in grid)) for i, h in enumerate(heads)]
        keep, sized = fit_columns(heads, widths, width, (), flex_min=FLEX_MIN, gap=GAP)
        if not sized:
            return []  # rich squeezes: the plain path is not taken
    return _plain_lines(heads, grid, keep, sized) if plain else _rich_lines(heads, grid, keep, sized, width)


_CELL = st.one_of(
    st.none(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=100),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(
    ncols=st.integers(1, 7),
    data=st.data(),
    width=st.one_of(st.none(), st.integers(10, 250)),
)
def test_plain_table_lines_are_richs(ncols: int, data: st.DataObject, width: int | None) -> None:
    """Any table of printable ASCII, piped or fitted to a width, laid out without rich as rich lays it out."""
    heads = data.draw(
        st.lists(
            st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12),
            min_size=ncols,
            max_size=ncols,
        )
    )
    nrows = data.draw(st.integers(1, 5))
    # columns of mixed kinds too: a column of numbers (None among them) is right-aligned, any other left
    grid = [data.draw(st.lists(_CELL, min_size=ncols, max_size=ncols)) for _ in range(nrows)]
    assert _table_lines(heads, grid, width, plain=True) == _table_lines(heads, grid, width, plain=False)


def test_plain_table_cuts_long_cells_and_aligns_numbers_as_rich_does() -> None:
    heads = ["n", "summary", "x"]
    grid = [[1, "a" * 120, 2.5], [1234567, "b", None], [None, "c d  ", 1e-7]]
    for width in (None, 40, 60, 120, 300):
        lines = _table_lines(heads, grid, width, plain=True)
        assert lines == _table_lines(heads, grid, width, plain=False)
    assert _table_lines(heads, grid, None, plain=True)[1].endswith(
        "a" * 79 + "…    2.5"
    )  # X is as wide as 1e-07


def test_incidents_of_a_store_with_incidents_imports_no_fold(demo_db: Path) -> None:
    """The fold (and its inputs: topology, bursts, hashlib) is for a store with alerts and no incidents only."""
    code = (
        "import sys, io\n"
        f"sys.argv = ['fleettool', 'incidents', '--db', {str(demo_db)!r}]\n"
        "import fleettool.cli as c\n"
        "out, sys.stdout = sys.stdout, io.StringIO()\n"
        "try:\n"
        "    c.main()\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "sys.stdout = out\n"
        "print(code, sorted(m for m in sys.modules if m.startswith('fleettool.incidents.')))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip().splitlines()[-1] == "0 ['fleettool.incidents.model']", p.stdout + p.stderr[-2000:]


def test_incidents_of_a_store_without_them_are_folded_from_its_alerts(demo_db: Path, tmp_path: Path) -> None:
    import shutil

    import duckdb

    db = tmp_path / "no-incidents.duckdb"
    shutil.copy(demo_db, db)
    con = duckdb.connect(str(db))
    stored = con.execute("SELECT incident_id FROM incidents").fetchall()
    con.execute("DELETE FROM incidents")
    con.close()
    assert stored
    with_them = _run(["incidents", "--db", str(demo_db), "--json"], {})
    folded = _run(["incidents", "--db", str(db), "--json"], {})
    assert folded.returncode == 0, folded.stderr[-2000:]
    assert (
        folded.stderr.decode() == f"note: {db} holds no incidents; folded {len(stored)} from its alerts now\n"
    )
    assert [i["id"] for i in json.loads(folded.stdout)] == [i["id"] for i in json.loads(with_them.stdout)]
