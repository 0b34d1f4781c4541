"""Read InfiniBand snapshots of a recording into the store: `ibstat` / `ibstatus`, `ibv_devinfo` (-v), `perfquery`
(-x), `iblinkinfo` text, and a saved sysfs tree as a tarball. Each becomes samples through
collectors.fabric_samples, the mapping the live fabric collector uses, so replay stores the rows the agent would:
`ib_port_state` and the other port gauges, the counters of IB_COUNTER_METRICS (a saturated or unreadable one is
no sample: unknown, never 0), and `ib_device_present` per device.

None of these tools prints a time or (but iblinkinfo's node descriptions) a host: the time is the file's (its
name, --at, its mtime), the node the host of a pasted prompt line (`[root@gpu-17 ~]# ibstat`), else --node. Two
snapshots of one node at two times are two polls: a port ACTIVE in the first and DOWN in the second is the
4 -> 1 change of `ib_port_state`, and a device the node showed in an earlier snapshot and lacks now reads
`ib_device_present` 0 (devices seen earlier are those of this node's `ib_device_present` rows before this time).
A run that failed part-way (ibpanic) keeps the ports it printed, but says nothing of presence.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fleettool.collectors.fabric_samples import (
    DevicePresence,
    counter_samples,
    device_sub,
    state_samples,
    unknown_counters,
)
from fleettool.formats.errors import ParseError, ParseIssue
from fleettool.formats.ib_sysfs import IbPort, IbSysfs
from fleettool.formats.ib_sysfs_tar import TarBroken, TarRefused, read_ib_tarball
from fleettool.formats.ib_text import command, parse_ibv_devinfo
from fleettool.formats.iblinkinfo import parse_iblinkinfo
from fleettool.formats.ibstat import parse_ib_status_text
from fleettool.formats.perfquery import parse_perfquery
from fleettool.ingest.report import FileReport, IngestOptions, untimed_file_time
from fleettool.model import Sample
from fleettool.recording.files import InputTooLarge, read_text
from fleettool.store import Store

NOTES_SHOWN = 3  # unknown counters named in a note before "(N more)"


def _node(text: str, opts: IngestOptions, rep: FileReport, tool: str) -> str:
    cmd = command(text)
    if cmd is not None and cmd.host:
        if opts.node and opts.node != cmd.host:
            rep.notes.append(
                f"the prompt line names host {cmd.host}: stored as {cmd.host}, not --node {opts.node}"
            )
        node = cmd.host
    else:
        node = opts.node or "unknown"
        if node == "unknown":
            rep.notes.append(f"{tool} names no host: stored as node 'unknown' (give --node)")
    rep.nodes.add(node)
    return node


def _n(k: int, word: str) -> str:
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def _devices(subs: Iterable[object]) -> set[str]:
    return {str(s).removeprefix("device=") for s in subs if s}


def _presence(store: Store, node: str, ts: float, ports: list[IbPort]) -> list[Sample]:
    """ib_device_present for this snapshot: 1 for each device in it, 0 for one this node showed before `ts`; and
    0 at each later snapshot already stored that lacks a device of this one (files are read in path order, not
    time order: the answer does not depend on which was read first)."""
    rows = store.query(
        "SELECT epoch(ts) AS t, sub, value FROM samples WHERE node = ? AND metric = 'ib_device_present'",
        [node],
    )
    earlier = _devices(r["sub"] for r in rows if r["t"] < ts)
    out = DevicePresence(seen=earlier).samples(IbSysfs(ports=ports), node, ts)
    now = {p.device for p in ports}
    later: dict[float, set[str]] = {}
    for r in rows:
        if r["t"] > ts:
            later.setdefault(r["t"], set()).update(_devices([r["sub"]]))
    for t, listed in sorted(later.items()):
        out += [
            Sample(t, node, None, None, "ib_device_present", 0.0, device_sub(d)) for d in sorted(now - listed)
        ]
    return out


def _unknown_note(ports: list[IbPort], rep: FileReport) -> None:
    """Known counters that are no sample (saturated, unreadable), named: unknown, not 0."""
    unknown = [(p.key, k, why) for p in ports for k, why in unknown_counters(p).items()]
    if not unknown:
        return
    shown = "; ".join(f"{key} {name}: {why}" for key, name, why in unknown[:NOTES_SHOWN])
    more = len(unknown) - NOTES_SHOWN
    rep.notes.append(
        f"{_n(len(unknown), 'counter')} unknown, not stored (never read as 0): {shown}"
        + (f" ({more} more)" if more > 0 else "")
    )


def _write(store: Store, rep: FileReport, samples: list[Sample]) -> None:
    rep.rows += store.write_samples(samples) if samples else 0


def _snapshot(
    store: Store,
    path: Path,
    opts: IngestOptions,
    rep: FileReport,
    tool: str,
    ports: list[IbPort],
    issues: list[ParseIssue],
    text: str,
) -> None:
    """A whole-node port listing (ibstat, ibstatus, ibv_devinfo): state samples, presence unless the run failed."""
    rep.issues.extend(issues)
    if not ports:
        if not issues:
            rep.skipped = f"looked like {tool} output but lists no port"
        return
    node = _node(text, opts, rep, tool)
    ts = untimed_file_time(path, opts, rep, tool)
    samples = [s for p in ports for s in state_samples(p, node, ts)]
    if any("failed" in i.message for i in issues):
        rep.notes.append(
            f"{tool} failed part-way: the ports it printed are stored, device presence is not judged"
        )
    else:
        samples += _presence(store, node, ts, ports)
    _write(store, rep, samples)


def read_ibstat(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    text = read_text(path)
    ports, issues = parse_ib_status_text(text, str(path))
    _snapshot(store, path, opts, rep, rep.shape or "ibstat", ports, issues, text)


def read_ibv_devinfo(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    text = read_text(path)
    ports, issues = parse_ibv_devinfo(text, str(path))
    if ports and all(p.rate_gbps is None for p in ports):
        rep.notes.append(
            "ibv_devinfo without -v prints no rate nor physical state: only state and link layer stored"
        )
    _snapshot(store, path, opts, rep, "ibv_devinfo", ports, issues, text)


def read_perfquery(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    text = read_text(path)
    cmd = command(text)
    device = cmd.option("-C", "--Ca") if cmd is not None else None
    ports, issues = parse_perfquery(text, str(path), device)
    rep.issues.extend(issues)
    if not ports:
        if not issues:
            rep.skipped = "looked like perfquery output but holds no port's counters"
        return
    if device is None:
        rep.notes.append(
            "perfquery names a LID, not the device: ports stored as port=lid<N>/<port> (paste the command line"
            " with -C <device> to name it)"
        )
    node = _node(text, opts, rep, "perfquery")
    ts = untimed_file_time(path, opts, rep, "perfquery")
    _unknown_note(ports, rep)
    _write(store, rep, [s for p in ports for s in counter_samples(p, node, ts)])


def read_iblinkinfo(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    text = read_text(path)
    info, issues = parse_iblinkinfo(text, str(path))
    rep.issues.extend(issues)
    if info.switch_ports:
        rep.notes.append(
            f"{_n(info.switch_ports, 'switch port')} not stored (fleettool keeps the hosts' own HCA ports)"
        )
    if info.nameless:
        shown = ", ".join(repr(d) for d in info.nameless[:NOTES_SHOWN])
        rep.notes.append(
            f"{_n(len(info.nameless), 'CA')} whose node description names no host ({shown}): not stored"
        )
    if not info.hosts:
        if not issues and not info.switch_ports and not info.nameless:
            rep.skipped = "looked like iblinkinfo output but lists no link"
        elif not issues:
            rep.notes.append("no host's HCA port in it: nothing stored")
        return
    ts = untimed_file_time(path, opts, rep, "iblinkinfo")
    samples = []
    for host, ports in sorted(info.hosts.items()):
        rep.nodes.add(host)
        samples += [s for p in ports for s in state_samples(p, host, ts)]
    _write(store, rep, samples)


def read_ib_sysfs_tarball(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    try:
        tree = read_ib_tarball(path)
    except TarRefused as e:
        raise InputTooLarge(f"{path}: {e}") from None
    except TarBroken as e:
        raise ParseError(ParseIssue(str(path), 0, str(e))) from None
    rep.notes.extend(f"not extracted: {s}" for s in tree.skipped[:NOTES_SHOWN])
    if len(tree.skipped) > NOTES_SHOWN:
        rep.notes.append(f"{len(tree.skipped) - NOTES_SHOWN} more members not extracted")
    reading = tree.reading
    if tree.dangling:
        shown = ", ".join(tree.dangling[:NOTES_SHOWN])
        rep.notes.append(
            f"{len(tree.dangling)} devices are links to what the tarball lacks ({shown}): sysfs' class entries link "
            "into /sys/devices; save the tree with `tar czhf` (-h stores what the links point to)"
        )
    for dev, why in reading.skipped.items():
        rep.notes.append(f"{dev}: {why}")
    rep.notes.extend(reading.issues)
    if not reading.ports:
        rep.skipped = f"a tarball of {tree.layout} with no readable port" + (
            f": its {len(tree.dangling)} devices are links into /sys/devices, which it lacks (saved without -h:"
            " save it with `tar czhf`)"
            if tree.dangling
            else ""
        )
        return
    node = opts.node or "unknown"
    if node == "unknown":
        rep.notes.append("a sysfs tarball names no host: stored as node 'unknown' (give --node)")
    rep.nodes.add(node)
    ts = untimed_file_time(path, opts, rep, "a sysfs tarball")
    _unknown_note(reading.ports, rep)
    samples = [s for p in reading.ports for s in state_samples(p, node, ts) + counter_samples(p, node, ts)]
    samples += _presence(store, node, ts, reading.ports)
    _write(store, rep, samples)
