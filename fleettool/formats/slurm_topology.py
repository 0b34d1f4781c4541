"""Slurm's topology.conf: the tree plugin (IB leaves and spines) and the block plugin (NVLink domains).

Format: topology.conf(5), https://slurm.schedmd.com/topology.conf.html and the Topology Guide
https://slurm.schedmd.com/topology.html. Parameter names are case insensitive; text after `#` is a comment.
- topology/tree: `SwitchName=leaf3 Nodes=gpu-[301-308] LinkSpeed=...` (a switch and its nodes: a leaf) and
  `SwitchName=spine1 Switches=leaf[1-16]` (a switch above switches). Each node gets `leaf` (the switch naming
  it) and `spine` (the top switches above that leaf, comma-joined when several).
- topology/block: `BlockName=r06 Nodes=r06-[01-18]` (a block, on GB200/GB300 NVL72 racks an NVLink domain) and
  `BlockSizes=18,36`. Each node gets `nvlink_domain` (its block).
Names are Slurm hostlist expressions (formats.hostlist). Pure: lines in, nodes and issues out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fleettool.formats.errors import ParseIssue
from fleettool.formats.hostlist import HostlistError, expand

_KNOWN = {"switchname", "nodes", "switches", "linkspeed", "blockname", "blocksizes"}


@dataclass
class SlurmTopology:
    """node -> {key: value} (leaf, spine, nvlink_domain), what the file defines, and its bad lines."""

    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    leaves: set[str] = field(default_factory=set)
    spines: set[str] = field(default_factory=set)
    blocks: set[str] = field(default_factory=set)
    block_sizes: list[int] = field(default_factory=list)
    issues: list[ParseIssue] = field(default_factory=list)
    plugin: str = ""  # "tree", "block" or "tree+block"


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in line.split():
        key, eq, value = tok.partition("=")
        if not eq or not key:
            raise ValueError(f"{tok!r} is not Name=value")
        if key.lower() not in _KNOWN:
            raise ValueError(
                f"unknown parameter {key!r} (SwitchName, Nodes, Switches, LinkSpeed, BlockName, BlockSizes)"
            )
        out[key.lower()] = value
    return out


def parse_topology_conf(lines: Iterable[str], path: str = "-") -> SlurmTopology:
    topo = SlurmTopology()
    children: dict[str, list[str]] = {}  # switch -> switches below it
    switch_nodes: dict[str, list[str]] = {}
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            f = _fields(line)
            if "switchname" in f:
                name = f["switchname"]
                if "nodes" in f:
                    switch_nodes[name] = expand(f["nodes"])
                if "switches" in f:
                    children[name] = expand(f["switches"])
                if "nodes" not in f and "switches" not in f:
                    raise ValueError(f"switch {name!r} names no Nodes= nor Switches=")
            elif "blockname" in f:
                if "nodes" not in f:
                    raise ValueError(f"block {f['blockname']!r} names no Nodes=")
                topo.blocks.add(f["blockname"])
                for n in expand(f["nodes"]):
                    topo.nodes.setdefault(n, {})["nvlink_domain"] = f["blockname"]
            elif "blocksizes" in f:
                topo.block_sizes = [int(x) for x in f["blocksizes"].split(",")]
            else:
                raise ValueError("neither SwitchName= nor BlockName= nor BlockSizes=")
        except HostlistError as e:
            topo.issues.append(ParseIssue(path, lineno, f"bad hostlist: {e}"))
        except ValueError as e:
            topo.issues.append(ParseIssue(path, lineno, str(e)))
    parents: dict[str, list[str]] = {}
    for up, below in children.items():
        for s in below:
            parents.setdefault(s, []).append(up)

    def roots(s: str, seen: frozenset[str] = frozenset()) -> set[str]:
        ups = [u for u in parents.get(s, []) if u not in seen]
        if not ups:
            return set() if not seen else {s}
        out: set[str] = set()
        for u in ups:
            out |= roots(u, seen | {s})
        return out

    for leaf, names in switch_nodes.items():
        topo.leaves.add(leaf)
        top = sorted(roots(leaf))
        topo.spines.update(top)
        for n in names:
            d = topo.nodes.setdefault(n, {})
            d["leaf"] = leaf
            if top:
                d["spine"] = ",".join(top)
    topo.plugin = "+".join(p for p, on in (("tree", switch_nodes or children), ("block", topo.blocks)) if on)
    return topo


def sniff(lines: list[str]) -> str | None:
    """'tree', 'block' or 'tree+block' when the lines are a topology.conf (every non-comment line one of its
    statements), else None."""
    stmts = [ln.split("#", 1)[0].strip() for ln in lines]
    stmts = [s for s in stmts if s]
    if not stmts:
        return None
    heads = [s.split("=", 1)[0].lower() for s in stmts]
    if not all(h in ("switchname", "blockname", "blocksizes") for h in heads):
        return None
    tree, block = "switchname" in heads, "blockname" in heads or "blocksizes" in heads
    return "+".join(p for p, on in (("tree", tree), ("block", block)) if on)
