"""Read what `dcgmi` printed into the store, each through a pure parser of fleettool.formats.dcgmi_*:

- `diag -r N` (table or -j JSON): one burn-in result per test and GPU (burnin_results, where fleettool's own
  burn-in writes; the rule GpuDcgmDiagFailed judges them), with the measured and expected figures DCGM gives;
- `health -c` (tree or -j JSON): one event per incident, `dcgm-health-fail` or `dcgm-health-warn`, its code the
  dcgmError_t (DCGM_FR_PENDING_ROW_REMAP = 85 ...) matched from the message;
- `dmon -e ...`: samples under fleettool's metric names (the field's DCGM_FI_* name through metrics.map_dcgm_name),
  and each new non-zero value of DCGM_FI_DEV_XID_ERRORS (230) as an XID event, which the XID policy judges;
- `discovery -l`: the GPU inventory (index, UUID, PCI bus id, name).

dcgmi prints no host and (but for nothing) no time: the node is --node's, the time the file's (its name, --at,
its mtime), said in the file's summary.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from fleettool.formats.dcgmi_codes import FIELDS, XID_FIELD
from fleettool.formats.dcgmi_diag import DiagReport, parse_diag_json, parse_diag_text
from fleettool.formats.dcgmi_discovery import parse_discovery
from fleettool.formats.dcgmi_dmon import parse_dmon
from fleettool.formats.dcgmi_health import HealthReport, parse_health_json, parse_health_text
from fleettool.formats.errors import ParseIssue
from fleettool.ingest.report import FileReport, IngestOptions, outside_time, untimed_file_time
from fleettool.metrics import map_dcgm_name
from fleettool.model import Event, EventKind, GpuInfo, Sample, normalize_pci_bus_id
from fleettool.recording.files import iter_lines, read_text
from fleettool.store import Store
from fleettool.store.burnin import write_burnin_results

HEALTH_KIND = {"Failure": "dcgm-health-fail", "Warning": "dcgm-health-warn"}


def _node(opts: IngestOptions, rep: FileReport, what: str) -> str:
    node = opts.node or "unknown"
    if node == "unknown":
        rep.notes.append(f"{what} names no host: stored as node 'unknown' (give --node)")
    rep.nodes.add(node)
    return node


def _json_doc(path: Path, rep: FileReport) -> dict[str, Any] | None:
    """The JSON object of a -j output, after any prompt line before it; lenient about the line breaks a paste
    puts inside strings."""
    text = read_text(path)
    brace = text.find("{")
    try:
        doc, _ = json.JSONDecoder(strict=False).raw_decode(text[brace:] if brace >= 0 else text)
    except ValueError as e:
        line = text[: max(brace, 0)].count("\n") + getattr(e, "lineno", 1)
        rep.issues.append(ParseIssue(str(path), line, f"not JSON: {getattr(e, 'msg', e)}"))
        return None
    return doc if isinstance(doc, dict) else None


# --- diag ---------------------------------------------------------------------------------------------------


def _store_diag(store: Store, path: Path, opts: IngestOptions, rep: FileReport, diag: DiagReport) -> None:
    rep.issues.extend(diag.issues)
    if not diag.results:
        if not rep.issues:
            rep.skipped = "looked like dcgmi diag output but holds no test result"
        return
    node = _node(opts, rep, "dcgmi diag")
    ts = untimed_file_time(path, opts, rep, "dcgmi diag")
    version = diag.metadata.get("DCGM Version")
    rows = []
    for r in diag.results:
        reason = f"DCGM {r.test}: {r.status or 'no status'}" + (f" ({r.warnings[0]})" if r.warnings else "")
        rows.append(
            {
                "node": node,
                "gpu": r.gpu,
                "test": r.test_key,
                "figure": r.figure,
                "unit": r.unit,
                "floor": r.floor,
                "verdict": r.verdict,
                "reason": reason,
                "evidence": {
                    "source": f"dcgmi diag ({path.name}" + (f":{r.line})" if r.line else ")"),
                    "dcgm_status": r.status,
                    "category": r.category,
                    "warnings": r.warnings,
                    "info": r.info,
                    "dcgm_errors": r.error_ids,
                    "dcgm_version": version,
                },
            }
        )
    run_id = "dcgmi-" + hashlib.sha256(f"{path.resolve()}:{ts}".encode()).hexdigest()[:16]
    write_burnin_results(store, run_id, ts, rows)
    rep.runs += 1
    counts = Counter(r.verdict for r in diag.results)
    rep.notes.append(
        f"dcgmi diag: {len(rows)} results stored with the burn-in results ("
        + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        + ")"
    )


def read_dcgmi_diag(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _store_diag(store, path, opts, rep, parse_diag_text(iter_lines(path), path=str(path)))


def read_dcgmi_diag_json(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    doc = _json_doc(path, rep)
    if doc is not None:
        _store_diag(store, path, opts, rep, parse_diag_json(doc))


# --- health -------------------------------------------------------------------------------------------------


def _store_health(
    store: Store, path: Path, opts: IngestOptions, rep: FileReport, health: HealthReport
) -> None:
    rep.issues.extend(health.issues)
    if health.overall is None and not health.incidents:
        if not rep.issues:
            rep.skipped = "looked like dcgmi health output but holds no Overall Health"
        return
    node = _node(opts, rep, "dcgmi health")
    ts = untimed_file_time(path, opts, rep, "dcgmi health")
    events = []
    for i in health.incidents:
        kind = HEALTH_KIND.get(i.health)
        if kind is None:
            rep.issues.append(ParseIssue(str(path), i.line, f"dcgmi health: health {i.health!r} not read"))
            continue
        gpu = i.entity_id if i.entity_group == "GPU" else None
        name = f" ({i.code_name})" if i.code_name else ""
        events.append(
            Event(
                ts,
                node,
                kind,
                f"DCGM health {i.health}: {i.system}: {i.message}{name}",
                gpu=gpu,
                code=i.code,
                raw=i.message,
                source=f"dcgmi-health:{path.name}",
                detail={
                    "system": i.system,
                    "health": i.health,
                    "dcgm_error": i.code_name or None,
                    "entity_group": i.entity_group,
                    "entity_id": i.entity_id,
                },
            )
        )
    rep.events += store.write_events(events)
    rep.notes.append(f"dcgmi health: Overall Health {health.overall or '?'}, {len(events)} incidents")


def read_dcgmi_health(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _store_health(store, path, opts, rep, parse_health_text(iter_lines(path), path=str(path)))


def read_dcgmi_health_json(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    doc = _json_doc(path, rep)
    if doc is not None:
        _store_health(store, path, opts, rep, parse_health_json(doc))


# --- dmon ---------------------------------------------------------------------------------------------------


def read_dcgmi_dmon(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    dmon = parse_dmon(iter_lines(path), path=str(path))
    rep.issues.extend(dmon.issues)
    if not dmon.rows:
        if not rep.issues:
            rep.skipped = "looked like dcgmi dmon output but holds no row"
        return
    node = _node(opts, rep, "dcgmi dmon")
    t0, src = outside_time(path, opts, rep)
    step = dmon.delay_ms / 1000.0
    delay = f"-d {dmon.delay_ms}" if dmon.delay_given else f"dmon's default delay, {dmon.delay_ms} ms"
    rep.time_source = f"dcgmi dmon prints no time: the first sample at {src}, one every {step:g} s ({delay})"
    samples: list[Sample] = []
    events: list[Event] = []
    last_xid: dict[int, float] = {}
    unmapped: set[int] = set()
    others: Counter[str] = Counter()
    for row in dmon.rows:
        if row.entity_group != "GPU":
            others[row.entity_group] += 1
            continue
        ts = t0 + row.sample * step
        for fid, value in row.values.items():
            hit = map_dcgm_name(FIELDS[fid][0]) if fid in FIELDS else None
            if hit is None:
                unmapped.add(fid)
            elif value is not None:
                samples.append(Sample(ts, node, row.entity_id, None, hit[0], value * hit[1], hit[2]))
            if fid == XID_FIELD and value and value != last_xid.get(row.entity_id):
                events.append(
                    Event(
                        ts,
                        node,
                        EventKind.XID.value,
                        f"XID {int(value)} on GPU {row.entity_id} (dcgmi dmon, DCGM_FI_DEV_XID_ERRORS)",
                        gpu=row.entity_id,
                        code=int(value),
                        source=f"dcgmi-dmon:{path.name}",
                        detail={"field": XID_FIELD, "line": row.line},
                    )
                )
            if fid == XID_FIELD and value is not None:
                last_xid[row.entity_id] = value
        rep.t_min = ts if rep.t_min is None else min(rep.t_min, ts)
        rep.t_max = ts if rep.t_max is None else max(rep.t_max, ts)
    rep.rows += store.write_samples(samples) if samples else 0
    rep.events += store.write_events(events)
    if dmon.unknown_columns:
        rep.notes.append(
            f"dcgmi dmon: columns {', '.join(dmon.unknown_columns)} not stored (field not known)"
        )
    if unmapped:
        rep.notes.append(f"dcgmi dmon: fields {sorted(unmapped)} not stored (no fleettool metric)")
    for group, n in sorted(others.items()):
        rep.notes.append(f"dcgmi dmon: {n} rows of {group} entities not stored (fleettool keeps GPUs)")


# --- discovery ----------------------------------------------------------------------------------------------


def read_dcgmi_discovery(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    found = parse_discovery(iter_lines(path), path=str(path))
    rep.issues.extend(found.issues)
    if not found.gpus:
        if not rep.issues:
            rep.skipped = "looked like dcgmi discovery output but lists no GPU"
        return
    node = _node(opts, rep, "dcgmi discovery")
    ts = untimed_file_time(path, opts, rep, "dcgmi discovery")
    infos = [
        GpuInfo(node, g.gpu, g.uuid, normalize_pci_bus_id(g.pci_bus_id) if g.pci_bus_id else None, g.name)
        for g in found.gpus
    ]
    store.upsert_gpus(infos, ts)
    rep.identities += len(infos)
    unnamed = sum(1 for g in found.gpus if g.name is None)
    if unnamed:
        rep.notes.append(f"dcgmi discovery: {unnamed} GPUs without a name (DCGM printed <<<NULL>>>)")
