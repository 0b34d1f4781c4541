#!/usr/bin/env python3
"""`fleettool fleet incidents` incrementally: a job crash on N nodes (one XID 79, XID 45 on every other GPU:
tests/test_incidents.py's generator), each node judged as its own agent and exported to S3 (moto's server on
loopback) under its own name; then

  cold      the first run with an empty cache (every segment read);
  bare      the same fleet with --no-cache (every segment read, nothing kept): the baseline;
  warm      one more node exports, then a run with the cache (only the new node's segments read), best of
            --repeat such nodes (held back from the first export);
  unchanged a run with nothing new.

Each run is the command's own path in process (open_fleet_incidents + list_incidents), best of --repeat.

    python3 bench/fleet_incidents.py --nodes 64 [--json bench/results/fleet-incidents.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.fs as pafs  # noqa: E402

from fleettool.engine.evaluate import evaluate, write_alerts  # noqa: E402
from fleettool.engine.rules import load_rules  # noqa: E402
from fleettool.fleet import segments  # noqa: E402
from fleettool.fleet.location import open_location  # noqa: E402
from fleettool.fleet.read import check_fleet  # noqa: E402
from fleettool.incidents.fleet import open_fleet_incidents  # noqa: E402
from fleettool.ingest.report import IngestOptions  # noqa: E402
from fleettool.ingest.run import ingest  # noqa: E402
from fleettool.store import Store  # noqa: E402
from fleettool.store.incidents import list_incidents  # noqa: E402
from tests.test_incidents import job_crash  # noqa: E402

URL = "s3://gpu-fleet/segments"


def moto() -> subprocess.Popen[bytes]:
    exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(150):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    os.environ.update(
        FLEETTOOL_S3_ENDPOINT=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_REGION="us-east-1",
    )
    pafs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{port}",
        scheme="http",
        access_key="test",
        secret_key="test",
        region="us-east-1",
        allow_bucket_creation=True,
    ).create_dir("gpu-fleet")
    return proc


def export_node(rec: Path, node: str, work: Path) -> None:
    d = work / "nodes" / node
    d.mkdir(parents=True)
    shutil.copy(rec / f"kern-{node}.log", d)
    shutil.copy(rec / "sacct.txt", d)
    with Store(str(work / f"{node}.duckdb")) as st:
        ingest(st, d, IngestOptions(quiet=True))
        write_alerts(st, evaluate(st, RULES))
        segments.export(st, open_location(URL), node, 1_900_000_000.0)


def run(cache: Path | None) -> tuple[float, dict[str, object]]:
    t = time.perf_counter()
    store, rep = open_fleet_incidents(check_fleet(URL), cache=cache)
    with store:
        inc = list_incidents(store)
    s = time.perf_counter() - t
    top = inc[0]
    return s, {
        "seconds": round(s, 3),
        "segments_read": rep.read if rep else None,
        "segments_cached": rep.kept if rep else None,
        "incidents": len(inc),
        "first": [top["scope"], top["key"], top["root_node"], top["root_code"], top["nodes"], top["alerts"]],
    }


RULES = load_rules()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fleettool-bench-fi-"))
    proc = moto()
    try:
        rec = job_crash(work / "rec", nodes=a.nodes)
        nodes = sorted(p.name[5:-4] for p in rec.glob("kern-*.log"))
        t = time.perf_counter()
        held = nodes[-a.repeat :]  # exported one at a time, each before a warm run
        for node in nodes[: -a.repeat]:
            export_node(rec, node, work)
        build_s = time.perf_counter() - t
        cache = work / "cache"
        _, cold = run(cache)
        bare = min((run(None) for _ in range(a.repeat)), key=lambda r: r[0])[1]
        warms = []
        for node in held:
            export_node(rec, node, work)
            warms.append(run(cache))  # reads that node's segments only
        warm = min(warms, key=lambda r: r[0])[1]
        unchanged = min((run(cache) for _ in range(a.repeat)), key=lambda r: r[0])[1]
        bare_after = min((run(None) for _ in range(a.repeat)), key=lambda r: r[0])[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    res = {
        "nodes": a.nodes,
        "alerts": a.nodes * 8,
        "build_s": round(build_s, 1),
        "cold": cold,
        "bare_no_cache": bare,
        "warm_one_new_node_best": warm,
        "unchanged": unchanged,
        "bare_no_cache_after": bare_after,
        "warm_over_bare": round(float(warm["seconds"]) / float(bare_after["seconds"]), 3),  # type: ignore[arg-type]
        "unchanged_over_bare": round(float(unchanged["seconds"]) / float(bare_after["seconds"]), 3),  # type: ignore[arg-type]
    }
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
