"""cuda:i is matched to its NVML GPU by UUID (by PCI bus id where a UUID is missing, saying so), never taken to
be NVML's GPU i: CUDA's FASTEST_FIRST order, a CUDA_VISIBLE_DEVICES subset, a UUID NVML does not list. No GPU
here: the NVML side is a real 8 x H100 nvidia-smi dump (UUIDs and PCI ids), the CUDA side is what torch's
get_device_properties gives for those GPUs (a bare UUID, PCI domain/bus/device as ints), in CUDA's order."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fleettool.burnin.context import BurninConfig, StepContext
from fleettool.burnin.identity import CudaId, NvmlId, match, norm_uuid, read_cuda
from fleettool.burnin.report import BurninReport
from fleettool.burnin.runner import _devices
from fleettool.burnin.verdict import Result, Verdict, apply_peers
from fleettool.formats.nvidia_smi import gpu_identity, parse_text
from fleettool.sources.base import DeviceInfo
from tests.conftest import FIXTURES

SMI = FIXTURES / "samples" / "nvidia-smi" / "nvidia-smi-q-h100x8-535.161.08.txt"
FASTEST_FIRST = [3, 0, 7, 5, 1, 6, 2, 4]  # cuda:k is NVML GPU FASTEST_FIRST[k]


def nvml_gpus() -> list[dict[str, Any]]:
    """The dump's GPUs in NVML's order, with NVML's own spellings (GPU-..., 00000000:19:00.0)."""
    rep = parse_text(Path(SMI).read_text().splitlines())
    out = []
    for g in rep.gpus:
        ident = gpu_identity(g)
        dom, bus, dev = str(ident["pci_bus_id"]).split(":")
        out.append(
            {"index": g.index, "uuid": ident["uuid"], "busId": f"{int(dom, 16):08X}:{bus.upper()}:{dev}.0"}
        )
    assert len(out) == 8 and all(str(x["uuid"]).startswith("GPU-") for x in out)
    return out


def nvml_ids() -> list[NvmlId]:
    return [NvmlId(g["index"], g["uuid"], g["busId"]) for g in nvml_gpus()]


class Props(SimpleNamespace):
    pass


class TorchUuid:
    """torch._C._CUuuid: str() is the bare UUID, as seen from torch 2.11 on an H100 ('90d6b7e5-2652-...')."""

    def __init__(self, s: str) -> None:
        self.s = s

    def __str__(self) -> str:
        return self.s


def torch_props(g: dict[str, Any], *, with_uuid: bool = True, with_pci: bool = True) -> Props:
    p = Props(name="NVIDIA H100 80GB HBM3", total_memory=80 << 30)
    if with_uuid:
        p.uuid = TorchUuid(str(g["uuid"])[4:])
    if with_pci:
        dom, bus, rest = g["busId"].split(":")
        p.pci_domain_id, p.pci_bus_id, p.pci_device_id = (
            int(dom, 16),
            int(bus, 16),
            int(rest.split(".")[0], 16),
        )
    return p


def fake_torch(order: list[int], **kw: bool) -> Any:
    """torch.cuda as a process sees it: CUDA's device k is NVML GPU order[k]."""
    gpus = nvml_gpus()
    props = [torch_props(gpus[i], **kw) for i in order]
    cuda = SimpleNamespace(device_count=lambda: len(props), get_device_properties=lambda i: props[i])
    return SimpleNamespace(cuda=cuda)


class Nvml:
    """The GPU source's identity calls, answered from the dump (a GPU source is a seam; no NVML here)."""

    name = "nvml"

    def __init__(self) -> None:
        self.gpus = nvml_gpus()

    def device_count(self) -> int:
        return len(self.gpus)

    def device_info(self, index: int) -> DeviceInfo:
        g = self.gpus[index]
        return DeviceInfo(index, g["uuid"], "NVIDIA H100 80GB HBM3", g["busId"])

    def driver_version(self) -> str:
        return "535.161.08"


CUDA = BurninConfig(node="n", backend="cuda")


def test_cuda_order_is_not_nvml_order_the_runner_matches_by_uuid() -> None:
    devs, _model, driver = _devices(fake_torch(FASTEST_FIRST), CUDA, Nvml())  # type: ignore[arg-type]
    gpus = nvml_gpus()
    assert [d["device"] for d in devs] == [f"cuda:{k}" for k in range(8)]
    assert [d["gpu"] for d in devs] == FASTEST_FIRST  # was [0, 1, ..., 7]: cuda:k taken as NVML GPU k
    assert [d["uuid"] for d in devs] == [gpus[i]["uuid"] for i in FASTEST_FIRST]
    assert all(d["identity"]["matched_by"] == "uuid" for d in devs) and driver == "535.161.08"
    assert devs[0]["identity"] == {
        "cuda_device": "cuda:0",
        "nvml_index": 3,
        "uuid": "GPU-afe9f2ed-9dd0-572c-3cd8-b42b58b3bc99",
        "pci_bus_id": "0000:5d:00",
        "matched_by": "uuid",
    }


def test_a_fail_on_cuda_0_lands_on_its_nvml_gpu_naming_index_and_uuid() -> None:
    devs, _, _ = _devices(fake_torch(FASTEST_FIRST), CUDA, Nvml())  # type: ignore[arg-type]
    ctx = StepContext(CUDA, None, devs, BurninReport("r", "n", 0.0))
    d = devs[0]  # cuda:0 corrupts its GEMM
    bad = Result(
        "n", d["gpu"], "gemm-bf16", Verdict.FAIL, 600.0, reason="silent data corruption", uuid=d["uuid"]
    )
    (r,) = ctx.settle([bad])
    assert r.gpu == 3 and r.uuid == "GPU-afe9f2ed-9dd0-572c-3cd8-b42b58b3bc99"
    assert r.evidence["identity"]["cuda_device"] == "cuda:0" and r.evidence["identity"]["nvml_index"] == 3


def test_cuda_visible_devices_subset() -> None:
    """CUDA_VISIBLE_DEVICES=5,2: CUDA sees two devices, numbered 0 and 1; NVML still lists all eight."""
    devs, _, _ = _devices(fake_torch([5, 2]), CUDA, Nvml())  # type: ignore[arg-type]
    assert [(d["device"], d["gpu"]) for d in devs] == [("cuda:0", 5), ("cuda:1", 2)]


def test_without_a_uuid_the_pci_bus_id_matches_and_says_so() -> None:
    devs, _, _ = _devices(fake_torch(FASTEST_FIRST, with_uuid=False), CUDA, Nvml())  # type: ignore[arg-type]
    assert [d["gpu"] for d in devs] == FASTEST_FIRST
    assert all(d["identity"]["matched_by"] == "pci" for d in devs)
    assert (
        devs[0]["identity"]["note"]
        == "matched by PCI bus id 0000:5d:00: no UUID to match by (CUDA gave none)"
    )
    assert devs[0]["uuid"] == "GPU-afe9f2ed-9dd0-572c-3cd8-b42b58b3bc99"  # NVML's, for the verdict


def test_nothing_to_match_by_is_unmatched_never_cuda_i() -> None:
    # an older torch: neither UUID nor PCI location
    devs, _, _ = _devices(fake_torch([1, 0], with_uuid=False, with_pci=False), CUDA, Nvml())  # type: ignore[arg-type]
    assert [d["gpu"] for d in devs] == [None, None]
    assert devs[0]["identity"]["note"] == "no UUID from CUDA and no PCI bus id"
    # NVML did not open: CUDA's own UUID names the GPU, the NVML index is unknown
    devs, _, _ = _devices(fake_torch([1, 0]), CUDA, None)
    assert [(d["gpu"], d["uuid"]) for d in devs] == [
        (None, nvml_gpus()[1]["uuid"]),
        (None, nvml_gpus()[0]["uuid"]),
    ]
    assert devs[0]["identity"]["note"] == "no NVML GPU list (NVML did not open): the NVML index is unknown"


def test_a_uuid_nvml_does_not_list_is_not_matched_by_its_pci_slot() -> None:
    """A GPU swapped between the two reads (or a MIG/VM view) has another UUID at the same slot: unmatched."""
    ids = nvml_ids()
    cuda = read_cuda(fake_torch([4]))
    swapped = CudaId(0, "GPU-00000000-1111-2222-3333-444444444444", cuda[0].pci_bus_id)
    (m,) = match([swapped], ids)
    assert m.index is None and m.by is None and m.uuid == "GPU-00000000-1111-2222-3333-444444444444"
    assert m.note == (
        "NVML lists no GPU with UUID GPU-00000000-1111-2222-3333-444444444444 "
        "(NVML GPU 4 at the same PCI bus id 0000:9b:00 is GPU-2b6f61f9-8b00-3b57-d912-b62792120662)"
    )
    # one NVML GPU is never matched twice
    same = read_cuda(fake_torch([4, 4]))
    assert [x.index for x in match(same, ids)] == [4, None]


@pytest.mark.parametrize(
    "raw, want",
    [
        ("90d6b7e5-2652-143a-5de3-3e8f08438f77", "GPU-90d6b7e5-2652-143a-5de3-3e8f08438f77"),
        ("GPU-90D6B7E5-2652-143A-5DE3-3E8F08438F77", "GPU-90d6b7e5-2652-143a-5de3-3e8f08438f77"),
        ("MIG-1f2e3d4c-0000-5555-aaaa-bbbbccccdddd", "MIG-1f2e3d4c-0000-5555-aaaa-bbbbccccdddd"),
        ("00000000-0000-0000-0000-000000000000", None),
        ("", None),
        (None, None),
    ],
)
def test_uuid_spellings(raw: str | None, want: str | None) -> None:
    assert norm_uuid(raw) == want


def test_a_gpu_only_cuda_named_still_meets_its_peers() -> None:
    """Unmatched (gpu None) but named by UUID: still judged against the node's other GPUs."""
    rs = [
        Result("n", None, "hbm", Verdict.PASS, f, uuid=f"GPU-{i}")
        for i, f in enumerate([3000.0, 3000.0, 1000.0])
    ]
    apply_peers(rs)
    assert [r.verdict for r in rs] == [Verdict.PASS, Verdict.PASS, Verdict.FAIL]


def test_the_allreduce_names_the_gpus_that_received_wrong_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank k runs on cuda:k: a wrong value received on rank 2 names NVML GPU 7 (FASTEST_FIRST[2]). NCCL
    cannot run here: the all-reduce's table is the one its workers would write (test_burnin_allreduce.py
    runs the real thing over gloo)."""
    from fleettool.burnin import allreduce
    from fleettool.burnin.steps import run_allreduce

    row = {"size_bytes": 1 << 20, "time_us": 9.0, "algbw_gbps": 116.5, "busbw_gbps": 203.9}
    table = {
        "world": 8,
        "backend": "nccl",
        "rows": [{**row, "wrong": 1, "checked": 8 << 18, "wrong_ranks": [2]}],
    }
    monkeypatch.setattr(allreduce, "run_local", lambda *_a, **_k: table)
    devs, _, _ = _devices(fake_torch(FASTEST_FIRST), CUDA, Nvml())  # type: ignore[arg-type]
    (r,) = run_allreduce(StepContext(CUDA, None, devs, BurninReport("r", "n", 0.0)))
    assert r.verdict == Verdict.FAIL and r.reason.endswith("(received on rank 2)")
    (where,) = r.evidence["wrong_devices"]
    assert (
        where["cuda_device"] == "cuda:2"
        and where["nvml_index"] == 7
        and where["uuid"] == nvml_gpus()[7]["uuid"]
    )
