"""The store's schema. Every table is keyed by node, GPU index, GPU UUID and time (TIMESTAMP = UTC)."""

import re

SCHEMA_VERSION = 9

# The marker that makes a DuckDB file a fleettool store: this row in `meta`. Stores written before the marker
# existed are recognised by their shape (a `meta` table with a schema_version row, and no table fleettool never
# made); the first read-write open adds the marker. Any other DuckDB file with tables is refused untouched.
FORMAT_KEY = "format"
FORMAT = "fleettool"

DDL = [
    """CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    # raw samples; sub names a part of the GPU (link=3, mig=1/0) or the collector of a health sample
    """CREATE TABLE IF NOT EXISTS samples (
        ts TIMESTAMP NOT NULL, node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR,
        metric VARCHAR NOT NULL, sub VARCHAR NOT NULL DEFAULT '', value DOUBLE NOT NULL)""",
    # 1-minute rollups kept long after raw samples are dropped
    """CREATE TABLE IF NOT EXISTS samples_1m (
        minute TIMESTAMP NOT NULL, node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR,
        metric VARCHAR NOT NULL, sub VARCHAR NOT NULL DEFAULT '',
        vmin DOUBLE, vmean DOUBLE, vmax DOUBLE, n INTEGER)""",
    """CREATE TABLE IF NOT EXISTS events (
        ts TIMESTAMP, node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR, pci_bus_id VARCHAR,
        kind VARCHAR NOT NULL, code INTEGER, message VARCHAR, raw VARCHAR, source VARCHAR, detail JSON)""",
    # version 1 stores had no detail column (parsed fields of the line: pid, process, MIG ids, link, ...)
    """ALTER TABLE events ADD COLUMN IF NOT EXISTS detail JSON""",
    # which pod used which GPU when (dcgm-exporter's attribution labels)
    """CREATE TABLE IF NOT EXISTS gpu_pods (
        node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR, namespace VARCHAR, pod VARCHAR, container VARCHAR,
        first_seen TIMESTAMP, last_seen TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS gpus (
        node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR, pci_bus_id VARCHAR, model VARCHAR,
        driver VARCHAR, serial VARCHAR, first_seen TIMESTAMP, last_seen TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS nccl_runs (
        run_id VARCHAR PRIMARY KEY, ts TIMESTAMP, op VARCHAR, ranks INTEGER, nodes VARCHAR[],
        avg_busbw_gbps DOUBLE, peak_busbw_gbps DOUBLE, wrong BIGINT, version VARCHAR, source VARCHAR)""",
    # version 5: the GPU model of the run's device list (peers are runs of one SKU), and whether the run finished
    # (printed its footer: a hung or killed run is stored, finished = false); NULL in runs stored before
    """ALTER TABLE nccl_runs ADD COLUMN IF NOT EXISTS model VARCHAR""",
    """ALTER TABLE nccl_runs ADD COLUMN IF NOT EXISTS finished BOOLEAN""",
    """CREATE TABLE IF NOT EXISTS nccl_rows (
        run_id VARCHAR NOT NULL, size_bytes BIGINT, count BIGINT, dtype VARCHAR, redop VARCHAR, root INTEGER,
        oop_time_us DOUBLE, oop_algbw_gbps DOUBLE, oop_busbw_gbps DOUBLE, oop_wrong BIGINT,
        ip_time_us DOUBLE, ip_algbw_gbps DOUBLE, ip_busbw_gbps DOUBLE, ip_wrong BIGINT)""",
    """CREATE TABLE IF NOT EXISTS burnin_results (
        run_id VARCHAR NOT NULL, ts TIMESTAMP, node VARCHAR, gpu SMALLINT, uuid VARCHAR, test VARCHAR,
        figure DOUBLE, unit VARCHAR, floor DOUBLE, verdict VARCHAR, reason VARCHAR, evidence JSON)""",
    """CREATE TABLE IF NOT EXISTS alerts (
        alert_id VARCHAR PRIMARY KEY, rule VARCHAR, category VARCHAR, severity VARCHAR, node VARCHAR,
        gpu SMALLINT, uuid VARCHAR, action VARCHAR, state VARCHAR, first_seen TIMESTAMP, last_seen TIMESTAMP,
        summary VARCHAR, runbook VARCHAR, evidence JSON)""",
    # silences: matchers (NULL = any) muting alerts until a time; acknowledgements and manual resolutions
    """CREATE TABLE IF NOT EXISTS silences (
        silence_id VARCHAR PRIMARY KEY, node VARCHAR, gpu SMALLINT, rule VARCHAR, category VARCHAR,
        created TIMESTAMP, until TIMESTAMP, who VARCHAR, reason VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS alert_acks (
        alert_id VARCHAR NOT NULL, kind VARCHAR NOT NULL, created TIMESTAMP, until TIMESTAMP, who VARCHAR,
        reason VARCHAR)""",
    # fleet baselines per (SKU, driver): median and a robust spread of a figure across the fleet
    """CREATE TABLE IF NOT EXISTS baselines (
        model VARCHAR, driver VARCHAR, metric VARCHAR, key VARCHAR, median DOUBLE, mad DOUBLE, n INTEGER,
        updated TIMESTAMP)""",
    # node lifecycle: the current state of each node, and every transition with who, when and why
    """CREATE TABLE IF NOT EXISTS node_states (
        node VARCHAR PRIMARY KEY, state VARCHAR NOT NULL, since TIMESTAMP, who VARCHAR, reason VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS node_audit (
        ts TIMESTAMP, node VARCHAR NOT NULL, from_state VARCHAR, to_state VARCHAR NOT NULL, who VARCHAR,
        reason VARCHAR, side_effects VARCHAR)""",
    # version 6: topology as keys per node (rack, nvlink_domain, leaf, spine, zone, clique, gpu_product, and a
    # CSV's extra columns), from the file that said it; and Slurm jobs (store/topology.py)
    """CREATE TABLE IF NOT EXISTS node_topology (
        node VARCHAR NOT NULL, key VARCHAR NOT NULL, value VARCHAR, source VARCHAR, updated TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS jobs (
        job_id VARCHAR NOT NULL, name VARCHAR, nodes VARCHAR[], start_time TIMESTAMP, end_time TIMESTAMP,
        state VARCHAR, state_detail VARCHAR, source VARCHAR)""",
    # version 7: incidents above alerts (fleettool/incidents/): one per fault across GPUs, nodes, a job, a rack, an
    # NVLink domain, an IB leaf, a driver version or the fleet, with its root alert (NULL for a storm without a
    # cause), whether it paged, and `because` (the evidence of each fold, a JSON list of sentences); and which
    # alert belongs to which incident, as its root or a member (`reason`: why it was folded there)
    """CREATE TABLE IF NOT EXISTS incidents (
        incident_id VARCHAR PRIMARY KEY, scope VARCHAR NOT NULL, key VARCHAR, state VARCHAR, severity VARCHAR,
        page BOOLEAN, action VARCHAR, root_alert VARCHAR, root_node VARCHAR, root_gpu SMALLINT,
        root_code INTEGER, first_seen TIMESTAMP, last_seen TIMESTAMP, nodes INTEGER, gpus INTEGER,
        alerts INTEGER, summary VARCHAR, because JSON)""",
    """CREATE TABLE IF NOT EXISTS incident_members (
        incident_id VARCHAR NOT NULL, alert_id VARCHAR NOT NULL, role VARCHAR NOT NULL, reason VARCHAR)""",
    # version 8: remediations (fleettool/remediate/): one row per episode on a node (or one GPU of it), from the
    # page to a proven return, an RMA or a stop; `rung` is the rung now tried (reset, reboot, power-cycle, rma),
    # state running | proving | proven | failed | stopped. remediation_log is its audit trail: every rung tried,
    # step run (argv, exit status, output excerpt), guard decision and proof part, each with its figures (JSON)
    """CREATE TABLE IF NOT EXISTS remediations (
        remediation_id VARCHAR PRIMARY KEY, node VARCHAR NOT NULL, gpu SMALLINT, uuid VARCHAR, incident_id VARCHAR,
        alert_id VARCHAR, rule VARCHAR, paged_at TIMESTAMP, started TIMESTAMP, ended TIMESTAMP, rung VARCHAR,
        state VARCHAR NOT NULL, via VARCHAR, who VARCHAR, reason VARCHAR, outcome VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS remediation_log (
        remediation_id VARCHAR NOT NULL, ts TIMESTAMP, rung VARCHAR, kind VARCHAR NOT NULL, name VARCHAR,
        ok BOOLEAN, detail VARCHAR, figures JSON)""",
    # what was ingested, so replaying the same file twice stores it once: keyed by content hash, and for a file
    # timed from outside its content (name, --at, mtime) by hash@time too (ingest.run.ingest_key)
    """CREATE TABLE IF NOT EXISTS ingests (
        digest VARCHAR PRIMARY KEY, path VARCHAR, format VARCHAR, node VARCHAR, rows BIGINT,
        issues INTEGER, ingested_at TIMESTAMP)""",
    # version 9: each GPU's hourly peak of the PEAK_METRICS (raw samples and rollups of [hour, hour + 1 h)), kept
    # by every sample writer (store/peaks.py): a look-back maximum over days reads one row an hour
    """CREATE TABLE IF NOT EXISTS peak_1h (
        hour TIMESTAMP NOT NULL, node VARCHAR NOT NULL, gpu SMALLINT, metric VARCHAR NOT NULL,
        vmax DOUBLE NOT NULL)""",
]

# the metrics whose hourly peaks peak_1h keeps: NvlinkLinksFewer's (rules/nvlink.yaml), compared with each GPU's
# own maximum over the 7 days before its window
PEAK_METRICS = ("nvlink_links_active",)
# the schema version that added peak_1h: a store upgraded from before it is filled from its samples once
PEAKS_SINCE = 9

# data upgrades, idempotent, run with the DDL at every read-write open: PCI ids in nvidia-smi's form
# (`00000000:48:00.0`), where stores before it held the short key (`0000:48:00`) in events and gpus
_SHORT_PCI = "regexp_full_match(pci_bus_id, '[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}')"
UPGRADES = [
    f"UPDATE {t} SET pci_bus_id = '0000' || upper(pci_bus_id) || '.0' WHERE {_SHORT_PCI}"
    for t in ("events", "gpus")
]

SAMPLE_COLUMNS = ["ts", "node", "gpu", "uuid", "metric", "sub", "value"]

# every table any version of fleettool has created (a legacy store holds only these)
KNOWN_TABLES = frozenset(
    re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt).group(1)  # type: ignore[union-attr]
    for stmt in DDL
    if stmt.startswith("CREATE TABLE")
)
# what every version had: a store without these is not one of ours whatever its meta table says
CORE_TABLES = frozenset({"meta", "samples", "events"})
