"""What a proof is given (ProofContext, the contract's signature) and the node's GPUs as the store knows them;
shared by proof.py and its parts (proof_smi, proof_xid, proof_burnin)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleettool.remediate.runner import NodeRunner

if TYPE_CHECKING:
    from fleettool.store import Store


@dataclass
class ProofContext:
    """What a proof needs. since: when the rung's action ended (XIDs are counted after it). before_fault: when
    the fault paged (the NVLink count is the GPU's own in the 7 days before it). links_before: the count read at
    plan time, the fallback. whole_node: the rung took the whole node out (the all-reduce runs over its GPUs).
    burnin_args: more `fleettool burnin` options (--duration 60s). clock/sleep: time.time and time.sleep."""

    runner: NodeRunner
    store: Store
    node: str
    gpu: int | None
    since: float
    before_fault: float | None
    quiet_s: float = 600
    whole_node: bool = False
    burnin_args: tuple[str, ...] = ()
    links_before: int | None = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


def node_gpus(store: Store, node: str) -> list[tuple[int, str | None]]:
    """(index, PCI bus id) of every GPU the store knows of the node, by index."""
    rows = store.query(
        "SELECT gpu, max(pci_bus_id) AS pci FROM gpus WHERE node = ? AND gpu IS NOT NULL GROUP BY gpu ORDER BY gpu",
        [node],
    )
    return [(int(r["gpu"]), r["pci"]) for r in rows]
