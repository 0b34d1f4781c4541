"""Port DOWN -> alert latency of the agent as deployed, beside the same measure for an XID line (the baseline).

Starts `fleettool agent` (a process; the fake GPU source with --gpus GPUs; --sysfs-root a copy of the real H100
tree with 8 CX-7 ports, bench/fabric_tree.py, the BlueField bond excluded with --fabric-exclude; --kmsg a plain
file it follows like `tail -F`; dcgm-exporter off; /metrics on loopback; the built-in rules plus a port-down rule)
and, after its start-up, runs trials one at a time:
- port: after a random 0-1 s pause (any phase of the agent's 1 s tick), write `1: DOWN` into one port's `state`
  file and time, from the write, until (a) /metrics shows its `fleettool_alerts{rule=...}` series (polled every
  --poll s, 0.1 by default: each render costs the agent's CPU, and on 2 cores polling every 20 ms slowed what it
  measures) and (b) the alert is firing in the store, for a reader (a read-only DuckDB connection opened per
  poll, as `fleettool alerts` does; polled every 20 ms once /metrics shows it: the agent writes the store first,
  and a reader holding the file delays the agent's flush). `read_s` is when the agent's tick read the port DOWN
  (its sample's time). With --site-rule, `4: ACTIVE` is then written back and the alert waited out, so the next
  trial raises a new one (a node's port alerts fold into one while they overlap);
- xid (the baseline, --xids per round): after the same random pause, append an `NVRM: Xid (PCI:...): 79` line
  for the next GPU to the kernel-log file and time it the same way (an XID 79 holds its GPU's alert: one per GPU
  and agent, so each round is a fresh agent and store).

The port-down rule: by default the built-in NicPortDown (rules/fabric.yaml: a port that was ACTIVE going below
it, an instant rule judged at the flush that stores the DOWN sample). It ends only after 10 min ACTIVE and a
node's port alerts fold into one, so each round (a fresh agent and store) takes one port trial and one XID trial.
`--site-rule` watches a site rule file's threshold `ib_port_state < 4` without `for` instead, which resolves when
the port is ACTIVE again, so a round can take several port trials (`--ports 14 --xids 8 --rounds 4`).

  python bench/fabric_latency.py --json bench/results/fabric-latency-nicportdown-dev.json
  python bench/fabric_latency.py --site-rule --rounds 4 --ports 14 --xids 8 --json bench/results/fabric-latency-dev.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import fabric_tree  # noqa: E402

NODE = "bench-ib"
RULE = "BenchIbPortDown"
SITE_RULES = f"""groups:
  - name: fabric-bench
    rules:
      - alert: {RULE}
        kind: threshold
        metric: ib_port_state
        op: "<"
        value: 4
        severity: critical
        category: nic
        action: none
        summary: "{{node}}: port {{key}} is not ACTIVE (state {{value}})"
"""


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def _firing(db: Path, rule: str | None, gpu: int | None = None) -> int | None:
    """Firing alerts of `rule` (or, with `gpu`, XID alerts of that GPU) in the store; None: locked by a flush."""
    import duckdb

    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return None
    try:
        if gpu is not None:
            q, args = "SELECT count(*) FROM alerts WHERE gpu = ? AND state = 'firing'", [gpu]
        else:
            q, args = "SELECT count(*) FROM alerts WHERE rule = ? AND state = 'firing'", [rule]
        return int(con.execute(q, args).fetchall()[0][0])
    except duckdb.Error:
        return None
    finally:
        con.close()


def _on_metrics(body: str, rule: str | None, gpu: int | None = None) -> bool:
    if gpu is not None:
        return re.search(rf'fleettool_alerts\{{[^}}]*gpu="{gpu}"', body) is not None
    return re.search(rf'fleettool_alerts\{{[^}}]*rule="{rule}"', body) is not None


def _wait(
    db: Path, port: int, rule: str | None, gpu: int | None, limit: float, poll: float
) -> tuple[float | None, float | None]:
    """From now: seconds until the alert is firing in the store, and on /metrics (None: not within `limit`).
    /metrics is polled every `poll` seconds; the store (a DuckDB file the agent must lock to write) only once /metrics
    shows the alert (the agent writes the store first), or after 5 s without it, so the probe does not hold the
    file the agent's flush needs."""
    t0 = time.monotonic()
    m_s = s_s = None
    while time.monotonic() - t0 < limit and (m_s is None or s_s is None):
        if m_s is None and _on_metrics(_metrics(port), rule, gpu):
            m_s = time.monotonic() - t0
        look = s_s is None and (m_s is not None or time.monotonic() - t0 > 5.0)
        if look and (_firing(db, rule, gpu) or 0) > 0:
            s_s = time.monotonic() - t0
        time.sleep(poll if m_s is None else 0.02)
    return s_s, m_s


def _read_at(db: Path, sub: str, after: float) -> float | None:
    """The wall time of the first sample reading the port DOWN after `after` (the collector's tick)."""
    import duckdb

    for _ in range(100):
        try:
            con = duckdb.connect(str(db), read_only=True)
        except duckdb.Error:
            time.sleep(0.05)
            continue
        try:
            row = con.execute(
                "SELECT min(epoch(ts)) FROM samples WHERE metric = 'ib_port_state' AND sub = ? AND value = 1 "
                "AND epoch(ts) >= ?",
                [sub, after - 0.001],
            ).fetchall()
            return None if row[0][0] is None else float(row[0][0])
        finally:
            con.close()
    return None


def _cleared(db: Path, port: int, rule: str, limit: float = 30.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if _firing(db, rule) == 0 and not _on_metrics(_metrics(port), rule):
            return True
        time.sleep(0.05)
    return False


def one_round(a: argparse.Namespace, rnd: int) -> list[dict[str, object]]:
    work = Path(tempfile.mkdtemp(prefix="fabric-latency-"))
    root = fabric_tree.build(work / "sys")
    db, kmsg = work / "agent.duckdb", work / "kern.log"
    kmsg.write_text("")
    exe = shutil.which("fleettool")
    cmd = [exe, "agent"] if exe else [sys.executable, "-m", "fleettool", "agent"]
    cmd += ["--db", str(db), "--node", NODE, "--source", "fake", "--gpus", str(a.gpus), "--kmsg", str(kmsg)]
    cmd += ["--dcgm-exporter", "off", "--metrics-port", str(a.port), "--flush", a.flush]
    cmd += ["--sysfs-root", str(root), "--fabric-exclude", "mlx5_bond_*"]
    rule = RULE if a.site_rule else a.builtin_rule
    if a.site_rule:
        (work / "site.yaml").write_text(SITE_RULES)
        cmd += ["--rules", str(work / "site.yaml")]
    errlog = (work / "agent.stderr").open("w")  # noqa: SIM115 - open for the agent's whole life
    agent = subprocess.Popen(cmd, stderr=errlog, cwd=work)
    probes: list[dict[str, object]] = []
    rng = random.Random(rnd)
    try:
        end = time.monotonic() + 60
        while "fleettool_agent_collector_up" not in _metrics(a.port) and time.monotonic() < end:
            time.sleep(0.2)
        if agent.poll() is not None:
            raise SystemExit(
                f"the agent exited ({agent.returncode}) at start-up: {(work / 'agent.stderr').read_text()[-1500:]}"
            )
        time.sleep(a.settle)  # past the start-up flush and the first pass of every rule
        plan = [("port", i) for i in range(a.ports)] + [("xid", g) for g in range(min(a.xids, a.gpus))]
        rng.shuffle(plan)
        for kind, i in plan:
            time.sleep(rng.random())
            if kind == "port":
                dev = fabric_tree.CX7[i % len(fabric_tree.CX7)]
                f = fabric_tree.state_file(root, dev)
                wall, t0 = time.time(), time.monotonic()
                f.write_text("1: DOWN\n")
                s_s, m_s = _wait(db, a.port, rule, None, a.limit, a.poll)
                f.write_text("4: ACTIVE\n")
                # a built-in port rule ends only on proof (NicPortDown: 10 min ACTIVE) and a node's port alerts
                # fold into one: such a round takes one port trial (--ports 1), and nothing is waited for here
                cleared = _cleared(db, a.port, rule) if a.site_rule else None
                read = _read_at(db, f"port={dev}/1", wall)
                p: dict[str, object] = {
                    "round": rnd,
                    "kind": kind,
                    "port": f"{dev}/1",
                    "cleared": cleared,
                    "read_s": None
                    if read is None
                    else read - wall,  # the tick that read it: the rest is judging
                }
            else:
                pci = f"0000:{0x18 + i * 0x10:02x}:00"
                stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
                line = f"{stamp} {NODE} kernel: NVRM: Xid (PCI:{pci}): 79, pid=4242, name=bench, GPU has fallen off the bus.\n"
                t0 = time.monotonic()
                with kmsg.open("a") as k:
                    k.write(line)
                s_s, m_s = _wait(db, a.port, None, i, a.limit, a.poll)
                p = {"round": rnd, "kind": kind, "gpu": i}
            p.update(store_s=s_s, metrics_s=m_s, wrote_at=t0)
            probes.append(p)
            print(json.dumps(p), flush=True)
            if s_s is None and agent.poll() is not None:
                raise SystemExit(
                    f"the agent exited ({agent.returncode}): {(work / 'agent.stderr').read_text()[-1500:]}"
                )
    finally:
        agent.terminate()
        agent.wait(60)
        errlog.close()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return probes


def stat(values: list[float]) -> dict[str, float | int | None]:
    v = sorted(values)
    if not v:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {
        "n": len(v),
        "p50": statistics.median(v),
        "p99": v[min(len(v) - 1, int(0.99 * len(v)))],  # nearest rank
        "max": v[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=56, help="a fresh agent and store each round")
    ap.add_argument(
        "--ports", type=int, default=1, help="port-down trials per round (more than 1 with --site-rule only)"
    )
    ap.add_argument("--xids", type=int, default=1, help="XID trials per round (one per GPU, at most --gpus)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--flush", default="30s", help="the agent's --flush (the DaemonSet's 30 s)")
    ap.add_argument("--builtin-rule", default="NicPortDown", help="the built-in port-down rule watched")
    ap.add_argument(
        "--site-rule",
        action="store_true",
        help="watch a site rule file's `ib_port_state < 4` threshold instead (it resolves when the port is back, "
        "so a round can take several port trials)",
    )
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--limit", type=float, default=15.0, help="give up on one trial after this long")
    ap.add_argument(
        "--poll",
        type=float,
        default=0.1,
        help="seconds between /metrics polls (each render costs the agent CPU)",
    )
    ap.add_argument("--port", type=int, default=19431)
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    probes: list[dict[str, object]] = []
    for rnd in range(a.rounds):
        probes.extend(one_round(a, rnd))
    out: dict[str, object] = {
        "probes": probes,
        "nproc": os.cpu_count(),
        "poll_s": a.poll,
        "loadavg": os.getloadavg(),
    }
    for kind in ("port", "xid"):
        ps = [p for p in probes if p["kind"] == kind]
        out[kind] = {
            "read_s": stat([float(p["read_s"]) for p in ps if p.get("read_s") is not None]),  # type: ignore[arg-type]
            "trials": len(ps),
            "missed": sum(1 for p in ps if p["store_s"] is None or p["metrics_s"] is None),
            "store_s": stat([float(p["store_s"]) for p in ps if p["store_s"] is not None]),  # type: ignore[arg-type]
            "metrics_s": stat([float(p["metrics_s"]) for p in ps if p["metrics_s"] is not None]),  # type: ignore[arg-type]
        }
    print(json.dumps({k: out[k] for k in ("port", "xid")}, indent=1))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
