"""Topology and jobs as data (issue 30 item 1): Slurm hostlists checked against the real `scontrol show
hostnames`, topology.conf (tree and block), sacct --parsable2, kubectl get nodes -o json, a topology CSV; the
node_topology and jobs tables; replay reading them by content and through --topology."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fleettool.formats.hostlist import HostlistError, expand
from fleettool.formats.kube_nodes import parse_kube_nodes
from fleettool.formats.sacct import parse_sacct
from fleettool.formats.slurm_topology import parse_topology_conf
from fleettool.formats.topology_csv import parse_topology_csv
from fleettool.recording.identify import identify_bytes
from fleettool.store.db import Store
from fleettool.store.schema import SCHEMA_VERSION
from fleettool.store.topology import list_jobs, node_topology
from tests.conftest import FIXTURES, run_cli

TOPO = FIXTURES / "topology"

# accepted by Slurm: brackets with lists and ranges, zero padding, several groups, comma lists outside brackets
GOOD = [
    "gpu-[01-08,10]",
    "r[1-2]-n[01-18]",
    "tux[0-3,12,18-20]",
    "n[1-10]",
    "n[001-3]",
    "n[8-10]",
    "n[9-11]",
    "n[08-10]",
    "n[098-101]",
    "tux[9-11,012]",
    "a1,a1",
    "a[1-2],b3,c[08-10]",
    "gpu-[1-3],gpu-[01-02]",
    "x[1-2]y[3-4]",
    "a[1-2]b[1-3]c[1-2]",
    "a[1-2]b[1-2]c[1-2]d[1-2]",
    "r06-[01-18]",
    "leaf[1-16]",
    "s[0-2,4-8,12]",
    "node1",
    "node1,node2,node3",
    "gb200-rack07-tray[01-18]",
    "n[5,3,1]",
    "n[0]",
    "dgx-h100-[000-031]",
    "r[01-02]-gpu[1-4]",
    "host.example.com",
    "a[1-3],b[1-3],c",
    "n[1-2,4-5,7-8]",
    "p[9-12]q[1-2]",
]
# refused by Slurm (scontrol prints `Invalid hostlist`): refused here too
BAD = ["n[3-1]", "n[a-b]", "n[]", "n[1,,2]", "c[08-10]x", "n[1-2]-ib", "r[1-2]-n[01-03]x"]


@pytest.fixture(scope="module")
def scontrol_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A minimal slurm.conf: `scontrol show hostnames` needs one to start, and no daemon."""
    if shutil.which("scontrol") is None:
        pytest.skip(
            "scontrol not installed (apt-get install slurm-client): hostlists not checked against Slurm"
        )
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text(
        "ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost\nPartitionName=p Nodes=localhost\n"
    )
    return {**os.environ, "SLURM_CONF": str(conf)}


def _scontrol(expr: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["scontrol", "show", "hostnames", expr], capture_output=True, text=True, env=env, timeout=30
    )


@pytest.mark.parametrize("expr", GOOD)
def test_hostlist_expands_as_scontrol_does(expr: str, scontrol_env: dict[str, str]) -> None:
    real = _scontrol(expr, scontrol_env)
    assert real.returncode == 0 and real.stdout, real.stderr
    assert expand(expr) == real.stdout.split()


@pytest.mark.parametrize("expr", BAD)
def test_hostlist_refused_where_scontrol_refuses(expr: str, scontrol_env: dict[str, str]) -> None:
    real = _scontrol(expr, scontrol_env)
    assert "Invalid hostlist" in real.stdout + real.stderr
    with pytest.raises(HostlistError):
        expand(expr)


def test_tree_gives_each_node_its_leaf_and_spine() -> None:
    topo = parse_topology_conf(TOPO.joinpath("topology-tree.conf").read_text().splitlines(), "t.conf")
    assert not topo.issues
    assert len(topo.nodes) == 16 and topo.leaves == {"leaf1", "leaf2"} and topo.spines == {"spine1"}
    assert topo.nodes["gpu-03"] == {"leaf": "leaf1", "spine": "spine1"}
    assert topo.nodes["gpu-16"] == {"leaf": "leaf2", "spine": "spine1"}
    # three levels, a leaf under two top switches, names in any case, comments anywhere
    text = [
        "switchname=l1 nodes=n[1-2]",
        "SwitchName=l2 Nodes=n[3-4]  # second leaf",
        "SwitchName=agg1 Switches=l[1-2] LinkSpeed=100",
        "SwitchName=coreA Switches=agg1",
        "SwitchName=coreB Switches=agg1",
    ]
    deep = parse_topology_conf(text)
    assert deep.nodes["n4"] == {"leaf": "l2", "spine": "coreA,coreB"} and deep.spines == {"coreA", "coreB"}


def test_block_gives_each_node_its_nvlink_domain() -> None:
    topo = parse_topology_conf(TOPO.joinpath("topology-block.conf").read_text().splitlines())
    assert not topo.issues and topo.plugin == "block" and topo.block_sizes == [18, 36]
    assert len(topo.nodes) == 36 and topo.nodes["r07-18"] == {"nvlink_domain": "r07"}


def test_topology_conf_bad_lines_named() -> None:
    text = ["SwitchName=leaf1 Nodes=gpu-[01-", "# ok", "SwitchName=s Speed=9", "BlockName=x", "Nodes=a"]
    topo = parse_topology_conf(text, "topo.conf")
    assert [(str(i).split(": ")[0]) for i in topo.issues] == [
        "topo.conf:1",
        "topo.conf:3",
        "topo.conf:4",
        "topo.conf:5",
    ]


def test_sacct_folds_steps_and_keeps_states() -> None:
    jobs, issues = parse_sacct(TOPO.joinpath("sacct.txt").read_text().splitlines())
    assert not issues
    by = {j.job_id: j for j in jobs}
    assert sorted(by) == ["4711", "4712", "4713"]
    assert (
        by["4711"].state == "NODE_FAIL"
        and len(by["4711"].nodes) == 16
        and by["4711"].name == "llama-pretrain"
    )
    assert (by["4712"].state, by["4712"].state_detail, by["4712"].nodes) == (
        "CANCELLED",
        "by 1000",
        ["gpu-09", "gpu-10"],
    )
    assert by["4713"].state == "RUNNING" and by["4713"].end is None and by["4713"].start is not None
    other, issues = parse_sacct(TOPO.joinpath("sacct-reordered.txt").read_text().splitlines())
    assert not issues
    o = {j.job_id: j for j in other}
    assert len(o["900"].nodes) == 36 and o["900"].nodes[0] == "r06-01" and o["900"].state == "COMPLETED"
    assert o["901"].nodes == [] and o["901"].start is None and o["901"].state == "PENDING"


def test_sacct_bad_lines_named() -> None:
    text = [
        "JobID|JobName|NodeList|Start|End|State",
        "1|a|n[1-2]|2026-12-05T10:00:00|Unknown|RUNNING",
        "2|b|n[1-2]|2026-12-05T10:00:00|RUNNING",
        "3|c|n[2-1]|2026-12-05T10:00:00|Unknown|RUNNING",
        "4|d|n1|yesterday|Unknown|RUNNING",
    ]
    jobs, issues = parse_sacct(text, "s.txt")
    assert [j.job_id for j in jobs] == ["1"]
    assert [str(i).split(": ")[0] for i in issues] == ["s.txt:3", "s.txt:4", "s.txt:5"]
    _, missing = parse_sacct(["JobID|JobName|Start|End|State", "1|a|x|y|z"], "m.txt")
    assert len(missing) == 1 and str(missing[0]).startswith("m.txt:1: the header lacks nodelist")


def test_kubectl_nodes_labels_and_rack_label() -> None:
    text = TOPO.joinpath("kubectl-nodes.json").read_text()
    nodes, issues = parse_kube_nodes(text, "k.json")
    assert not issues
    assert nodes["r06-01"] == {
        "zone": "us-east-1a",
        "rack": "rk06",
        "clique": "4f2c8a3e-5b1d-4e7a-9c0f-2d6b8e1a7c35.32766",
        "nvlink_domain": "4f2c8a3e-5b1d-4e7a-9c0f-2d6b8e1a7c35",
        "gpu_product": "NVIDIA-GB200",
    }
    assert nodes["cpu-01"] == {}
    other, _ = parse_kube_nodes(text.replace("topology.kubernetes.io/rack", "example.com/rack"), "k.json")
    assert "rack" not in other["r06-01"]
    custom, _ = parse_kube_nodes(
        text.replace("topology.kubernetes.io/rack", "example.com/rack"), "k.json", "example.com/rack"
    )
    assert custom["r06-01"]["rack"] == "rk06"
    _, bad = parse_kube_nodes('{"kind": "List",\n "items": [\n {"kind": "Node" "x"}]}', "b.json")
    assert len(bad) == 1 and str(bad[0]).startswith("b.json:3: not JSON")


def test_topology_csv_keeps_extra_columns() -> None:
    nodes, issues = parse_topology_csv(TOPO.joinpath("nodes.csv").read_text().splitlines(), "n.csv")
    assert not issues
    assert nodes["gpu-01"] == {
        "rack": "rk01",
        "nvlink_domain": "nvl-a",
        "leaf": "leaf1",
        "row": "A",
        "pdu": "pdu-a1",
    }
    assert nodes["gpu-09"] == {"rack": "rk02", "leaf": "leaf2", "row": "B"}
    _, bad = parse_topology_csv(["node,rack", "a,r1", "b,r1,extra", ",r2"], "n.csv")
    assert [str(i).split(": ")[0] for i in bad] == ["n.csv:3", "n.csv:4"]


def test_identified_by_content_only() -> None:
    for name, fmt in (
        ("topology-tree.conf", "slurm-topology"),
        ("topology-block.conf", "slurm-topology"),
        ("sacct.txt", "sacct"),
        ("sacct-reordered.txt", "sacct"),
        ("kubectl-nodes.json", "kube-nodes"),
        ("nodes.csv", "topology-csv"),
    ):
        assert identify_bytes(TOPO.joinpath(name).read_bytes()).format == fmt, name
    # an incident log's CSV is not topology; nor is JSON of another kind
    assert identify_bytes(b"node,start,end,category\nn1,2026-01-01,2026-01-02,gpu\n").format == "unknown"
    assert identify_bytes(b'{"kind": "List", "items": [{"kind": "Pod"}]}').format == "unknown"


def _recording(tmp_path: Path) -> Path:
    rec = tmp_path / "rec"
    rec.mkdir()
    shutil.copy(TOPO / "topology-tree.conf", rec / "fabric")
    shutil.copy(TOPO / "sacct.txt", rec / "jobs-dump.log")
    shutil.copy(TOPO / "kubectl-nodes.json", rec / "k8s.txt")
    shutil.copy(FIXTURES / "scenarios" / "app-xid" / "kernel-gpu-30.log.gz", rec / "dmesg.gz")
    return rec


def test_replay_reads_topology_and_jobs_by_content(tmp_path: Path) -> None:
    rec, db = _recording(tmp_path), tmp_path / "t.duckdb"
    r = run_cli("replay", str(rec), "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert "topology: 18 nodes in 2 leaves, 1 spine, 1 NVLink domain, 1 rack, 1 zone" in r.stdout
    assert f"jobs: 3 from sacct ({rec / 'jobs-dump.log'})" in r.stdout
    assert f"{rec / 'fabric'} [Slurm topology.conf: topology/tree] 16 nodes (32 topology keys)" in r.stdout
    with Store(db, read_only=True) as st:
        topo = node_topology(st)
        rows = st.query(
            "SELECT node, key, value, source FROM node_topology WHERE node = 'gpu-07' ORDER BY key"
        )
        jobs = {j["job_id"]: j for j in list_jobs(st)}
    assert topo["gpu-07"] == {"leaf": "leaf1", "spine": "spine1"}
    assert {r["source"] for r in rows} == {str(rec / "fabric")}
    assert topo["r06-02"]["rack"] == "rk06" and topo["r06-02"]["gpu_product"] == "NVIDIA-GB200"
    assert "cpu-01" not in topo
    j = jobs["4712"]
    assert (j["state"], j["state_detail"], j["nodes"], j["source"]) == (
        "CANCELLED",
        "by 1000",
        ["gpu-09", "gpu-10"],
        str(rec / "jobs-dump.log"),
    )
    assert (
        j["start_time"] == 1796466000.0
    )  # 2026-12-05T10:20:00, read as UTC and jobs["4713"]["end_time"] is None
    assert len(jobs["4711"]["nodes"]) == 16
    again = run_cli("replay", str(rec), "--db", str(db), "--json")  # already ingested: nothing twice
    assert again.returncode == 0 and json.loads(again.stdout)["topology"][0].startswith("topology: 18 nodes")
    with Store(db, read_only=True) as st:
        assert st.scalar("SELECT count(*) FROM jobs") == 3
        assert st.scalar("SELECT count(*) FROM node_topology") == 42


def test_replay_topology_option(tmp_path: Path) -> None:
    rec, db = _recording(tmp_path), tmp_path / "t.duckdb"
    labelled = tmp_path / "nodes.json"
    labelled.write_text(
        TOPO.joinpath("kubectl-nodes.json").read_text().replace("topology.kubernetes.io/rack", "acme.io/rack")
    )
    r = run_cli(
        "replay",
        str(rec / "dmesg.gz"),
        "--db",
        str(db),
        "--topology",
        str(TOPO / "topology-block.conf"),
        "--topology",
        str(TOPO / "nodes.csv"),
        "--topology",
        str(labelled),
        "--rack-label",
        "acme.io/rack",
    )
    assert r.returncode == 0, r.stderr
    assert "topology: 39 nodes in 2 leaves, 4 NVLink domains, 3 racks, 1 zone" in r.stdout
    with Store(db, read_only=True) as st:
        topo = node_topology(st)
    assert topo["r06-05"] == {"nvlink_domain": "r06"} and topo["gpu-02"]["pdu"] == "pdu-a2"
    assert topo["r06-01"]["rack"] == "rk06"
    # a file of another kind, a missing one: exit 3 naming it, and no store left behind
    for bad, why in (
        (rec / "dmesg.gz", "not a topology or jobs file"),
        (tmp_path / "nope.conf", "no such file"),
    ):
        fresh = tmp_path / "fresh.duckdb"
        r = run_cli("replay", str(rec / "dmesg.gz"), "--db", str(fresh), "--topology", str(bad))
        assert r.returncode == 3 and str(bad) in r.stderr and why in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and not fresh.exists()


def test_replay_names_bad_topology_lines(tmp_path: Path, db: Path) -> None:
    bad = tmp_path / "topo"
    bad.write_text("SwitchName=leaf1 Nodes=gpu-[01-08]\nSwitchName=leaf2 Nodes=gpu-[09-\n")
    r = run_cli("replay", str(bad), "--db", str(db))
    assert r.returncode == 0 and f"{bad}:2: bad hostlist" in r.stderr
    strict = run_cli("replay", str(bad), "--db", str(tmp_path / "s.duckdb"), "--strict")
    assert strict.returncode == 3 and f"{bad}:2:" in strict.stderr


def test_older_store_opens_with_the_new_tables(tmp_path: Path) -> None:
    path = tmp_path / "v5.duckdb"
    with Store(path) as st:  # a version-5 store: no node_topology, no jobs
        st.con.execute("DROP TABLE node_topology; DROP TABLE jobs")
        st.con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    with Store(path, read_only=True) as st:
        assert node_topology(st) == {} and list_jobs(st) == []
    with Store(path) as st:
        assert st.scalar("SELECT value FROM meta WHERE key = 'schema_version'") == str(SCHEMA_VERSION)
        assert st.scalar("SELECT count(*) FROM jobs") == 0


def test_strict_failure_keeps_the_topology_it_stored(tmp_path: Path, db: Path) -> None:
    """--strict fails on a skipped file after the rest was read: a new store holding only topology is kept (a
    store with nothing in it is removed, and topology is something)."""
    rec = tmp_path / "rec"
    rec.mkdir()
    shutil.copy(TOPO / "topology-tree.conf", rec / "t")
    (rec / "notes.txt").write_text("just some words here that are not any recording format at all really\n")
    r = run_cli("replay", str(rec), "--db", str(db), "--strict")
    assert r.returncode == 3 and "notes.txt" in r.stderr
    assert db.exists(), "the store with the topology just read was removed"
    with Store(db, read_only=True) as st:
        assert len(node_topology(st)) == 16


# Real pod names, each from a public paste: JobSet (kubernetes-sigs/jobset#578), MPIJob v2 (kubeflow/mpi-operator
# #670) and v1 (#297, katib#1750), PyTorchJob (kubeflow/katib#1112), KServe Deployments (the dcgm-exporter scrape
# of NVIDIA/dcgm-exporter#512 in fixtures/samples/dcgm-exporter), a Deployment and a DaemonSet (mpi-operator#322).
POD_NAMES = {
    "network-jobset-leader-0-0-2qphg": "network-jobset",
    "tensorflow-benchmarks-job1-launcher-k9r6m": "tensorflow-benchmarks-job1",
    "tensorflow-benchmarks-job1-worker-0": "tensorflow-benchmarks-job1",
    "tensorflow-benchmarks-job1-worker-1": "tensorflow-benchmarks-job1",
    "tf2-keras-mnist-mpi-gpu-launcher-8jlf6": "tf2-keras-mnist-mpi-gpu",
    "tf2-keras-mnist-mpi-gpu-worker-1": "tf2-keras-mnist-mpi-gpu",
    "mpijob-horovod-7krst26m-launcher-7fndz": "mpijob-horovod-7krst26m",
    "pytorchjob-example-82cjcqdz-master-0": "pytorchjob-example-82cjcqdz",
    "pytorchjob-example-82cjcqdz-worker-1": "pytorchjob-example-82cjcqdz",
    "pytorchjob-example-random-754f4df755-k8sv4": "pytorchjob-example-random",
    "tts-predictor-00011-deployment-5554f75554-8j8pl": "tts-predictor-00011-deployment",
    "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl": "text-embedding-predictor-00008-deployment",
    "coredns-74ff55c5b-9ftn6": "coredns",
    "kindnet-7q2qb": "kindnet",
    "web-0": "web",  # StatefulSet ordinal (Kubernetes docs' example)
    "llama-finetune": "llama-finetune",  # a bare pod: its own workload
}


@pytest.mark.parametrize(("pod", "workload"), sorted(POD_NAMES.items()))
def test_pod_workload_names(pod: str, workload: str) -> None:
    from fleettool.store.topology import pod_workload

    assert pod_workload(pod) == workload


def _scrape(node: str, t_ms: int, pods: list[tuple[int, str, str]]) -> str:
    """A dcgm-exporter scrape of `node` in the label shape of dcgm-exporter#512 (Hostname, pod, namespace)."""
    lines = ["# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).", "# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    for gpu, ns, pod in pods:
        lines.append(
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="{gpu}",UUID="GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc{gpu:02d}",'
            f'pci_bus_id="00000000:{0x1A + gpu:02X}:00.0",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
            f'Hostname="{node}",DCGM_FI_DRIVER_VERSION="535.129.03",container="main",namespace="{ns}",'
            f'pod="{pod}"}} 41 {t_ms}'
        )
    return "\n".join(lines) + "\n"


def test_pod_jobs_from_dcgm_exporter_labels(tmp_path: Path, db: Path) -> None:
    """Pods of one MPIJob on three nodes, a PyTorchJob on one, a KServe Deployment beside them: replayed as
    dcgm-exporter scrapes, each workload is one job with the nodes its pods ran on, first and last seen."""
    from fleettool.store.topology import job_rows, pod_jobs

    rec = tmp_path / "rec"
    rec.mkdir()
    t0 = 1796466000000  # 2026-12-05T09:00:00Z
    mpi = "tensorflow-benchmarks-job1"
    for i, (node, pods) in enumerate(
        {
            "gpu-01": [(0, "train", f"{mpi}-launcher-k9r6m"), (1, "train", f"{mpi}-worker-0")],
            "gpu-02": [
                (0, "train", f"{mpi}-worker-1"),
                (1, "serve", "tts-predictor-00011-deployment-5554f75554-8j8pl"),
            ],
            "gpu-03": [(0, "train", f"{mpi}-worker-2"), (1, "exp", "pytorchjob-example-82cjcqdz-master-0")],
        }.items()
    ):
        (rec / f"{node}-a.prom").write_text(_scrape(node, t0 + i * 60_000, pods))
        (rec / f"{node}-b.prom").write_text(_scrape(node, t0 + 3_600_000 + i * 60_000, pods))
    r = run_cli("replay", str(rec), "--db", str(db))
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as st:
        jobs = {j.job_id: j for j in pod_jobs(st)}
        both = job_rows(st)
    assert sorted(jobs) == [
        "exp/pytorchjob-example-82cjcqdz",
        "serve/tts-predictor-00011-deployment",
        f"train/{mpi}",
    ]
    j = jobs[f"train/{mpi}"]
    assert (j.name, j.nodes, j.state_detail, j.source) == (
        mpi,
        ["gpu-01", "gpu-02", "gpu-03"],
        "4 pods",
        "dcgm-exporter pod labels",
    )
    assert (j.start, j.end) == (t0 / 1000, (t0 + 3_600_000 + 120_000) / 1000)
    assert jobs["serve/tts-predictor-00011-deployment"].nodes == ["gpu-02"]
    assert {x.job_id for x in both} == set(jobs)  # no Slurm jobs in this store: the pods' only
