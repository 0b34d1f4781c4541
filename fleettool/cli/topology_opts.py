"""`--topology FILE` (repeatable) and `--rack-label`, declared once for replay, the agent, the fleet commands and
the TUI, and the one loader they share.

A file given that does not exist or cannot be read stops the command before it starts: exit 3, one line naming
the file. A file read whose content is no topology or jobs file (topology.conf, sacct --parsable2, kubectl get
nodes -o json, a node,rack,nvlink_domain,leaf CSV) is named on stderr as skipped and the rest are read; replay,
which reads what it is given and nothing else, refuses it instead (exit 3).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleettool.cli.common import die
from fleettool.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    from fleettool.agent.topology import TopologyRefresh
    from fleettool.sources.base import GpuSource
    from fleettool.store import Store

DEFAULT_RACK_LABEL = "topology.kubernetes.io/rack"

TopologyOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--topology",
        help="a topology or jobs file to read as well (repeatable): Slurm topology.conf, sacct --parsable2, "
        "kubectl get nodes -o json, a node,rack,nvlink_domain,leaf CSV",
    ),
]
RackLabelOpt = Annotated[str, typer.Option("--rack-label", help="the Kubernetes node label naming the rack")]


@dataclass(frozen=True)
class TopologyFiles:
    paths: tuple[Path, ...] = ()
    rack_label: str = DEFAULT_RACK_LABEL


def topology_files(paths: list[Path] | None, rack_label: str = DEFAULT_RACK_LABEL) -> TopologyFiles:
    """The --topology files, each checked readable now: exit 3 naming the first that is not."""
    for p in paths or []:
        if not p.exists():
            raise die(f"{p}: no such file or directory (--topology)", ExitCode.BAD_INPUT)
        if p.is_dir():
            raise die(f"{p}: is a directory, not a topology or jobs file (--topology)", ExitCode.BAD_INPUT)
        if not os.access(p, os.R_OK):
            raise die(f"{p}: cannot read it: permission denied (--topology)", ExitCode.BAD_INPUT)
    return TopologyFiles(tuple(paths or ()), rack_label)


def load_topology(
    store: Store, files: TopologyFiles, *, refuse_other: bool = False, quiet: bool = False
) -> list[Any]:
    """Each file into the store as the topology or jobs file its content says it is; the FileReports. A file of
    other content: named on stderr as skipped (refuse_other: exit 3). A file that cannot be read: exit 3.
    quiet: nothing on stderr (the TUI's reloads, once the start has said it)."""
    from fleettool.agent.topology import read_topology_file

    reports: list[Any] = []
    for p in files.paths:
        try:
            reports.append(read_topology_file(store, p, files.rack_label))
        except OSError as e:
            raise die(f"{p}: cannot read it: {e.strerror or e} (--topology)", ExitCode.BAD_INPUT) from None
        except ValueError as e:
            if refuse_other:
                raise die(f"{e}", ExitCode.BAD_INPUT) from None
            if not quiet:
                print(f"fleettool: note: {e}: skipped (--topology)", file=sys.stderr)
    for r in [] if quiet else reports:
        for issue in r.issues[:20]:
            print(f"fleettool: {issue}", file=sys.stderr)
    return reports


def say_topology(store: Store) -> None:
    """What the store now holds of topology and jobs, on stderr ('topology: 16 nodes in 2 leaves, 1 spine')."""
    from fleettool.ingest.read_topology import summary_lines

    for line in summary_lines(store):
        print(f"fleettool: {line}", file=sys.stderr)


def agent_topology(
    node: str,
    files: TopologyFiles,
    jobs_from: str | None,
    topology_from: str | None,
    source: GpuSource | None,
) -> TopologyRefresh:
    """The agent's topology sources; a live source that is unknown is exit 2, one whose tool is missing exit 8."""
    from fleettool.agent.topology import JOBS_FROM, TOPOLOGY_FROM, TopologyRefresh, check_tool

    for given, known, hint in (
        (jobs_from, JOBS_FROM, "--jobs-from"),
        (topology_from, TOPOLOGY_FROM, "--topology-from"),
    ):
        if given is None:
            continue
        if given not in known:
            raise typer.BadParameter(f"{given!r}: one of {', '.join(known)}", param_hint=hint)
        if (why := check_tool(given)) is not None:
            raise die(f"{why} ({hint} {given})", ExitCode.UNAVAILABLE)
    return TopologyRefresh(
        node,
        list(files.paths),
        rack_label=files.rack_label,
        jobs_from=jobs_from,
        topology_from=topology_from,
        gpu_source=source,
    )


def fake_fabric_from(source: GpuSource | None, path: Path) -> None:
    """--fake-fabric: the recorded fabric info the fake source answers with (exit 3 naming a bad file)."""
    from fleettool.sources.fake import FakeSource
    from fleettool.sources.fake_inject import load_fabric

    if not isinstance(source, FakeSource):
        raise typer.BadParameter("--fake-fabric needs --source fake", param_hint="--fake-fabric")
    try:
        source.fabric = load_fabric(path)
    except (OSError, ValueError) as e:
        raise die(f"{path}: not fabric info: {e} (--fake-fabric)", ExitCode.BAD_INPUT) from None
