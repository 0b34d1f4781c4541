"""Kubernetes nodes' topology from `kubectl get nodes -o json` (a v1 List of Node objects, their labels).

Labels read (each documented where it is defined):
- `topology.kubernetes.io/zone`: Kubernetes well-known labels,
  https://kubernetes.io/docs/reference/labels-annotations-taints/#topologykubernetesiozone -> `zone`;
- a rack label, `topology.kubernetes.io/rack` unless configured (not a Kubernetes-defined label; clusters set
  their own) -> `rack`;
- `nvidia.com/gpu.clique` and `nvidia.com/gpu.product`: NVIDIA GPU Feature Discovery
  (https://github.com/NVIDIA/k8s-device-plugin, docs/gpu-feature-discovery; the clique label is written by
  internal/lm/imex.go as `<ClusterUUID>.<CliqueID>` from NVML's GPU fabric info) -> `clique`, `nvlink_domain`
  (the ClusterUUID: the NVLink domain the GPUs are attached to) and `gpu_product`.
Pure: text in, node -> keys and issues out.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleettool.formats.errors import ParseIssue

RACK_LABEL = "topology.kubernetes.io/rack"
_RE_NODE_KIND = re.compile(r'"kind"\s*:\s*"Node"')
_RE_LIST_KIND = re.compile(r'"kind"\s*:\s*"(?:List|NodeList)"')


def sniff(text: str) -> bool:
    """A `kubectl get nodes -o json` document (a List, its items Nodes), from its first bytes."""
    return (
        text.lstrip().startswith("{")
        and bool(_RE_LIST_KIND.search(text))
        and (bool(_RE_NODE_KIND.search(text)) or '"items": []' in text)
    )


def parse_kube_nodes(
    text: str, path: str = "-", rack_label: str = RACK_LABEL
) -> tuple[dict[str, dict[str, str]], list[ParseIssue]]:
    issues: list[ParseIssue] = []
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as e:
        return {}, [ParseIssue(path, e.lineno, f"not JSON: {e.msg} (column {e.colno})")]
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return {}, [ParseIssue(path, 1, "no items list: not kubectl get nodes -o json")]
    out: dict[str, dict[str, str]] = {}
    for i, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            issues.append(ParseIssue(path, _line_of(text, i), f"items[{i}] has no metadata.name"))
            continue
        labels = meta.get("labels") or {}  # type: ignore[union-attr]
        keys: dict[str, str] = {}
        for label, key in (
            ("topology.kubernetes.io/zone", "zone"),
            (rack_label, "rack"),
            ("nvidia.com/gpu.clique", "clique"),
            ("nvidia.com/gpu.product", "gpu_product"),
        ):
            v = labels.get(label) if isinstance(labels, dict) else None
            if isinstance(v, str) and v:
                keys[key] = v
        if "clique" in keys:
            keys["nvlink_domain"] = keys["clique"].rpartition(".")[0] or keys["clique"]
        out[name] = keys
    return out, issues


def _line_of(text: str, index: int) -> int:
    """The line of the index-th `"kind": "Node"` (the item's own line, near enough to find it)."""
    hits = list(_RE_NODE_KIND.finditer(text))
    if index < len(hits):
        return text.count("\n", 0, hits[index].start()) + 1
    return 1
