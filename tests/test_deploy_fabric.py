"""The fabric collector as deployed (issue 31): the DaemonSet (kustomize base and Helm chart) mounts the host's
/sys read-only at /host/sys and passes `--sysfs-root=/host/sys` (node_exporter's `--path.sysfs=/host/sys`); the
chart's agent.fabric values (enabled, sysfsRoot, exclude) become the mount and the options, and disabled it is
`--no-collector=fabric` with no mount. The rendered args are run: the real agent, with each rendered option as
given, reads the ports of a saved tree standing at the mount's host path. Why the host's /sys and not the pod's
own: checked with the real kernel in a new network namespace. The systemd unit reads /sys itself: read-only under
its sandbox, which the collector needs no more than."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleettool.store import Store
from tests.conftest import ROOT, run_cli
from tests.deploy_render import containers, helm_error, helm_objects, kustomize, kustomize_with, one

IB = ROOT / "fixtures" / "infiniband"
NODE = "gpu-21"
H100_PORTS = {f"port=mlx5_{i}/1" for i in (0, 1, 4, 5, 6, 7, 8, 9)} | {"port=mlx5_bond_0/1"}
# the rendered options that name this node's things, replaced by a test's own (the rest are run as rendered)
LOCAL = {"--db", "--node", "--metrics-port", "--metrics-addr", "--kmsg", "--dcgm-exporter"}
FAKE = ("--source", "fake", "--gpus", "1", "--kmsg", "off", "--dcgm-exporter", "off", "-q")


def _helm(values: dict[str, Any]) -> dict[str, Any]:
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is a dev dependency")
    return one(helm_objects(values), "DaemonSet", "-agent")


def _agent(ds: dict[str, Any]) -> dict[str, Any]:
    (c,) = containers(ds)
    return c


def _option(args: list[str], name: str) -> list[str]:
    return [a.partition("=")[2] for a in args if a.partition("=")[0] == name]


def sysfs_mount(ds: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(the --sysfs-root the agent is given, the container's mount at that path, the pod's volume it mounts)."""
    c = _agent(ds)
    (root,) = _option(c["args"], "--sysfs-root")
    (mount,) = [m for m in c.get("volumeMounts", []) if m["mountPath"] == root]
    (vol,) = [v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    return root, mount, vol


def _mounts_host_sys(ds: dict[str, Any]) -> bool:
    return any(
        (v.get("hostPath") or {}).get("path") == "/sys" for v in ds["spec"]["template"]["spec"]["volumes"]
    )


def test_kustomize_mounts_the_hosts_sys_read_only_at_the_sysfs_root(tmp_path: Path) -> None:
    ds = one(kustomize(), "DaemonSet", "fleettool-agent")
    # the pod keeps its own network namespace (its port behind networkpolicy.yaml): its own /sys is not the host's
    assert not ds["spec"]["template"]["spec"].get("hostNetwork")
    root, mount, vol = sysfs_mount(ds)
    assert root == "/host/sys" and mount["readOnly"] is True
    assert vol == {"name": mount["name"], "hostPath": {"path": "/sys", "type": "Directory"}}
    # the kmsg-device component keeps it
    ds = one(kustomize_with(tmp_path, "kmsg-device"), "DaemonSet", "fleettool-agent")
    assert sysfs_mount(ds)[0] == "/host/sys" and _mounts_host_sys(ds)


def test_the_charts_fabric_values_become_the_mount_and_the_options() -> None:
    root, mount, vol = sysfs_mount(_helm({}))
    assert (root, mount["readOnly"], vol["hostPath"]) == (
        "/host/sys",
        True,
        {"path": "/sys", "type": "Directory"},
    )
    assert _option(_agent(_helm({}))["args"], "--fabric-exclude") == []
    ds = _helm({"agent": {"fabric": {"exclude": ["mlx5_bond_*", "mlx5_0/2"], "sysfsRoot": "/hostfs/sys"}}})
    assert sysfs_mount(ds)[0] == "/hostfs/sys"
    assert _option(_agent(ds)["args"], "--fabric-exclude") == ["mlx5_bond_*", "mlx5_0/2"]
    # disabled: the collector off and no mount of the host's /sys
    for values in (
        {"agent": {"fabric": {"enabled": False}}},
        {"agent": {"fabric": {"enabled": False, "exclude": ["x"]}}},
    ):
        ds = _helm(values)
        args = _agent(ds)["args"]
        assert _option(args, "--no-collector") == ["fabric"], args
        assert _option(args, "--sysfs-root") == _option(args, "--fabric-exclude") == []
        assert not _mounts_host_sys(ds) and all(m["name"] != "sysfs" for m in _agent(ds)["volumeMounts"])


def test_bad_fabric_values_are_refused_naming_the_value() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is a dev dependency")
    assert "/agent/fabric/exclude" in helm_error({"agent": {"fabric": {"exclude": "mlx5_bond_*"}}})
    assert "/agent/fabric/exclude/0" in helm_error({"agent": {"fabric": {"exclude": [""]}}})
    assert "/agent/fabric/sysfsRoot" in helm_error({"agent": {"fabric": {"sysfsRoot": "host/sys"}}})
    assert "/agent/fabric/sysfsRoot" in helm_error({"agent": {"fabric": {"sysfsRoot": "/tmp"}}})
    assert "/agent/fabric/enabled" in helm_error({"agent": {"fabric": {"enabled": "yes"}}})


def _run_rendered(ds: dict[str, Any], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The agent run with the DaemonSet's args as rendered, but LOCAL's, with the host's /sys a copy of the saved
    H100 tree: --sysfs-root's value is followed through the container's mount to the volume's host path, which
    must be /sys."""
    host_sys = tmp_path / "host-sys"
    shutil.copytree(IB / "sysfs-h100", host_sys, symlinks=True)
    spec, args = ds["spec"]["template"]["spec"], []
    for a in _agent(ds)["args"][1:]:
        name, _, value = a.partition("=")
        if name in LOCAL:
            continue
        if name == "--sysfs-root":
            (m,) = [m for m in _agent(ds)["volumeMounts"] if m["mountPath"] == value]
            (v,) = [v for v in spec["volumes"] if v["name"] == m["name"]]
            assert v["hostPath"]["path"] == "/sys", v
            a = f"--sysfs-root={host_sys}"
        args.append(a)
    db = tmp_path / "a.duckdb"
    r = run_cli("agent", *args, "--db", str(db), "--node", NODE, *FAKE, "--duration", "2s", "--flush", "1s")
    return r, db


def _ports(db: Path) -> set[str]:
    with Store(db, read_only=True) as s:
        rows = s.query("SELECT DISTINCT sub FROM samples WHERE metric = 'ib_port_state'")
    return {str(r["sub"]) for r in rows}


@pytest.mark.parametrize(
    ("render", "ports"),
    [
        ("kustomize", H100_PORTS),
        ("helm-defaults", H100_PORTS),
        ("helm-exclude", H100_PORTS - {"port=mlx5_bond_0/1", "port=mlx5_0/1"}),
        ("helm-off", set()),
    ],
)
def test_the_rendered_args_run_the_agent_over_the_mounted_tree(
    render: str, ports: set[str], tmp_path: Path
) -> None:
    ds = {
        "kustomize": lambda: one(kustomize(), "DaemonSet", "fleettool-agent"),
        "helm-defaults": lambda: _helm({}),
        "helm-exclude": lambda: _helm({"agent": {"fabric": {"exclude": ["mlx5_bond_*", "mlx5_0/1"]}}}),
        "helm-off": lambda: _helm({"agent": {"fabric": {"enabled": False}}}),
    }[render]()
    r, db = _run_rendered(ds, tmp_path)
    assert r.returncode == 0, r.stderr
    assert _ports(db) == ports


def _unshare(script: str) -> subprocess.CompletedProcess[str]:
    """script as root in new mount and network namespaces, as a pod's container starts (skipped where this
    machine cannot make them: the reason is in the skip)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to make a network namespace and mount sysfs in it")
    r = subprocess.run([unshare, "-n", "-m", "sh", "-ec", script], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and "mount" in r.stderr and "ermission" in r.stderr:
        pytest.skip(f"this machine refuses the mounts: {r.stderr.strip()}")
    return r


def test_the_hosts_sys_mounted_shows_the_hosts_netdevs_where_the_pods_own_sysfs_does_not(
    tmp_path: Path,
) -> None:
    """Why the host's /sys (no hostNetwork): sysfs shows a device's net/ entries of the network namespace it was
    mounted in. The container's own /sys is mounted in the pod's namespace: a NIC's net/ is empty there, so the
    ports' `class/infiniband/<dev>/device/net/<netdev>/carrier_changes` would be missing; the host's /sys, bind-
    mounted read-only as the hostPath volume is, keeps the host's netdevs. Checked on the device of a netdev of
    this machine (it has no RDMA device; the collector's path goes through the same device/net directory)."""
    dev_net = sorted(p for p in Path("/sys/class/net").iterdir() if (p / "device").exists())
    if not dev_net:
        pytest.skip("no netdev with a device here (only virtual ones)")
    name = dev_net[0].name
    device = os.path.realpath(dev_net[0] / "device").removeprefix("/sys")
    host, own = tmp_path / "host-sys", tmp_path / "own-sys"
    host.mkdir()
    own.mkdir()
    r = _unshare(
        f"mount --bind /sys {host}; mount -o remount,bind,ro {host}; mount -t sysfs sysfs {own}\n"
        f"echo own-class: $(ls {own}/class/net)\n"
        f"echo own: [$(ls {own}{device}/net 2>/dev/null)]\n"
        f"echo host: $(ls {host}{device}/net)\n"
        f"echo carrier: $(cat {host}{device}/net/{name}/carrier_changes)\n"
        f"touch {host}/x 2>/dev/null && echo writable || echo read-only\n"
    )
    assert r.returncode == 0, r.stderr
    out = dict(line.partition(": ")[::2] for line in r.stdout.splitlines() if ": " in line)
    # the pod's namespace: none of the host's netdevs, not even under the host's NIC
    assert out["own-class"] == "lo" and out["own"] == "[]", r.stdout
    assert name in out["host"].split() and out["carrier"].isdigit(), r.stdout
    assert r.stdout.splitlines()[-1] == "read-only"


def test_the_systemd_unit_reads_the_default_sys_which_its_sandbox_leaves_readable(tmp_path: Path) -> None:
    """Bare metal: the unit's agent reads /sys itself (no --sysfs-root, the fabric collector on). Its sandbox
    makes /sys read-only (ProtectSystem=strict, ProtectKernelTunables=yes: systemd's namespace.c lists "/sys"
    MOUNT_READ_ONLY) and hides none of it (no InaccessiblePaths / TemporaryFileSystem over it, no
    PrivateNetwork, which would give the agent a namespace of its own): the agent is run here over a read-only
    bind mount of a saved tree and stores every port."""
    import configparser

    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string((ROOT / "deploy" / "systemd" / "fleettool-agent.service").read_text())
    svc = cp["Service"]
    args = svc["ExecStart"].split()[2:]
    assert _option(args, "--sysfs-root") == [] and "fabric" not in " ".join(args)
    for key in (
        "InaccessiblePaths",
        "TemporaryFileSystem",
        "ReadOnlyPaths",
        "BindPaths",
        "BindReadOnlyPaths",
    ):
        assert "/sys" not in svc.get(key, ""), key
    assert svc.get("PrivateNetwork", "no") == "no" and svc.get("ProtectKernelTunables") == "yes"
    tree = tmp_path / "sys"
    shutil.copytree(IB / "sysfs-h100", tree, symlinks=True)
    db = tmp_path / "a.duckdb"
    here = Path(sys.executable).parent / "fleettool"
    exe = str(here) if here.exists() else "fleettool"
    kept = [a for a in args if a.partition("=")[0] not in LOCAL]
    cmd = [exe, "agent", *kept, "--db", str(db), "--node", NODE, *FAKE, "--sysfs-root", str(tree)]
    cmd += ["--duration", "2s", "--flush", "1s"]
    r = _unshare(
        f"mount --bind {tree} {tree}; mount -o remount,bind,ro {tree}\n"
        f"touch {tree}/x 2>/dev/null && exit 9\n" + " ".join(f"'{c}'" for c in cmd)
    )
    assert r.returncode == 0, r.stderr
    assert _ports(db) == H100_PORTS
