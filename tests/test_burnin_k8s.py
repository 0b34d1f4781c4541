"""The burn-in's Kubernetes path (fleettool/burnin/dispatch.run_k8s) against a stand-in kubectl: no cluster runs
here, so a small script plays the API server's part for the three calls the dispatcher makes (create a Job,
get it, read its logs), keeping the Jobs in a folder as the server keeps them for ttlSecondsAfterFinished.

What it pins: every run creates a Job of its own name, so an earlier run's finished Job (kept an hour for its
logs) is never read as this run's result; a name taken is an error, not a reuse; a Job that finished Complete or
Failed is read at once (a FAIL verdict exits 1 and fails its Job, and its report still counts); one that never
finishes is named in the error at the timeout."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from fleettool.burnin.dispatch import DispatchError, job_name, job_outcome, k8s_job, run_k8s

FAKE = r'''#!PYTHON
"""kubectl create -f - | -n NS get job/N -o json | -n NS logs job/N, over the Jobs in $FAKE_KUBE."""
import json, os, sys
from pathlib import Path

state = Path(os.environ["FAKE_KUBE"])
args = sys.argv[1:]
if args[:2] == ["-n", args[1] if len(args) > 1 else ""]:
    args = args[2:]
(state / "calls").open("a").write(" ".join(sys.argv[1:]) + "\n")
if args[:3] == ["create", "-f", "-"]:
    job = json.load(sys.stdin)
    name = job["metadata"]["name"]
    if (state / f"{name}.json").exists():
        print(f'Error from server (AlreadyExists): jobs.batch "{name}" already exists', file=sys.stderr)
        sys.exit(1)
    (state / f"{name}.json").write_text(json.dumps(job))
    print(f"job.batch/{name} created")
elif args[0] == "get":
    name = args[1].split("/", 1)[1]
    polls = state / f"{name}.polls"
    n = int(polls.read_text()) + 1 if polls.exists() else 1
    polls.write_text(str(n))
    plan = json.loads((state / "plan.json").read_text()).get(name, {})
    status = {"active": 1}
    if n >= plan.get("after", 2) and plan.get("outcome", "Complete") != "never":
        outcome = plan.get("outcome", "Complete")
        status = {"conditions": [{"type": outcome, "status": "True"}], ("succeeded" if outcome == "Complete" else "failed"): 1}
    print(json.dumps({"metadata": {"name": name}, "status": status}))
elif args[0] == "logs":
    name = args[1].split("/", 1)[1]
    job = json.loads((state / f"{name}.json").read_text())
    spec = job["spec"]["template"]["spec"]
    report = {"run_id": name, "node": spec["nodeSelector"]["kubernetes.io/hostname"], "started": 1714564800}
    print(json.dumps({**report, "job": name, "args": spec["containers"][0]["args"]}))
else:
    print("unexpected: " + " ".join(args), file=sys.stderr)
    sys.exit(2)
'''


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "kube"
    state.mkdir()
    (state / "plan.json").write_text("{}")
    exe = tmp_path / "kubectl"
    exe.write_text(FAKE.replace("PYTHON", sys.executable, 1))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_KUBE", str(state))
    return exe


def _plan(kube: Path, **jobs: dict[str, object]) -> None:
    (Path(os.environ["FAKE_KUBE"]) / "plan.json").write_text(json.dumps(jobs))


def test_each_run_gets_a_job_name_of_its_own() -> None:
    names = {job_name("gpu-17.rack-3.example.com", now=1_780_000_000) for _ in range(20)}
    assert len(names) == 20
    long = job_name("n" * 200)
    for n in [*names, long]:
        assert len(n) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n), n
    assert min(names).startswith("fleettool-burnin-gpu-17-rack-3-example-com-")
    assert job_name("gpu-17", now=1) < job_name("gpu-17", now=2**31)  # sortable by start within a node
    a = k8s_job("gpu-17", [], image="img")
    b = k8s_job("gpu-17", [], image="img")
    assert a["metadata"]["name"] != b["metadata"]["name"]


def test_a_second_run_reads_its_own_job_not_the_first(kube: Path) -> None:
    first = k8s_job("gpu-17", ["--duration", "30s"], image="img")
    second = k8s_job("gpu-17", ["--duration", "60s"], image="img")
    r1 = run_k8s(first, 5, kubectl=str(kube), poll_s=0.01)
    r2 = run_k8s(second, 5, kubectl=str(kube), poll_s=0.01)
    assert r1["job"] == first["metadata"]["name"] and "30s" in r1["args"]
    assert r2["job"] == second["metadata"]["name"] and "60s" in r2["args"]
    calls = (Path(os.environ["FAKE_KUBE"]) / "calls").read_text().splitlines()
    assert [c.split()[0] if c.startswith("create") else c.split()[2] for c in calls] == [
        "create",
        "get",
        "get",  # the fake finishes a Job on its second poll
        "logs",
    ] * 2


def test_a_name_taken_is_an_error_not_a_reuse(kube: Path) -> None:
    job = k8s_job("gpu-17", [], image="img")
    run_k8s(job, 5, kubectl=str(kube), poll_s=0.01)
    with pytest.raises(DispatchError, match=r"kubectl create job/fleettool-burnin-gpu-17-.*AlreadyExists"):
        run_k8s(job, 5, kubectl=str(kube), poll_s=0.01)


def test_a_failed_job_still_gives_its_report_and_a_job_that_never_ends_is_named(kube: Path) -> None:
    failed = k8s_job("gpu-17", [], image="img")
    hung = k8s_job("gpu-18", [], image="img")
    _plan(
        kube,
        **{
            failed["metadata"]["name"]: {"outcome": "Failed", "after": 3},
            hung["metadata"]["name"]: {"outcome": "never"},
        },
    )
    assert run_k8s(failed, 5, kubectl=str(kube), poll_s=0.01)["job"] == failed["metadata"]["name"]
    with pytest.raises(
        DispatchError,
        match=rf"job/{hung['metadata']['name']} in fleettool-burnin has not finished after 0.2s",
    ):
        run_k8s(hung, 0.2, kubectl=str(kube), poll_s=0.02)


def test_job_outcome_reads_conditions_then_counts() -> None:
    assert job_outcome({"active": 1}) is None
    assert job_outcome({"conditions": [{"type": "Complete", "status": "False"}], "active": 1}) is None
    assert (
        job_outcome(
            {
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"},
                ]
            }
        )
        == "Complete"
    )
    assert (
        job_outcome(
            {
                "conditions": [
                    {"type": "FailureTarget", "status": "True"},
                    {"type": "Failed", "status": "True"},
                ]
            }
        )
        == "Failed"
    )
    assert job_outcome({"succeeded": 1}) == "Complete" and job_outcome({"failed": 1}) == "Failed"


def test_the_job_meets_restricted_with_the_gpus_from_the_device_plugin() -> None:
    """The burn-in Job is admitted by a namespace that enforces Pod Security `restricted` (the burn-in namespace
    of deploy/, so that the right to create Jobs there is not root on a node): non-root, no escalation, every
    capability dropped, seccomp RuntimeDefault. The GPUs come from the device plugin (nvidia.com/gpu), which
    restricted allows; nothing privileged, no host path, and no API token (the burn-in calls no API)."""
    from tests.pod_security import least_level, violations

    job = k8s_job("gpu-17", ["--duration", "30s"], image="img", gpus=8)
    kv = pytest.importorskip("kubernetes_validate")
    kv.validate(job, kv.utils.latest_version(), strict=True)
    assert [str(v) for v in violations(job, "restricted")] == []
    assert least_level(job) == "restricted"
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert c["securityContext"].get("privileged") is not True
    # the check can fail: without the seccomp profile the Job is Baseline only
    pod["securityContext"].pop("seccompProfile")
    assert [v.control for v in violations(job, "restricted")] == ["Seccomp"]


def test_the_printed_job_is_the_one_restricted_admits() -> None:
    """`fleettool burnin --via k8s --print-job` (a real process) prints that Job, in the burn-in namespace."""
    from tests.conftest import run_cli
    from tests.pod_security import violations

    r = run_cli("burnin", "--node", "gpu-17", "--via", "k8s", "--print-job", "--image", "reg/fleettool:1")
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)
    assert violations(job, "restricted") == []
    assert job["metadata"]["namespace"] == "fleettool-burnin"
