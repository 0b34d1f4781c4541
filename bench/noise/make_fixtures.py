#!/usr/bin/env python3
"""The noise budget's storm fixtures (issue 30, item 6): each a recording directory of standard files, written
deterministically (seeded) from a public shape.

Files: kernel logs as `journalctl -k -o short-iso` prints them (`2026-11-02T10:00:00+0000 gpu-017 kernel: NVRM:
Xid (PCI:0000:5d:00): 79, ...`; the XID bodies copied from fixtures/samples/kmsg/xid-lines.txt, whose SOURCES.md
names each line's source), each GPU announced first (`NVRM: GPU at PCI:0000:18:00: GPU-<uuid>`, the driver's
adapter-init line); Slurm `topology.conf` (tree: IB leaves; block: NVLink domains) or fleettool's topology CSV
(racks); `sacct --parsable2` job dumps; dcgm-exporter OpenMetrics (`DCGM_FI_*` with the exporter's labels, the
driver version in `DCGM_FI_DRIVER_VERSION`, as fixtures/scenarios/thermal-throttle carries them); nccl-tests
stdout (the shape of fixtures/scenarios/nccl-pairwise-straggler). Each directory has a `truth.yaml` (the root
faults, the expected incidents, planned nodes, budget overrides, the shape's source) and a `README.md`.

    python bench/noise/make_fixtures.py --out DIR [--only NAME ...]     # every fixture (or some) into DIR
    python bench/noise/make_fixtures.py --commit                        # the small ones into bench/noise/fixtures

Small fixtures are committed under bench/noise/fixtures/<name>/; the two big ones (the #1710-scale teardown storm,
~170k lines; the month of 200 nodes' background noise) are written at run time by bench/noise/run.py.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import hashlib
import io
import json
import random
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPO = HERE.parent.parent

HGX = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]  # an HGX H100 board's eight GPU bus numbers
GB200 = [
    "0008:01",
    "0009:01",
    "0018:01",
    "0019:01",
]  # a GB200 compute tray's four GPUs (kmsg samples' domains)
H100 = "NVIDIA H100 80GB HBM3"


def ts(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc)


@contextlib.contextmanager
def gz(path: Path) -> Iterator[io.TextIOWrapper]:
    """A gzip text writer with no name or time in its header, so the same fixture is the same bytes."""
    with (
        path.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as z,
        io.TextIOWrapper(z, encoding="utf-8") as f,
    ):
        yield f


def iso(t: float) -> str:
    return ts(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(s: str) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def uuid_of(node: str, gpu: int) -> str:
    h = hashlib.sha1(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def attr(bus: str) -> str:
    """The kernel line's PCI attribution: `0000:18:00` for an HGX bus, `0008:01:00` for a GB200 domain."""
    return f"{bus}:00" if ":" in bus else f"0000:{bus}:00"


def pci_long(bus: str) -> str:
    dom, b = bus.split(":") if ":" in bus else ("0000", bus)
    return f"0000{dom}:{b.upper()}:00.0"


class Kernel:
    """One kernel log per node, `journalctl -k -o short-iso` lines, written sorted by time."""

    def __init__(self) -> None:
        self.lines: dict[str, list[tuple[float, str]]] = {}

    def add(self, node: str, t: float, msg: str) -> None:
        self.lines.setdefault(node, []).append((t, msg))

    def announce(self, node: str, t: float, buses: list[str]) -> None:
        for i, bus in enumerate(buses):
            self.add(node, t + i * 0.001, f"NVRM: GPU at PCI:{attr(bus)}: {uuid_of(node, i)}")

    def xid(self, node: str, t: float, bus: str, code: int, body: str) -> None:
        self.add(node, t, f"NVRM: Xid (PCI:{attr(bus)}): {code}, {body}")

    def write(self, out: Path) -> int:
        n = 0
        for node, rows in sorted(self.lines.items()):
            rows.sort(key=lambda r: r[0])
            with gz(out / f"kernel-{node}.log.gz") as f:
                for t, msg in rows:
                    stamp = ts(t).strftime("%Y-%m-%dT%H:%M:%S+0000")
                    f.write(f"{stamp} {node} kernel: {msg}\n")
                    n += "Xid" in msg
        return n


# XID bodies, after "NN, " (from fixtures/samples/kmsg/xid-lines.txt; pid/name/channel varied)
def app_body(rng: random.Random, code: int) -> str:
    pid = rng.randrange(1000, 4_000_000)
    if code == 45:
        return f"pid={pid}, name=python3, Ch {rng.randrange(8, 64):08x}"
    if code == 43:
        return f"pid={pid}, name=pt_main_thread, Ch {rng.randrange(8, 64):08x}"
    if code == 13:
        return "pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x57c730=0xc04000b 0x57c734=0x24"
    if code == 31:
        return (
            f"pid={pid}, name=python3.10, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 "
            "faulted @ 0x73ac_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
        )
    raise ValueError(code)


X79 = "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
X48 = (  # NVIDIA/gpu-operator#1146 (edwardzjl), a real DBE line
    "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the "
    "framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1."
)
X149 = "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
X145 = (
    "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
)
X154 = "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"


def sacct(out: Path, jobs: list[tuple[str, str, str, float, float | None, str]]) -> None:
    """`sacct --parsable2 --format=JobID,JobName,NodeList,Start,End,State` (jobs and their `.0` step)."""
    rows = ["JobID|JobName|NodeList|Start|End|State"]
    for jid, name, nodes, start, end, state in jobs:
        s = ts(start).strftime("%Y-%m-%dT%H:%M:%S")
        e = ts(end).strftime("%Y-%m-%dT%H:%M:%S") if end is not None else "Unknown"
        rows.append(f"{jid}|{name}|{nodes}|{s}|{e}|{state}")
        rows.append(f"{jid}.0|python|{nodes}|{s}|{e}|{state.split(' ')[0] if end else 'RUNNING'}")
    (out / "sacct.txt").write_text("\n".join(rows) + "\n")


class OpenMetrics:
    """dcgm-exporter series, written grouped by family with `# TYPE`/`# HELP`, then `# EOF`."""

    HELP = {
        "DCGM_FI_DEV_GPU_TEMP": ("GPU temperature (in C).", "gauge"),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("Current clock event reasons (bitmask).", "gauge"),
    }

    def __init__(self) -> None:
        self.fam: dict[str, list[str]] = {}

    def add(self, name: str, node: str, gpu: int, bus: str, driver: str, value: float, t: float) -> None:
        labels = (
            f'gpu="{gpu}",UUID="{uuid_of(node, gpu)}",pci_bus_id="{pci_long(bus)}",device="nvidia{gpu}",'
            f'modelName="{H100}",Hostname="{node}",DCGM_FI_DRIVER_VERSION="{driver}"'
        )
        self.fam.setdefault(name, []).append(f"{name}{{{labels}}} {value:g} {t:.3f}")

    def write(self, path: Path) -> None:
        with gz(path) as f:
            for name, rows in self.fam.items():
                help_, typ = self.HELP[name]
                f.write(f"# TYPE {name} {typ}\n# HELP {name} {help_}\n")
                f.write("\n".join(rows) + "\n")
            f.write("# EOF\n")


def write_truth(out: Path, truth: dict[str, Any], readme: str) -> None:
    (out / "truth.yaml").write_text(
        "# What really happened in this fixture: bench/noise/run.py scores the replay against it\n"
        + yaml.safe_dump(truth, sort_keys=False, width=110)
    )
    (out / "README.md").write_text(readme.strip() + "\n")


# ---------------------------------------------------------------------------------------------- the fixtures


def teardown_storm(out: Path, rng: random.Random) -> dict[str, Any]:
    """NVSentinel #1710 / PR #1712: 168,924 XID 45 lines in two days against 10 of every other XID combined, on a
    288-node GB200 fleet; the repeat rule made 672 fatal events on 3 nodes in 3 h. Here: 48 GB200 trays of one
    fleet (the other 240 logged nothing), jobs restarting in a crash loop on 3 of them (one teardown burst of XID
    45 on every GPU at each job's end, ~every 7 min for 2 days) and ordinary teardowns at the end of the other
    trays' jobs; 10 application XIDs (13, 31, 43) among them; no hardware fault."""
    k = Kernel()
    t0 = at("2026-11-02T00:00:00Z")
    nodes = [f"gb-{i:03d}" for i in range(1, 49)]
    hot = nodes[:3]
    for n in nodes:
        k.announce(n, t0, GB200)
    jobs: list[tuple[str, str, str, float, float | None, str]] = []
    jid = 90000
    lines = 0
    target = 168_924
    # the crash loop: 3 trays, a 12-GPU job restarted every ~7 min; each end tears down with ~140 XID 45 a GPU
    t = t0 + 600
    end = t0 + 2 * 86400 - 600
    loop_lines = int(target * 0.88)
    ends = []
    while t < end:
        dur = rng.uniform(240, 600)
        ends.append((t, t + dur))
        t += dur + rng.uniform(10, 60)
    per_end = loop_lines // (len(ends) * 12)
    for s, e in ends:
        jid += 1
        jobs.append((str(jid), "pretrain-retry", "gb-[001-003]", s, e, "FAILED"))
        for n in hot:
            for bus in GB200:
                for j in range(per_end):
                    k.xid(n, e + j * 0.4 + rng.random() * 0.3, bus, 45, app_body(rng, 45))
                    lines += 1
    # ordinary jobs elsewhere: each end a short teardown burst on its trays
    rest = target - lines
    others = nodes[3:]
    while rest > 0:
        first = rng.randrange(0, len(others) - 4)
        width = rng.choice([1, 2, 4])
        s = t0 + rng.uniform(0, 2 * 86400 - 7200)
        e = s + rng.uniform(600, 7000)
        span = others[first : first + width]
        jid += 1
        state = rng.choice(["COMPLETED", "CANCELLED by 1000", "FAILED"])
        hostlist = f"gb-[{span[0][3:]}-{span[-1][3:]}]" if width > 1 else span[0]
        jobs.append((str(jid), "train", hostlist, s, e, state))
        for n in span:
            for bus in GB200:
                for j in range(min(rest, rng.randrange(20, 120))):
                    k.xid(n, e + j * 0.5, bus, 45, app_body(rng, 45))
                    rest -= 1
                    lines += 1
                    if rest <= 0:
                        break
    for code in (13, 13, 13, 13, 43, 43, 43, 43, 31, 31):  # "10 of every other XID combined"
        n = rng.choice(nodes)
        k.xid(n, t0 + rng.uniform(3600, 2 * 86400 - 3600), rng.choice(GB200), code, app_body(rng, code))
    xids = k.write(out)
    jobs.sort(key=lambda j: j[3])
    sacct(out, jobs)
    (out / "topology.conf").write_text(
        "# TopologyPlugin=topology/block: GB200 NVL72 racks of 18 trays\n"
        + "".join(
            f"BlockName=nvl{b + 1} Nodes=gb-[{b * 18 + 1:03d}-{min(b * 18 + 18, 48):03d}]\n" for b in range(3)
        )
    )
    return {
        "name": "teardown-storm",
        "source": "NVIDIA/NVSentinel#1710 and PR #1712 (issue 30: 168,924 XID 45 lines in 2 days, 10 other XIDs, "
        "288-node GB200 fleet; the repeat rule made 672 fatal events on 3 nodes in 3 h)",
        "storm": True,
        "teardown": True,
        "node_days": len(nodes) * 2,
        "xid_lines": xids,
        "roots": [],
        "expect": [
            {
                "scope": "fleet",
                "key": "teardown",
                "page": False,
                "note": "one informational teardown storm across the crash-looping job and the other jobs' ends",
            }
        ],
        "affected": [],
        "planned_nodes": [],
        "budget": {"pages": 0, "faulty_nodes": 0, "compression": 50, "replay_s": 20, "replay_mib": 250},
    }


def job_crash_64(out: Path, rng: random.Random) -> dict[str, Any]:
    """A 64-node job crash with one hardware root (issue 30's replay: 512 rows), after the shape of NVSentinel PR
    #1629 (one multi-node job crash flagged 77 nodes across 11 racks, every GPU healthy): job 4711 on 64 HGX H100
    nodes; GPU 3 of gpu-017 falls off the bus (XID 79); within 2 minutes every other GPU of the job (511) logs the
    teardown: XID 45, 43 or 13."""
    k = Kernel()
    t0 = at("2026-11-03T08:00:00Z")
    nodes = [f"gpu-{i:03d}" for i in range(1, 65)]
    for n in nodes:
        k.announce(n, t0 - 3600, HGX)
    tc = t0 + 5 * 3600 + 17 * 60 + 12.25
    k.xid("gpu-017", tc, "5d", 79, X79)
    for n in nodes:
        for g, bus in enumerate(HGX):
            if n == "gpu-017" and g == 3:
                continue
            code = rng.choices([45, 43, 13], weights=[70, 20, 10])[0]
            k.xid(n, tc + rng.uniform(2, 118), bus, code, app_body(rng, code))
    k.write(out)
    sacct(
        out,
        [
            ("4702", "eval", "gpu-[001-008]", t0 - 7200, t0 - 600, "COMPLETED"),
            ("4711", "llama-pretrain", "gpu-[001-064]", t0, tc + 150, "NODE_FAIL"),
        ],
    )
    leaves = "".join(
        f"SwitchName=leaf{i + 1} Nodes=gpu-[{i * 8 + 1:03d}-{i * 8 + 8:03d}]\n" for i in range(8)
    )
    (out / "topology.conf").write_text(
        "# TopologyPlugin=topology/tree: 8 rail-optimised IB leaves of 8 nodes, one spine\n"
        + leaves
        + "SwitchName=spine1 Switches=leaf[1-8]\n"
    )
    return {
        "name": "job-crash-64",
        "source": "issue 30 (64-node job crash, one XID 79, 512 rows); NVIDIA/NVSentinel PR #1629 (one job crash "
        "flagged 77 nodes across 11 racks)",
        "storm": True,
        "node_days": 64 * 0.3,
        "roots": [
            {
                "node": "gpu-017",
                "gpu": 3,
                "pci_bus_id": pci_long("5d"),
                "xid": 79,
                "time": iso(tc),
                "rule": "GpuXid",
                "scope": "job",
                "key": "4711",
                "page": True,
                "members_at_least": 511,
            }
        ],
        "affected": [],
        "planned_nodes": [],
        "budget": {"compression": 50},
    }


def nvlink_domain(out: Path, rng: random.Random) -> dict[str, Any]:
    """marin-community/marin #9086: one GPU's XID 149, then 63 downstream XID 145s across all 16 nodes of the rack
    (a GB200 NVLink domain of 16 trays x 4 GPUs). The victim also shows the recovery action (XID 154) and XID 45
    `caused by previous Xid 149` (lishapira/nixl nvlink_fault README: the victim showed 149, 145, 154 and 45).
    A second domain (r130) stays quiet. Block topology."""
    k = Kernel()
    t0 = at("2026-11-04T02:00:00Z")
    dom = [f"r129-n{i:02d}" for i in range(1, 17)]
    quiet = [f"r130-n{i:02d}" for i in range(1, 17)]
    for n in dom + quiet:
        k.announce(n, t0, GB200)
    tr = t0 + 3 * 3600 + 41 * 60 + 7.62
    k.xid("r129-n07", tr, GB200[0], 149, X149)
    k.xid("r129-n07", tr + 0.001, GB200[0], 154, X154)
    for j in range(4):
        body = f"pid={rng.randrange(1000, 4_000_000)}, name=python3, Ch 00000010 caused by previous Xid 149"
        k.xid("r129-n07", tr + 0.2 + j * 0.05, GB200[0], 45, body)
    for n in dom:
        for g, bus in enumerate(GB200):
            if n == "r129-n07" and g == 0:
                continue
            k.xid(n, tr + rng.uniform(0.5, 50), bus, 145, X145)
    k.write(out)
    (out / "topology.conf").write_text(
        "# TopologyPlugin=topology/block: one block per GB200 NVLink domain (16 trays x 4 GPUs)\n"
        "BlockName=r129 Nodes=r129-n[01-16]\nBlockName=r130 Nodes=r130-n[01-16]\nBlockSizes=16\n"
    )
    sacct(out, [("5120", "pretrain", "r129-n[01-16]", t0 + 60, tr + 300, "FAILED")])
    return {
        "name": "nvlink-domain",
        "source": "marin-community/marin#9086 (XID 149 then 63 x XID 145 across 16 nodes); lishapira/nixl "
        "nvlink_fault README (victim 149, 145, 154, 45)",
        "storm": True,
        "node_days": 32 * 0.2,
        "roots": [
            {
                "node": "r129-n07",
                "gpu": 0,
                "pci_bus_id": pci_long(GB200[0]),
                "xid": 149,
                "time": iso(tr),
                "rule": "GpuXid",
                "scope": "nvlink-domain",
                "key": "r129",
                "page": True,
                "members_at_least": 63,
            }
        ],
        "affected": [],
        "planned_nodes": [],
        "budget": {"compression": 50},
    }


def nvlink_links(out: Path, rng: random.Random) -> dict[str, Any]:
    """A GB200 NVLink domain whose switch trays fail together (issue 31, item 6): within 50 s, every GPU of 12 of
    r131's 16 trays loses 2 of its 18 NVLinks (NvlinkLinksFewer) and the other 4 trays' fabric routes turn
    unhealthy (health mask 0x1AA -> 0x19A: NvlinkFabricUnhealthy). r132 stays healthy. The samples are
    fleettool's own recording (`fleettool record`: fleettool_nvlink_links_active and
    fleettool_nvlink_fabric_health_mask per GPU, every 60 s as the NVML collector reads them). One
    nvlink-domain incident: one page, no node cordoned or sent to inspection for its switches' fault."""
    t0 = at("2026-11-08T04:00:00Z")
    dom = [f"r131-n{i:02d}" for i in range(1, 17)]
    quiet = [f"r132-n{i:02d}" for i in range(1, 17)]
    fault = t0 + 600
    hit = {n: fault + rng.uniform(0, 50) for n in dom}
    route = set(rng.sample(dom, 4))
    for n in dom + quiet:
        phase = rng.uniform(0, 60)
        links, masks = [], []
        for s in range(31):
            t = t0 + phase + s * 60
            down = n in hit and t >= hit[n]
            for g in range(4):
                lab = f'{{hostname="{n}",gpu="{g}"}}'
                links.append(
                    f"fleettool_nvlink_links_active{lab} {16 if down and n not in route else 18} {t:.3f}\n"
                )
                masks.append(
                    f"fleettool_nvlink_fabric_health_mask{lab} {410 if down and n in route else 426} {t:.3f}\n"
                )
        with gz(out / f"fleettool-{n}.om.gz") as f:
            f.write("# TYPE fleettool_nvlink_links_active gauge\n" + "".join(links))
            f.write("# TYPE fleettool_nvlink_fabric_health_mask gauge\n" + "".join(masks) + "# EOF\n")
    (out / "topology.conf").write_text(
        "# TopologyPlugin=topology/block: one block per GB200 NVLink domain (16 trays x 4 GPUs)\n"
        "BlockName=r131 Nodes=r131-n[01-16]\nBlockName=r132 Nodes=r132-n[01-16]\nBlockSizes=16\n"
    )
    return {
        "name": "nvlink-links",
        "source": "issue 31 item 6 (a domain's NVLink faults fold into one nvlink-domain incident); health mask "
        "bits of nvml.h NVML_GPU_FABRIC_HEALTH_MASK_* (NVIDIA/go-nvml gen/nvml/nvml.h)",
        "storm": True,
        "node_days": 32 * 0.02,
        "roots": [],
        "expect": [{"scope": "nvlink-domain", "key": "r131", "page": True, "members_at_least": 64}],
        "affected": [
            {"node": n, "rule": "NvlinkFabricUnhealthy" if n in route else "NvlinkLinksFewer"} for n in dom
        ],
        "planned_nodes": [],
        "budget": {"pages": 1, "fatal_actions": 0, "max_first_screen": 1, "compression": 50},
    }


def ib_leaf_ports(out: Path, rng: random.Random) -> dict[str, Any]:
    """An InfiniBand leaf switch that fails (issue 31, item 6): within 40 s, every one of leaf3's 8 nodes loses
    the 2 of its 8 CX-7 ports cabled to it (ib_port_state ACTIVE 4 -> DOWN 1, phys_state LinkUp 5 -> Polling 2),
    down for 8 minutes (NicPortDown, NicPortDropped, NicPortCountDropped), then back; leaf1 and leaf2 stay up.
    The samples are fleettool's own recording of the fabric collector (`fleettool record`: fleettool_ib_port_state,
    fleettool_ib_port_phys_state per port, every 10 s here). One leaf incident: one page, no node cordoned or
    sent to inspection for its switch's fault."""
    t0 = at("2026-11-09T02:00:00Z")
    leaves = {f"leaf{k}": [f"gpu-{k}{i:02d}" for i in range(1, 9)] for k in (1, 2, 3)}
    fault = t0 + 600
    hit = {n: fault + rng.uniform(0, 40) for n in leaves["leaf3"]}
    for n in [n for ns in leaves.values() for n in ns]:
        phase = rng.uniform(0, 10)
        state, phys = [], []
        for s in range(181):
            t = t0 + phase + s * 10
            for p in range(8):
                down = n in hit and p in (2, 3) and hit[n] <= t < hit[n] + 480
                lab = f'{{hostname="{n}",port="mlx5_{p}/1"}}'
                state.append(f"fleettool_ib_port_state{lab} {1 if down else 4} {t:.3f}\n")
                phys.append(f"fleettool_ib_port_phys_state{lab} {2 if down else 5} {t:.3f}\n")
        with gz(out / f"fleettool-{n}.om.gz") as f:
            f.write("# TYPE fleettool_ib_port_state gauge\n" + "".join(state))
            f.write("# TYPE fleettool_ib_port_phys_state gauge\n" + "".join(phys) + "# EOF\n")
    (out / "topology.conf").write_text(
        "# TopologyPlugin=topology/tree: 3 IB leaves of 8 nodes under one spine\n"
        + "".join(f"SwitchName={k} Nodes=gpu-{k[-1]}[01-08]\n" for k in leaves)
        + "SwitchName=spine1 Switches=leaf[1-3]\n"
    )
    return {
        "name": "ib-leaf-ports",
        "source": "issue 31 item 6 (several NICs under one leaf going down within 60 s form one leaf incident: "
        "0 node cordons, one page); port states as /sys/class/infiniband reads them",
        "storm": False,  # 8 node alerts (a node's ports fold into one): one row, not a 50x storm
        "node_days": 24 * 0.02,
        "roots": [],
        "expect": [{"scope": "leaf", "key": "leaf3", "page": True, "members_at_least": 8}],
        "affected": [{"node": n, "rule": "NicPortDropped"} for n in leaves["leaf3"]],
        "planned_nodes": [],
        "budget": {"pages": 1, "fatal_actions": 0, "max_first_screen": 1},
    }


def rack_cooling(out: Path, rng: random.Random) -> dict[str, Any]:
    """A rack's cooling failure (issue 30's replay: 128 GPU warnings and no rack): rack rk07's 16 HGX nodes x 8
    GPUs enter thermal slowdown (clock-event reasons 0x68, as fixtures/scenarios/thermal-throttle carries it)
    within 10 minutes, temperatures climbing to ~88 C; the 8 nodes of rk08 next to it stay cool. dcgm-exporter
    OpenMetrics every 60 s for 45 min; racks from fleettool's topology CSV."""
    t0 = at("2026-11-05T13:00:00Z")
    rk07 = [f"rk07-{i:02d}" for i in range(1, 17)]
    rk08 = [f"rk08-{i:02d}" for i in range(1, 9)]
    tf = t0 + 10 * 60
    for n in rk07 + rk08:
        om = OpenMetrics()
        onset = tf + rk07.index(n) * 35 + rng.uniform(0, 20) if n in rk07 else None
        for g, bus in enumerate(HGX):
            base = rng.uniform(58, 68)
            for s in range(46):
                t = t0 + s * 60
                hot = onset is not None and t >= onset
                temp = (
                    base
                    + (min(1.0, (t - onset) / 300) * (88 - base) if hot and onset else 0)
                    + rng.uniform(-1, 1)
                )
                om.add("DCGM_FI_DEV_GPU_TEMP", n, g, bus, "550.54.15", round(temp), t)
                om.add("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", n, g, bus, "550.54.15", 104 if hot else 4, t)
        om.write(out / f"dcgm-exporter-{n}.om.gz")
    (out / "nodes.csv").write_text(
        "node,rack,nvlink_domain,leaf\n" + "".join(f"{n},{n[:4]},,leaf{n[2:4]}\n" for n in rk07 + rk08)
    )
    return {
        "name": "rack-cooling",
        "source": "issue 30 (a rack's cooling failure: 128 GPU warnings and no rack); shape of the thermal-throttle "
        "scenario's samples",
        "storm": True,
        "node_days": 24 * 45 / 1440,
        "roots": [],
        "expect": [{"scope": "rack", "key": "rk07", "page": False, "members_at_least": 128}],
        "affected": [{"node": n, "rule": "GpuThermalSlowdown"} for n in rk07],
        "planned_nodes": [],
        "budget": {"compression": 50},
    }


NCCL_HEAD = "# nThread 1 nGpus 8 minBytes 134217728 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
NCCL_COLS = (
    "#\n#                                                              out-of-place                       in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n"
)


def nccl_run(a: str, b: str, peak: float, rng: random.Random) -> str:
    """A 2-node all_reduce_perf run (16 ranks) whose large-message busbw reaches `peak` GB/s."""
    out = [NCCL_HEAD]
    for r in range(16):
        node, dev = (a, r) if r < 8 else (b, r - 8)
        out.append(
            f"#  Rank {r:2d} Group  0 Pid {100000 + r // 8:7d} on {node:>10s} device  {dev} [0x{HGX[dev]}] {H100}\n"
        )
    out.append(NCCL_COLS)
    total = 0.0
    sizes = [134217728 << i for i in range(8)]
    for i, size in enumerate(sizes):
        bus = peak * (0.32 + 0.68 * min(1.0, (i + 1) / 6)) * rng.uniform(0.985, 1.0)
        alg = bus * 16 / (2 * 15)
        us = size / (alg * 1e3)
        total += bus
        row = f"{size:12d}  {size // 4:12d}     float     sum      -1  {us:7.1f}  {alg:6.2f}  {bus:6.2f}      0  {us:7.1f}  {alg:6.2f}  {bus:6.2f}      0\n"
        out.append(row)
    out.append(f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {total / len(sizes):.4f} \n#\n")
    return "".join(out)


def ib_leaf(out: Path, rng: random.Random) -> dict[str, Any]:
    """An InfiniBand leaf whose 8 nodes run slow together (issue 30's replay: 8 "slow node" warnings): a pairwise
    nccl-tests all_reduce sweep over 32 HGX nodes on 4 leaves (tree topology), each node paired with its leaf
    neighbour; leaf3's degraded uplinks halve the busbw of its 4 pairs (~180 vs ~360 GB/s)."""
    t0 = at("2026-11-06T01:00:00Z")
    nodes = [f"gpu-{leaf}{i:02d}" for leaf in range(1, 5) for i in range(1, 9)]
    for j in range(0, 32, 2):
        a, b = nodes[j], nodes[j + 1]
        slow = a.startswith("gpu-3")
        text = nccl_run(a, b, (180.0 if slow else 362.0) * rng.uniform(0.98, 1.02), rng)
        t = t0 + j * 60
        name = f"all_reduce_perf-{a}-{b}-{ts(t).strftime('%Y%m%dT%H%M%SZ')}.txt.gz"
        with gz(out / name) as f:
            f.write(text)
    (out / "topology.conf").write_text(
        "# TopologyPlugin=topology/tree: 4 IB leaves of 8 HGX nodes, one spine\n"
        + "".join(f"SwitchName=leaf{i} Nodes=gpu-[{i}01-{i}08]\n" for i in range(1, 5))
        + "SwitchName=spine1 Switches=leaf[1-4]\n"
    )
    return {
        "name": "ib-leaf",
        "source": "issue 30 (an InfiniBand leaf: 8 'slow node' warnings); nccl-tests output shape of "
        "fixtures/scenarios/nccl-pairwise-straggler",
        "storm": False,
        "node_days": 32 * 0.05,
        "roots": [],
        "expect": [{"scope": "leaf", "key": "leaf3", "page": False, "members_at_least": 8}],
        "affected": [{"node": n, "rule": "NcclSlowNode"} for n in nodes if n.startswith("gpu-3")],
        "planned_nodes": [],
        "budget": {"max_first_screen": 1},
    }


def driver_rollout(out: Path, rng: random.Random) -> dict[str, Any]:
    """NVIDIA/open-gpu-kernel-modules #1370: a driver rollout (610.57.04) gave recurring XID 31 on the upgraded
    nodes and was rolled back (issue 30's replay: 487 alerts, 68 GPUs sent to "inspect hardware"). 48 HGX nodes
    over 3 days, 24 upgraded to 610.57.04 on day 0, 24 still on 580.95.05 (the driver in dcgm-exporter's
    `DCGM_FI_DRIVER_VERSION` label, stored as each GPU's `gpus.driver`); XID 31 bursts on the upgraded GPUs only,
    each GPU hit 0-6 times at random over the 3 days."""
    k = Kernel()
    t0 = at("2026-11-09T00:00:00Z")
    nodes = [f"gpu-{i:03d}" for i in range(101, 149)]
    new = set(nodes[:24])
    bursts = 0
    for n in nodes:
        drv = "610.57.04" if n in new else "580.95.05"
        k.announce(n, t0, HGX)
        om = OpenMetrics()
        for g, bus in enumerate(HGX):
            for s in range(13):
                om.add("DCGM_FI_DEV_GPU_TEMP", n, g, bus, drv, round(rng.uniform(55, 72)), t0 + s * 6 * 3600)
            if n in new:
                for _ in range(rng.choice([0, 1, 2, 2, 3, 3, 4, 6])):
                    t = t0 + rng.uniform(1800, 3 * 86400 - 1800)
                    bursts += 1
                    for j in range(rng.randrange(1, 4)):
                        k.xid(n, t + j * 0.7, bus, 31, app_body(rng, 31))
        om.write(out / f"dcgm-exporter-{n}.om.gz")
    k.write(out)
    return {
        "name": "driver-rollout",
        "source": "NVIDIA/open-gpu-kernel-modules#1370 (610.57.04 rollout, recurring XID 31, rolled back); issue 30 "
        "(487 alerts, 68 GPUs sent to inspect hardware)",
        "storm": True,
        "node_days": 48 * 3,
        "xid31_bursts": bursts,
        "roots": [],
        "expect": [{"scope": "driver", "key": "610.57.04", "page": None}],
        "affected": [{"node": n, "rule": "GpuXid"} for n in sorted(new)],
        "planned_nodes": [],
        "budget": {"pages": 1, "fatal_actions": 0, "compression": 50},
    }


def planned_reboots(out: Path, rng: random.Random) -> dict[str, Any]:
    """NVSentinel #1701: rack-by-rack maintenance reboots raised NVLINK_DOWN as fatal on 214 of 288 nodes in 3.5
    weeks; none was real. 4 GB200 NVL72 racks of 18 trays, one rack rebooted a week; each tray comes back (the
    driver announces its GPUs again) and its links train late: XID 149 NETIR_LINK_EVT Fatal on each GPU within
    a minute of the boot. Every node is cordoned (`fleettool node N cordon`) before the replay: planned work."""
    k = Kernel()
    t0 = at("2026-10-05T00:00:00Z")
    racks = {f"r0{r}": [f"r0{r}-{i:02d}" for i in range(1, 19)] for r in range(1, 5)}
    for r, trays in enumerate(racks.values()):
        for n in trays:
            k.announce(n, t0, GB200)
            tb = t0 + r * 7 * 86400 + 9 * 3600 + trays.index(n) * 420 + rng.uniform(0, 60)
            k.add(n, tb, "Linux version 6.8.0-1015-nvidia (buildd@lcy02-amd64-059) #16-Ubuntu SMP")
            k.announce(n, tb + 25, GB200)
            for bus in GB200:
                k.xid(n, tb + 30 + rng.uniform(0, 30), bus, 149, X149)
    k.write(out)
    (out / "topology.conf").write_text(
        "# TopologyPlugin=topology/block: GB200 NVL72 racks of 18 trays\n"
        + "".join(f"BlockName={r} Nodes={r}-[01-18]\n" for r in racks)
    )
    every = [n for trays in racks.values() for n in trays]
    # each rack cordoned an hour before its reboots start (as a person does before maintenance)
    planned = [
        {"node": n, "state": "cordoned", "at": iso(t0 + r * 7 * 86400 + 8 * 3600)}
        for r, trays in enumerate(racks.values())
        for n in trays
    ]
    return {
        "name": "planned-reboots",
        "source": "NVIDIA/NVSentinel#1701 (rack-by-rack reboots raised NVLINK_DOWN as fatal on 214 of 288 nodes)",
        "storm": True,
        "node_days": len(every) * 25,
        "roots": [],
        "expect": [],
        "affected": [],
        "planned_nodes": planned,
        "budget": {"pages": 0, "fatal_actions": 0, "compression": 50},
    }


# Background application XIDs for the month: issue 30's replay had 1,040 alert rows for 200 nodes in a month
# (one DBE among them); the mix of codes follows the application bucket of NVIDIA's catalog
# (fixtures/samples/xid-catalog: 13, 31, 43, 45 are the user-application XIDs). ~1,040 bursts of 1-4 lines.
BACKGROUND = {13: 0.25, 31: 0.25, 43: 0.3, 45: 0.2}


def dbe_month(out: Path, rng: random.Random) -> dict[str, Any]:
    """One real DBE (XID 48; the line of NVIDIA/gpu-operator#1146) in a month of 200 HGX nodes' background of
    application XIDs (issue 30's replay: row 47 of 1,040)."""
    k = Kernel()
    t0 = at("2026-10-01T00:00:00Z")
    days = 30
    nodes = [f"node-{i:03d}" for i in range(1, 201)]
    for n in nodes:
        k.announce(n, t0, HGX)
    codes, weights = list(BACKGROUND), list(BACKGROUND.values())
    for _ in range(1039):
        n = rng.choice(nodes)
        g = rng.randrange(8)
        code = rng.choices(codes, weights=weights)[0]
        t = t0 + rng.uniform(600, days * 86400 - 600)
        for j in range(rng.randrange(1, 5)):
            k.xid(n, t + j * 0.3, HGX[g], code, app_body(rng, code))
    td = t0 + 17 * 86400 + 4 * 3600 + 22 * 60 + 31.5
    k.xid("node-137", td, HGX[6], 48, X48)
    k.write(out)
    return {
        "name": "dbe-month",
        "source": "issue 30 (one DBE among 200 nodes' application XIDs: row 47 of 1,040); the XID 48 line of "
        "NVIDIA/gpu-operator#1146",
        "storm": False,
        "node_days": len(nodes) * days,
        "roots": [
            {
                "node": "node-137",
                "gpu": 6,
                "pci_bus_id": pci_long(HGX[6]),
                "xid": 48,
                "time": iso(td),
                "rule": "GpuXid",
                "scope": "gpu",
                "key": None,
                "page": True,
            }
        ],
        "affected": [],
        "planned_nodes": [],
        "budget": {"false_pages_per_1000_node_days": 1},
    }


def infinitehbd(out: Path, rng: random.Random) -> dict[str, Any]:
    """The public InfiniteHBD trace (stepfun-ai/InfiniteHBD-Trace, Apache-2.0): 584 faults on 231 of 400 servers
    over 349 days, no log lines: run.py feeds each fault as an alert-like row to the fold directly."""
    src = REPO / "fixtures" / "samples" / "fault-traces" / "infinitehbd"
    for f in ("fault_trace.json", "LICENSE"):
        shutil.copyfile(src / f, out / f)
    return {
        "name": "infinitehbd",
        "source": "stepfun-ai/InfiniteHBD-Trace (SIGCOMM 2025, arXiv 2502.03885), copied with its LICENSE",
        "storm": False,
        "fold_only": True,
        "node_days": 400 * 349,
        "roots": [],
        "affected": [],
        "planned_nodes": [],
        "budget": {"max_incidents": 496, "window_s": 300},
    }


BUILDERS: dict[str, tuple[Callable[[Path, random.Random], dict[str, Any]], bool]] = {
    # name: (builder, big: written at run time, never committed)
    "teardown-storm": (teardown_storm, True),
    "job-crash-64": (job_crash_64, False),
    "nvlink-domain": (nvlink_domain, False),
    "nvlink-links": (nvlink_links, False),
    "rack-cooling": (rack_cooling, False),
    "ib-leaf": (ib_leaf, False),
    "ib-leaf-ports": (ib_leaf_ports, False),
    "driver-rollout": (driver_rollout, False),
    "planned-reboots": (planned_reboots, False),
    "dbe-month": (dbe_month, True),
    "infinitehbd": (infinitehbd, False),
}


def build(name: str, out: Path, seed: int = 30) -> dict[str, Any]:
    """Write fixture `name` into the empty directory `out`; its truth."""
    fn, _ = BUILDERS[name]
    out.mkdir(parents=True, exist_ok=True)
    truth = fn(out, random.Random(f"{name}/{seed}"))
    doc = (fn.__doc__ or "").strip()
    files = sorted(p.name for p in out.iterdir())
    readme = f"# {name}\n\n{doc}\n\nSource of the shape: {truth['source']}.\n\nWritten by `python bench/noise/make_fixtures.py` (seeded, deterministic); files: {', '.join(files)}.\n"
    write_truth(out, truth, readme)
    return truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the fixtures into DIR/<name>/")
    ap.add_argument(
        "--commit", action="store_true", help="write the small fixtures into bench/noise/fixtures/"
    )
    ap.add_argument("--only", nargs="*", default=None, help="fixture names (default: all)")
    a = ap.parse_args(argv)
    names = a.only or list(BUILDERS)
    bad = [n for n in names if n not in BUILDERS]
    if bad:
        print(
            f"make_fixtures: --only: no fixture {', '.join(bad)} (known: {', '.join(BUILDERS)})",
            file=sys.stderr,
        )
        return 2
    if not a.out and not a.commit:
        print("make_fixtures: give --out DIR or --commit", file=sys.stderr)
        return 2
    for n in names:
        big = BUILDERS[n][1]
        if a.commit and not big:
            d = FIXTURES / n
            shutil.rmtree(d, ignore_errors=True)
            t = build(n, d)
        elif a.out:
            d = a.out / n
            shutil.rmtree(d, ignore_errors=True)
            t = build(n, d)
        else:
            continue
        print(json.dumps({"fixture": n, "dir": str(d), "roots": len(t["roots"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
