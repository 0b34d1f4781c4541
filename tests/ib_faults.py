"""Faults written into copies of a real sysfs tree (fixtures/ib-faults/*.yaml), as a sequence of snapshots.

A spec names the real tree it copies (`base`, a sysfs root under fixtures/), the node, the first instant, the
poll interval, the end, and the changes, each at an offset from the start, cumulative:

    write: {mlx5_4/ports/1/state: "1: DOWN"}     # file under class/infiniband/ -> new content
    remove: [mlx5_8]                              # a device (or any path) gone from sysfs

Replay: `samples(spec)` reads each snapshot with read_ib_sysfs (once per distinct snapshot) and turns it into
samples at every poll exactly as the collector does (collectors/fabric_samples: state every poll, counters
every `counter_every` polls, ib_device_present every poll), and `write_recording` writes them as a recording in
fleettool's own OpenMetrics names (fixtures/ib-faults/<name>/nvml.om.gz), which `fleettool replay` reads.

Live: `write_tree(spec, root, offset)` makes ROOT the copy as it is at `offset` (the real tree plus every change
up to it), so a collector with `--sysfs-root ROOT` sees the fault happen when it is called at each change
(`change_offsets(spec)`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from collectors.fabric_gids import gid_samples
from collectors.fabric_pcie import pcie_samples
from collectors.fabric_samples import DevicePresence, counter_samples, state_samples
from fleettool import units
from fleettool.formats.ib_sysfs import IbSysfs, read_ib_sysfs
from fleettool.model import Sample
from fleettool.recording.writer import RecordingWriter

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ROOT / "fixtures" / "ib-faults"


@dataclass
class Change:
    at: float
    write: dict[str, str] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)


@dataclass
class Spec:
    name: str
    base: Path
    node: str
    start: float
    poll: float
    end: float
    counter_every: int
    changes: list[Change]
    expect: dict[str, Any]


def load(name: str) -> Spec:
    """fixtures/ib-faults/<name>.yaml."""
    d = yaml.safe_load((FAULTS / f"{name}.yaml").read_text())
    changes = [
        Change(units.parse_duration(c["at"]), dict(c.get("write") or {}), list(c.get("remove") or []))
        for c in d.get("changes") or []
    ]
    return Spec(
        name=name,
        base=ROOT / d["base"],
        node=str(d["node"]),
        start=units.parse_iso(str(d["start"])),
        poll=units.parse_duration(d.get("poll", "5s")),
        end=units.parse_duration(d["end"]),
        counter_every=int(d.get("counter_every", 2)),
        changes=sorted(changes, key=lambda c: c.at),
        expect=dict(d.get("expect") or {}),
    )


def names() -> list[str]:
    return sorted(p.stem for p in FAULTS.glob("*.yaml"))


def change_offsets(spec: Spec) -> list[float]:
    return sorted({c.at for c in spec.changes})


def write_tree(spec: Spec, root: Path, offset: float) -> Path:
    """ROOT (a sysfs root: ROOT/class/infiniband) as the copy stands at `offset` seconds from the start."""
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(spec.base, root, symlinks=True)
    for d in [root, *root.rglob("*")]:  # a copy of a read-only capture: writable, to write the faults in
        if not d.is_symlink():
            d.chmod(0o755 if d.is_dir() else 0o644)
    ib = root / "class" / "infiniband"
    for c in spec.changes:
        if c.at > offset:
            break
        for path, text in c.write.items():
            f = ib / path
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(f"{text}\n")
        for path in c.remove:
            p = ib / path
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    return root


def snapshots(spec: Spec, work: Path) -> Iterator[tuple[float, IbSysfs, Path]]:
    """(offset, reading, tree) at the start and at each change: the tree is the same until the next one."""
    for i, at in enumerate([0.0, *[a for a in change_offsets(spec) if a > 0]]):
        tree = write_tree(spec, work / f"snap-{i:02d}", at)
        yield at, read_ib_sysfs(tree), tree


def samples(spec: Spec, work: Path) -> list[Sample]:
    """Every poll's samples, as the collector makes them from the tree it reads at that instant."""
    snaps = list(snapshots(spec, work))
    presence = DevicePresence()
    out: list[Sample] = []
    n = int(spec.end // spec.poll) + 1
    for i in range(n):
        off = i * spec.poll
        _, reading, tree = [s for s in snaps if s[0] <= off][-1]
        ts = spec.start + off
        for port in reading.ports:
            out.extend(state_samples(port, spec.node, ts))
            if i % spec.counter_every == 0:
                out.extend(counter_samples(port, spec.node, ts))
        if i % spec.counter_every == 0:  # the HCAs' PCIe links, in the counters' tier
            out.extend(pcie_samples(tree, sorted({p.device for p in reading.ports}), spec.node, ts))
            out.extend(gid_samples(tree, reading.ports, spec.node, ts))
        out.extend(presence.samples(reading, spec.node, ts))
    return out


@dataclass
class _Collected:
    samples: list[Sample]
    events: list[Any] = field(default_factory=list)
    gpus: list[Any] = field(default_factory=list)


def write_recording(spec: Spec, out: Path, work: Path) -> list[Path]:
    """The recording replay reads: OUT/nvml.om.gz in fleettool's own names."""
    w = RecordingWriter(out, spec.node)
    w.add(_Collected(samples(spec, work)))
    return w.write()


def main() -> None:
    """Write every spec's recording: python -m tests.ib_faults (after changing a spec)."""
    import tempfile

    for name in names():
        out = FAULTS / name
        with tempfile.TemporaryDirectory() as work:
            for p in write_recording(load(name), out, Path(work)):
                print(p.relative_to(ROOT))


if __name__ == "__main__":
    main()
