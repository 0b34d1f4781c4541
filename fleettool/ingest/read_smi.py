"""Read an nvidia-smi dump (-q text, whole or as pasted, or -q -x XML, made whole when cut short) into the store:
one sample per reading per GPU at the report's time, and the GPU inventory. The node is the host of a pasted
prompt line (`user@host:~$ nvidia-smi ...`), else --node; a value that cannot be read is a `file:line` issue."""

from __future__ import annotations

from pathlib import Path

from fleettool.formats.errors import ParseIssue
from fleettool.formats.nvidia_smi import SmiReport, gpu_identity, gpu_samples, parse_text, parse_xml
from fleettool.formats.nvidia_smi_paste import xml_document
from fleettool.ingest.report import FileReport, IngestOptions, outside_time
from fleettool.model import GpuInfo, Sample, canonical_pci_bus_id
from fleettool.recording.files import complete_xml, iter_lines, read_text
from fleettool.store import Store


def _store_smi(store: Store, path: Path, opts: IngestOptions, rep: FileReport, report: SmiReport) -> None:
    rep.issues.extend(report.issues)
    node = report.host or opts.node or "unknown"
    if report.host and opts.node and opts.node != report.host:
        rep.notes.append(
            f"the prompt line names host {report.host}: stored as {report.host}, not --node {opts.node}"
        )
    if report.timestamp is not None:
        ts = report.timestamp
        rep.time_source = "the report's Timestamp (the capturing host's local time read as UTC)"
    else:
        ts, src = outside_time(path, opts, rep)
        rep.time_source = f"no Timestamp in the report: {src}"
    samples = []
    infos = []
    for g in report.gpus:
        ident = gpu_identity(g)
        minor = ident.get("minor")
        gpu = int(minor) if minor and minor.isdigit() else g.index
        values = gpu_samples(g, rep.issues, str(path))
        failed = [k for k, v in g.values.items() if v.strip().strip("[]") == "Unknown Error"]
        if failed:  # nvidia-smi's own word that NVML failed to read them: not a value, but not nothing either
            where = canonical_pci_bus_id(g.pci_bus_id) or f"index {g.index}"
            rep.notes.append(
                f"GPU {where}: nvidia-smi printed Unknown Error for {', '.join(failed)} (NVML could not read them;"
                " nothing stored for them)"
            )
        if ident["uuid"] is None and not values:
            if g.values:  # read, but nothing in it is a reading: say so, never "0 samples" and nothing else
                key = next(iter(g.values))
                rep.notes.append(
                    f"GPU {canonical_pci_bus_id(g.pci_bus_id) or f'index {g.index}'}: {len(g.values)} values, none a reading fleettool"
                    f" stores (the first: {key} at line {g.lines.get(key, 0)}): not stored"
                )
            continue
        for metric, value in values.items():
            samples.append(Sample(ts, node, gpu, ident["uuid"], metric, value))
        infos.append(
            GpuInfo(
                node, gpu, ident["uuid"], ident["pci_bus_id"], ident["model"], report.driver, ident["serial"]
            )
        )
    rep.rows += store.write_samples(samples) if samples else 0
    if infos:
        store.upsert_gpus(infos, ts)
    rep.nodes.add(node)
    if node == "unknown":
        rep.notes.append("nvidia-smi names no host: stored as node 'unknown' (give --node)")
    rep.t_min = rep.t_max = ts


def read_smi_text(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    _store_smi(store, path, opts, rep, parse_text(iter_lines(path), path=str(path)))


def read_smi_xml(store: Store, path: Path, opts: IngestOptions, rep: FileReport) -> None:
    doc, skipped, said = xml_document(read_text(path))  # pasted: the prompt line and fences around it
    text, cut = complete_xml(doc)
    if cut:
        rep.partial.append(cut)
    report = parse_xml(text, path=str(path))
    report.host = said.host if said else None
    report.issues = [ParseIssue(i.path, i.line + skipped, i.message) for i in report.issues]
    _store_smi(store, path, opts, rep, report)
