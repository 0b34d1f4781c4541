"""The RMA bundle: the evidence a vendor asks for when a GPU (or a node) goes back, in one .tar.gz.

    rma-NODE-20261206T041500Z/
      manifest.json     the node, its GPUs (index, UUID, serial, PCI bus id, model, driver), when it was made, by
                        what, and what each file holds (with its row count)
      alerts.json       the node's alerts (the GPU's and the node-wide ones with --gpu), with their evidence
      events.json       the node's events as stored (XIDs, fallen-off-the-bus, NVLink, ...)
      kernel-log.txt    the raw kernel-log lines of those events: the NVRM/XID lines exactly as the node printed them
      burnin.json       every burn-in row of the node (figure, floor, verdict, evidence)
      remediations.json the remediation episodes and their audit trails (steps with their output, proof parts)
      nvidia-smi.txt    what the episodes' nvidia-smi steps printed (the excerpts the audit trail kept)
      lifecycle.json    the node's lifecycle moves (who, when, why, scheduler side effects)

Only reads: the store is not changed. The file is written whole (a temporary name, then renamed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

from fleettool import __version__
from fleettool.store import Store
from fleettool.store.nodes import node_audit
from fleettool.store.remediations import list_remediations, remediation_log

FILES = {
    "alerts.json": "the node's alerts with their evidence (the GPU's and node-wide ones when a GPU is named)",
    "events.json": "the node's stored events (XIDs, GPU lost, NVLink, PCIe, ...), parsed",
    "kernel-log.txt": "the raw kernel-log lines of those events (NVRM/XID lines as the node printed them)",
    "burnin.json": "the node's burn-in results (figure, floor, verdict, evidence)",
    "remediations.json": "the remediation episodes and their audit trails (each rung, step output, proof part)",
    "nvidia-smi.txt": "the output of the remediation steps that ran nvidia-smi (the audit trail's excerpts)",
    "lifecycle.json": "the node's lifecycle moves (healthy/cordoned/in-repair/burn-in/rma: who, when, why)",
}


class BundleError(ValueError):
    pass


def _plain(v: Any) -> Any:
    """JSON-ready: datetimes as ISO 8601 UTC ('...Z'), JSON columns decoded."""
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _decode(rows: list[dict[str, Any]], *cols: str) -> list[dict[str, Any]]:
    for r in rows:
        for c in cols:
            if isinstance(r.get(c), str):
                with contextlib.suppress(ValueError):
                    r[c] = json.loads(r[c])
    return rows


def _gpu_where(gpu: int | None, params: list[Any]) -> str:
    if gpu is None:
        return ""
    params.append(gpu)
    return " AND (gpu = ? OR gpu IS NULL)"


def node_gpus(store: Store, node: str, gpu: int | None = None) -> list[dict[str, Any]]:
    """The node's GPUs from the gpus table, the newest sighting of each index: UUID, PCI bus id, model, driver and
    board serial (ingest merges the kernel log's `NVRM: GPU Board Serial Number` into the GPU's row, where
    dcgm-exporter has none)."""
    rows = store.query(
        "SELECT gpu, uuid, pci_bus_id, model, driver, serial, last_seen FROM gpus WHERE node = ? "
        "ORDER BY last_seen DESC NULLS LAST",
        [node],
    )
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["gpu"] is None or int(r["gpu"]) in out or (gpu is not None and int(r["gpu"]) != gpu):
            continue
        out[int(r["gpu"])] = {
            "gpu": int(r["gpu"]),
            "uuid": r["uuid"],
            "serial": r["serial"],
            "pci_bus_id": r["pci_bus_id"],
            "model": r["model"],
            "driver": r["driver"],
            "last_seen": _plain(r["last_seen"]),
        }
    return [out[k] for k in sorted(out)]


def collect(store: Store, node: str, gpu: int | None = None) -> dict[str, Any]:
    """Everything the bundle holds, as JSON-ready values keyed by file name (and 'gpus')."""
    p: list[Any] = [node]
    alerts = store.query(
        "SELECT alert_id, rule, category, severity, gpu, uuid, action, state, first_seen, last_seen, summary, "
        f"runbook, evidence FROM alerts WHERE node = ?{_gpu_where(gpu, p)} ORDER BY first_seen, alert_id",
        p,
    )
    p = [node]
    events = store.query(
        "SELECT ts, gpu, uuid, pci_bus_id, kind, code, message, source, detail, raw FROM events "
        f"WHERE node = ?{_gpu_where(gpu, p)} ORDER BY ts, kind",
        p,
    )
    p = [node]
    burnin = store.query(
        "SELECT run_id, ts, gpu, uuid, test, figure, unit, floor, verdict, reason, evidence FROM burnin_results "
        f"WHERE node = ?{_gpu_where(gpu, p)} ORDER BY ts, run_id, gpu, test",
        p,
    )
    episodes = [
        {**e, "log": remediation_log(store, e["remediation_id"])}
        for e in list_remediations(store, node)
        if gpu is None or e["gpu"] is None or e["gpu"] == gpu
    ]
    smi = [
        f"# {e['remediation_id']} {line['ts']:%Y-%m-%dT%H:%M:%SZ} {line['rung'] or '-'}: {line['name']} "
        f"(ok={line['ok']})\n{line['detail'] or '(no output)'}\n"
        for e in episodes
        for line in e["log"]
        if line["kind"] == "step"
        and "nvidia-smi" in f"{line['name']} {json.dumps(line['figures'], default=str)}"
    ]
    raw = [f"{e['raw']}\n" for e in events if e.get("raw")]
    for e in events:
        e.pop("raw", None)
    return {
        "gpus": node_gpus(store, node, gpu),
        "alerts.json": _plain(_decode(alerts, "evidence")),
        "events.json": _plain(_decode(events, "detail")),
        "kernel-log.txt": "".join(raw),
        "burnin.json": _plain(_decode(burnin, "evidence")),
        "remediations.json": _plain(episodes),
        "nvidia-smi.txt": "".join(smi),
        "lifecycle.json": _plain(node_audit(store, node)),
    }


def _count(v: Any) -> int:
    return len(v) if isinstance(v, list) else v.count("\n") if isinstance(v, str) else 0


def check_bundle(store: Store, node: str, path: Path, *, gpu: int | None = None) -> None:
    """BundleError (one sentence naming the file or the GPU) when the bundle cannot be written: `path` exists
    (never overwritten), its directory does not, or the store knows no GPU `gpu` on the node."""
    if path.exists():
        raise BundleError(f"{path}: already exists; not overwritten")
    if not path.parent.is_dir():
        raise BundleError(f"{path}: directory {path.parent} does not exist")
    if gpu is not None and not node_gpus(store, node, gpu):
        known = [g["gpu"] for g in node_gpus(store, node)]
        raise BundleError(
            f"{path}: --gpu {gpu}: {node} has no GPU {gpu} in the store"
            + (f" (it has {', '.join(map(str, known))})" if known else " (no GPUs recorded)")
        )


def write_bundle(
    store: Store, node: str, path: Path, *, gpu: int | None = None, now: float | None = None
) -> dict[str, Any]:
    """Write the bundle to `path` (.tar.gz); returns its manifest. BundleError when the GPU is not one the store
    knows on the node, or `path` exists or its directory does not (nothing written)."""
    check_bundle(store, node, path, gpu=gpu)
    data = collect(store, node, gpu)
    made = dt.datetime.fromtimestamp(time.time() if now is None else now, dt.timezone.utc)
    top = f"rma-{node}-{made:%Y%m%dT%H%M%SZ}"
    blobs: dict[str, bytes] = {}
    for name in FILES:
        v = data[name]
        text = v if isinstance(v, str) else json.dumps(v, indent=1, sort_keys=True, default=str) + "\n"
        if isinstance(v, str) and not v:
            text = f"# none: the store holds no {FILES[name].split('(')[0].strip()} for {node}\n"
        blobs[name] = text.encode()
    manifest = {
        "node": node,
        "gpu": gpu,
        "gpus": data["gpus"],
        "made": made.replace(tzinfo=None).isoformat(timespec="seconds") + "Z",
        "made_by": f"fleettool {__version__}",
        "files": {n: {"what": FILES[n], "rows": _count(data[n]), "bytes": len(blobs[n])} for n in FILES},
    }
    blobs = {"manifest.json": (json.dumps(manifest, indent=1) + "\n").encode(), **blobs}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name, blob in blobs.items():
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size, info.mtime, info.mode = len(blob), int(made.timestamp()), 0o644
                tar.addfile(info, io.BytesIO(blob))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return manifest
